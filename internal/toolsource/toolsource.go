// Package toolsource is the life every configured tool source shares, so
// that a kind of source (MCP servers, OpenAPI services, Lambda functions,
// and whatever comes next) is only its protocol.
//
// A Kind registers under the server list's "type" and decodes its entries
// (Decode, strictly: an unknown field is an error) into a Spec: the common
// block every entry has (Config: name, allow/deny/approval globs, the call
// timeout, headers with secret references) and the kind's own fields. A
// Set opens each Spec's Server through its Kind and owns what they share:
//
//   - the lifecycle: a server is loading until its first Load ends, then
//     healthy, degraded (serving, but its catalog may be stale) or
//     unavailable (calls fail at once with a retryable UNAVAILABLE, while
//     its last known tools stay listed, so that a call reads as "down",
//     not "missing");
//   - one retry policy (Retry): a failed load is tried again in the
//     background with jittered exponential backoff, then on demand;
//   - the checks before anything is sent: the tool exists, the allow and
//     deny lists let it run, the destructive policy lets it run, its
//     arguments match its input schema;
//   - one Health shape, one redactor that every error and log line passes
//     through, and Close.
//
// Caddy's modules are the model (an ID, a constructor, config decoded by
// ID, provision and clean-up); unlike caddy, the registry is a value the
// wiring builds, not a package-level map, so a test may declare a kind of
// its own without touching anyone else's process.
package toolsource

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/secretref"
)

// Kind is one kind of tool source.
type Kind interface {
	// Info names the kind and says how the Set treats it.
	Info() KindInfo
	// Decode reads one entry of the server list, strictly (DecodeEntry
	// does it for a struct that embeds Fields inline), and validates it.
	Decode(entry *yaml.Node) (Spec, error)
	// Open builds the server spec describes. It must not wait on the
	// network: the Set calls Load, in the background or, for an eager
	// kind, before New returns. The Handle is the server's way back to
	// the Set; it stays valid until Close.
	Open(ctx context.Context, spec Spec, h *Handle) (Server, error)
}

// KindInfo is what the Set needs to know of a kind.
type KindInfo struct {
	// Type is the server list's "type": "mcp", "openapi", "lambda".
	Type string
	// Noun is what messages call one of its servers ("MCP server").
	Noun string
	// ToolNoun is what messages call one of its tools ("tool", or
	// "operation"); "tool" when empty.
	ToolNoun string
	// Eager kinds are loaded before New returns (concurrently), and a
	// permanent load error (Permanent) is a configuration error that
	// fails New: an OpenAPI document refused is a mistake to report at
	// start. Others load in the background, and the first Tools or Call
	// waits for their first attempt.
	Eager bool
}

// Spec is one configured server: the common block and the kind's own
// configuration, validated. The kind's Decode makes it; its Open reads it
// back (kinds type-assert their own).
type Spec interface {
	// Base is the common block.
	Base() Config
}

// Server is one running server of a kind: the protocol, and nothing the
// Set does for every kind.
type Server interface {
	// Load makes the server ready and lists its tools: connects, fetches
	// a document, reads tags. The Set calls it at start and again by its
	// retry policy after a failure or a Handle.Lost; never two at once.
	// An error wrapped with Permanent stops the retries until demand.
	Load(ctx context.Context) ([]Tool, error)
	// Call runs one tool. The Set has checked that the tool is listed and
	// allowed, and its arguments against its input schema.
	Call(ctx context.Context, c Call) (json.RawMessage, error)
	// Close releases what the server holds; the Set calls it once, after
	// its background work has stopped.
	Close() error
}

// Tool is one tool a server lists.
type Tool struct {
	catalog.Tool
	// Ref is the kind's own handle on the tool (an operation, a function),
	// handed back with each Call so that the kind keeps no second map.
	Ref any
}

// Call is one tool call, checked.
type Call struct {
	// Tool is the tool as listed; Ref its kind's handle.
	Tool catalog.Tool
	Ref  any
	// Args are the arguments, checked against the input schema (an
	// absent object reads {}).
	Args json.RawMessage
	// Timeout bounds the call (the server's call_timeout, else
	// DefaultCallTimeout): the kind applies it, as only it can tell a
	// silent server from an abandoned call.
	Timeout time.Duration
	// Options are the per-call options: the lineage, the answers to a
	// question the server asked (Retry), and what later issues add (an
	// idempotency key), for the kind to carry in its protocol.
	Options execution.CallOptions
}

// Freshener is a Server whose catalog ages (an MCP server's list has a
// time to live): the Set calls Freshen on every Tools and Call of a ready
// server, and the server refreshes in the background when it is due.
type Freshener interface {
	Freshen()
}

// Describer is a Server with more to say in its Health than the Set knows
// (its URL, the transport and protocol revision it agreed).
type Describer interface {
	Describe(h *Health)
}

// Env is what every kind may use of the process: shared so that one
// secret is read once, one AWS configuration is loaded once, and OAuth
// credentials live in one place.
type Env struct {
	// Logger receives the sources' records, scrubbed of every secret the
	// Set knows (slog.Default() when nil).
	Logger *slog.Logger
	// Refs resolves secret references (${env:}, ${file:}, ${secret:}).
	Refs *secretref.Resolver
	// AWS loads the process's AWS configuration, when first needed.
	AWS func(context.Context) (aws.Config, error)
	// OAuth is where OAuth credentials are kept and who may log in.
	OAuth OAuth
	// Retry is the retry policy (DefaultRetry when zero).
	Retry Retry
}

// OAuth says where HTTP sources keep OAuth credentials and whether they
// may log in by themselves (oauthclient.Setup's process-wide fields).
type OAuth struct {
	CredentialsDir string
	Secrets        func(context.Context) (oauthclient.SecretsAPI, error)
	Agent          oauthclient.UserAgent
}
