// Package openapi is the tool-source kind of REST services described by
// an OpenAPI 3.0 or 3.1 document ("type": "openapi"): one tool per
// operation, reached from a script as mcp.<name>.<operation>(args). The
// kind is the protocol only: reading the document, building each call's
// request, its credentials (headers and query values with secret
// references, OAuth through oauthclient, SigV4) and reading the answer.
// Everything else a call goes through (allow and deny lists, the
// destructive policy, require_approval, the argument check against the
// input schema, health, retries, masking what the service is sent) is
// internal/toolsource's.
//
// The document is read with github.com/getkin/kin-openapi's openapi3 model
// (3.0 and 3.1 keywords, parameter serialisation rules), decoded without
// its loader's reference resolution: that resolver recurses once per
// nesting level per $ref hop and its cost grows with the square of that
// depth (a 7 MB document of nested reference cycles took 21 s and 580 MB),
// so a hostile document could stall the host. Here every bound is checked
// before the model is built (size, nesting depth, operation count, time to
// fetch), and schemas keep their references: each tool's schema carries
// the components it reaches under $defs, which is linear in the document
// and handles recursive schemas as JSON Schema does.
//
// Requests go only to the base URL: the document's server, which must be
// on the host the document came from, or one the configuration names; a
// redirect to another host is not followed, and a value never leaves its
// path segment (path parameters are escaped, "." and ".." included). Each
// connection is checked on the address it resolves to when it is made
// (dialGuard): the host's own addresses (loopback, link-local and the
// metadata service, the Lambda runtime API) only when the configuration
// names them.
package openapi
