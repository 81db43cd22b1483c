package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"golang.org/x/net/http/httpproxy"
	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// Type is the server list's "type" of this kind.
const Type = "openapi"

// defaultMaxResultBytes caps a response body.
const defaultMaxResultBytes = 1 << 20

// maxErrorBody bounds the part of an error response quoted in a
// TOOL_ERROR, in bytes.
const maxErrorBody = 2048

// Kind is the kind of OpenAPI services.
type Kind struct {
	// Transport, when set, is the HTTP transport under every request of
	// every server (tests), and the connect-time rule (dialGuard) is its
	// own to keep; by default each server has two clones of
	// http.DefaultTransport of its own: one whose connections dialGuard
	// makes, for the document and the calls, and one for OAuth's token
	// and discovery requests, whose answers no script reads.
	Transport http.RoundTripper
	// Resolver, when set, resolves the names requests go to (tests: a
	// fake DNS server); net.DefaultResolver by default.
	Resolver *net.Resolver
	// CacheDir, when set, is where documents are kept as Parse made them,
	// keyed by their digest (see cache), so that a process reads a
	// document it has seen back instead of parsing it again; "" parses
	// every time. CacheDir(the compiled guest's cache) is the usual one.
	CacheDir string
	// ShippedCacheDir, when set, holds entries read after CacheDir's and
	// never written: a Lambda artifact's (CacheDir of its shipped guest
	// cache), which a build may pre-warm.
	ShippedCacheDir string
}

// Info implements toolsource.Kind. OpenAPI servers are eager: a document
// that is refused (out of bounds, not OpenAPI 3, servers elsewhere, no
// usable operation) or a file that cannot be read is a mistake in the
// configuration, told when the process starts; a URL that cannot be
// fetched now leaves its server unavailable, and the Set tries again.
func (Kind) Info() toolsource.KindInfo {
	return toolsource.KindInfo{Type: Type, Noun: "OpenAPI server", ToolNoun: "operation", Eager: true}
}

// Decode implements toolsource.Kind.
func (Kind) Decode(n *yaml.Node) (toolsource.Spec, error) { return decode(n) }

// Open implements toolsource.Kind.
func (k Kind) Open(_ context.Context, spec toolsource.Spec, h *toolsource.Handle) (toolsource.Server, error) {
	c, err := toolsource.SpecAs[Config](spec)
	if err != nil {
		return nil, err
	}
	h.Learn(c.literals()...)
	sv := &server{cfg: c, h: h, base: k.Transport, authBase: k.Transport, cache: newCache(k.CacheDir, k.ShippedCacheDir)}
	if sv.base == nil {
		guard := newDialGuard(c, os.Getenv("AWS_LAMBDA_RUNTIME_API"), httpproxy.FromEnvironment(), k.Resolver)
		sv.tr = http.DefaultTransport.(*http.Transport).Clone()
		sv.tr.MaxIdleConnsPerHost = 64
		sv.tr.DialContext = guard.DialContext
		sv.base = sv.tr
		sv.authTr = http.DefaultTransport.(*http.Transport).Clone()
		sv.authBase = sv.authTr
	}
	// Built at the first load, not here: OAuth's client secret may be
	// read from Secrets Manager, and Open does not wait on the network.
	sv.client = sync.OnceValues(sv.newClient)
	return sv, nil
}

// server is one configured OpenAPI service.
type server struct {
	cfg Config
	h   *toolsource.Handle
	// base is the transport under the document's fetch and every call,
	// authBase under OAuth's own requests; tr and authTr are the server's
	// own, when it has them, whose idle connections Close closes.
	base, authBase http.RoundTripper
	tr, authTr     *http.Transport
	// client sends the document's fetch and every call, authorised.
	client func() (*http.Client, error)
	// doc is the document last loaded, nil before.
	doc atomic.Pointer[Document]
	// cache keeps parsed documents between processes; nil for none.
	cache *cache
}

// target is a tool's handle: its operation and the base URL of the
// document it came from.
type target struct {
	op   *Operation
	base *url.URL
}

// newClient makes the HTTP client of the server's requests: redirects
// only on the same host, and OAuth's or SigV4's credentials when the
// configuration asks for them.
func (sv *server) newClient() (*http.Client, error) {
	c := &http.Client{Transport: sv.base, CheckRedirect: sameHostRedirects}
	env := sv.h.Env()
	switch {
	case sv.cfg.oauth():
		src, err := oauthclient.Build(sv.h.Context(), oauthclient.Setup{Name: sv.cfg.Name, URL: sv.cfg.BaseURL, Config: sv.cfg.Auth.Config,
			CredentialsDir: env.OAuth.CredentialsDir, Secrets: env.OAuth.Secrets, Refs: env.Refs, Agent: env.OAuth.Agent,
			HTTPClient: &http.Client{Transport: sv.authBase, Timeout: time.Minute}, AddSecret: sv.h.Learn,
			Options: func(o *oauthclient.Options) { o.Logger = sv.h.Logger() }})
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		c.Transport = &oauthclient.Transport{Base: sv.base, Source: src}
	case sv.cfg.sigV4():
		c.Transport = &sigV4Transport{base: sv.base, cfg: sv.cfg.Auth, aws: env.AWS}
	}
	return c, nil
}

// Load implements toolsource.Server: fetches the document and converts
// it. A document refused, a file that cannot be read, credentials that
// cannot be set up, or a document URL whose address the connect-time rule
// refuses (dialGuard) are permanent; a URL that cannot be fetched now is
// not.
func (sv *server) Load(ctx context.Context) ([]toolsource.Tool, error) {
	client, err := sv.client()
	if err != nil {
		return nil, toolsource.Permanent(err)
	}
	if doc := sv.cachedFile(); doc != nil {
		return sv.loaded(doc, cacheHit), nil
	}
	data, loc, err := Fetch(ctx, &http.Client{Transport: client.Transport}, sv.cfg.Spec, sv.cfg.FetchTimeout)
	if err != nil {
		if isURL(sv.cfg.Spec) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, errCrossHostRedirect) && !errors.Is(err, ErrRefusedAddress) {
			return nil, err
		}
		return nil, toolsource.Permanent(err)
	}
	doc, from, err := sv.parse(data, loc)
	if err != nil {
		return nil, toolsource.Permanent(err)
	}
	return sv.loaded(doc, from), nil
}

// loaded makes doc the server's document and returns its tools; from is
// what the cache did.
func (sv *server) loaded(doc *Document, from string) []toolsource.Tool {
	tools := sv.tools(doc)
	sv.doc.Store(doc)
	sv.h.Logger().Info("openapi service loaded", "title", doc.Title, "version", doc.Version, "base", doc.Base.Redacted(),
		"operations", len(doc.Operations), "dropped", len(doc.Drops), "cache", from)
	for _, d := range doc.Drops {
		sv.h.Drop(d.Operation, d.Reason)
	}
	return tools
}

// cachedFile is the document of a file spec read back from the cache,
// nil when there is none to read. The file's digest is read back from its
// stat record, or taken as the file is read, in pieces, within
// MaxDocumentBytes (cache.fileDigest): a hit never holds the whole
// document in memory. Anything else (no cache, a URL, a file that cannot
// be read, a miss) is left to Fetch and parse, which read the file again
// and key what they parse by the bytes they parsed.
func (sv *server) cachedFile() *Document {
	if sv.cache == nil || isURL(sv.cfg.Spec) {
		return nil
	}
	loc := fileURL(sv.cfg.Spec)
	in := inputs{docURL: keyLocation(loc), base: sv.cfg.BaseURL}
	digest, err := sv.cache.fileDigest(sv.cfg.Spec)
	if err != nil {
		return nil
	}
	in.digest = digest
	doc, err := sv.cache.get(in, loc)
	if err != nil && !errors.Is(err, errCacheMiss) {
		sv.h.Logger().Warn("openapi cache entry not used; parsing the document", "dir", sv.cache.dir, "err", err)
	}
	return doc
}

// What the log says of the cache when a document is loaded.
const (
	cacheOff  = "off"  // no cache directory
	cacheHit  = "hit"  // read back, not parsed
	cacheMiss = "miss" // parsed (and written, unless the log says otherwise)
)

// parse is Parse through the cache: the document read back when an entry
// of these very bytes, location, base URL and build holds (and passes
// every check of cache.get), else parsed and written for the next process.
// A cache that cannot be read or written only costs the parse: a
// read-only directory (a Lambda function's artifact) is as good as none.
func (sv *server) parse(data []byte, loc *url.URL) (*Document, string, error) {
	if sv.cache == nil {
		doc, err := Parse(data, loc, sv.cfg.BaseURL)
		return doc, cacheOff, err
	}
	in := inputsOf(data, loc, sv.cfg.BaseURL)
	log := sv.h.Logger()
	if isURL(sv.cfg.Spec) {
		// A file's entry was looked for already (cachedFile).
		doc, err := sv.cache.get(in, loc)
		if err == nil {
			return doc, cacheHit, nil
		}
		if !errors.Is(err, errCacheMiss) {
			log.Warn("openapi cache entry not used; parsing the document", "dir", sv.cache.dir, "err", err)
		}
	}
	doc, err := Parse(data, loc, sv.cfg.BaseURL)
	if err != nil {
		return nil, cacheMiss, err
	}
	if err := sv.cache.put(in, doc); err != nil {
		log.Info("openapi cache not written; the next process parses the document again", "dir", sv.cache.dir, "err", err)
	}
	return doc, cacheMiss, nil
}

// tools are the document's operations as this server's tools, with the
// configuration's marks applied.
func (sv *server) tools(doc *Document) []toolsource.Tool {
	red := sv.h.Redactor()
	out := make([]toolsource.Tool, 0, len(doc.Operations))
	t, f := true, false
	for _, op := range doc.Operations {
		tool := op.Tool
		// As the MCP pool does: a document that quotes a configured
		// secret does not show it in the catalog, nor, where its
		// description is cut, the start of one.
		tool.Title, tool.Description = red.String(tool.Title), red.Cut(tool.Description, maxDescription)
		tool.InputSchema, tool.OutputSchema = red.JSON(tool.InputSchema), red.JSON(tool.OutputSchema)
		switch {
		case catalog.MatchAnyToolGlob(sv.cfg.Destructive, tool.Name):
			tool.Annotations.ReadOnly, tool.Annotations.Destructive = &f, &t
		case catalog.MatchAnyGlob(sv.cfg.ReadOnly, tool.Name):
			tool.Annotations.ReadOnly, tool.Annotations.Destructive = &t, &f
		}
		tool.Endpoint = endpointOf(op, doc.Base)
		out = append(out, toolsource.Tool{Tool: tool, Ref: target{op: op, base: doc.Base}})
	}
	return out
}

// endpointOf is what a call of op reaches: its method, its path template
// under the base URL's path, and the host (as newRequest builds them).
func endpointOf(op *Operation, base *url.URL) *catalog.Endpoint {
	if op.Server != nil {
		base = op.Server
	}
	e := &catalog.Endpoint{Method: op.Method, Path: op.Path}
	if base != nil {
		e.Path, e.Host = strings.TrimSuffix(base.Path, "/")+op.Path, base.Host
	}
	return e
}

// Describe implements toolsource.Describer: the URL is where requests go
// once the document is loaded, before that the configured base or the
// document's location.
func (sv *server) Describe(h *toolsource.Health) {
	switch doc := sv.doc.Load(); {
	case doc != nil:
		h.URL = doc.Base.Redacted()
	case sv.cfg.BaseURL != "":
		h.URL = redact.URL(sv.cfg.BaseURL)
	default:
		h.URL = redact.URL(sv.cfg.Spec)
	}
}

// Close implements toolsource.Server.
func (sv *server) Close() error {
	for _, tr := range []*http.Transport{sv.tr, sv.authTr} {
		if tr != nil {
			tr.CloseIdleConnections()
		}
	}
	return nil
}

// Call implements toolsource.Server: one request. A response outside 2xx
// is a TOOL_ERROR with the status and the start of the body; a refusal
// (401, 403) after a secret the credentials come from was rotated is sent
// once more with the new value.
func (sv *server) Call(ctx context.Context, c toolsource.Call) (json.RawMessage, error) {
	full := c.Tool.FullName()
	tg := c.Ref.(target)
	client, err := sv.client()
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "").WithTool(full)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, c.Timeout, errCallTimeout)
	defer cancel()
	send := func() (*http.Response, error) {
		req, err := tg.op.newRequest(tctx, tg.base, c.Args)
		if err != nil {
			return nil, fault.As(err).WithTool(full)
		}
		for k, v := range tracectx.Headers(ctx) {
			req.Header.Set(k, v)
		}
		if err := sv.addCredentials(tctx, req); err != nil {
			return nil, fault.Wrap(fault.Unavailable, err, "credentials").WithTool(full)
		}
		if key := c.Options.IdempotencyKey; key != "" {
			// An effect's key, last: neither an argument bound to a
			// header nor a configured one stands in for it.
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set("User-Agent", "pml-sandbox")
		resp, err := client.Do(req)
		if err != nil {
			return nil, sv.classify(ctx, tctx, err, full, c.Timeout)
		}
		return resp, nil
	}
	resp, err := send()
	if err != nil {
		return nil, err
	}
	if sv.rotated(tctx, resp.StatusCode) {
		// The credentials were refused and a secret they come from has
		// changed since it was read: once more, with the new value.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		_ = resp.Body.Close()
		if resp, err = send(); err != nil {
			return nil, err
		}
	}
	defer resp.Body.Close()
	return sv.result(tctx, ctx, resp, full, c.Timeout)
}

// rotated reports whether a response with status means a credential
// from Secrets Manager was rotated: the service refused the request (401,
// 403), a header or query value references a secret, and reading it again
// gave another value (secretref.Resolver.Refresh).
func (sv *server) rotated(ctx context.Context, status int) bool {
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		return false
	}
	var vs []string
	for _, m := range []map[string]string{sv.cfg.Headers, sv.cfg.Query} {
		for _, v := range m {
			if secretref.HasSecret(v) {
				vs = append(vs, v)
			}
		}
	}
	if len(vs) == 0 {
		return false
	}
	changed, err := sv.h.Env().Refs.Refresh(ctx, vs...)
	if err != nil {
		sv.h.Logger().Warn("reading the service's secrets again after a refusal", "err", err)
	}
	return changed
}

var errCallTimeout = errors.New("call timed out")

// addCredentials puts the configured headers and query values on req,
// their secret references resolved now (a Secrets Manager secret from the
// process's cache while it is fresh), so that a rotated secret is read on
// the next call; every resolved value is learned (Handle.Learn), so that
// results and errors mask it, before the request can go out.
func (sv *server) addCredentials(ctx context.Context, req *http.Request) error {
	refs := sv.h.Env().Refs
	for k, v := range sv.cfg.Headers {
		r, err := refs.Resolve(ctx, "header "+k, v)
		if err != nil {
			return err
		}
		if strings.ContainsAny(r, "\r\n") {
			return fmt.Errorf("header %s: resolved value contains a line break", k)
		}
		sv.h.Learn(secretref.HeaderSecrets(r)...)
		req.Header.Set(k, r)
	}
	if len(sv.cfg.Query) > 0 {
		q := req.URL.Query()
		for k, v := range sv.cfg.Query {
			r, err := refs.Resolve(ctx, "query "+k, v)
			if err != nil {
				return err
			}
			sv.h.Learn(r)
			q.Set(k, r)
		}
		req.URL.RawQuery = q.Encode()
	}
	return nil
}

// classify turns a failed request into the error the caller sees.
func (sv *server) classify(ctx, tctx context.Context, err error, full string, timeout time.Duration) error {
	var ae *oauthclient.Error
	switch {
	case errors.As(err, &ae):
		return fault.Wrap(fault.Unavailable, ae, "").WithTool(full)
	case tctx.Err() != nil && errors.Is(context.Cause(tctx), errCallTimeout):
		return &fault.Error{Code: fault.Timeout, Message: fmt.Sprintf("no answer within %s", timeout), Tool: full}
	case ctx.Err() != nil:
		return fault.Wrap(fault.Timeout, context.Cause(ctx), "call abandoned").WithTool(full)
	}
	var refused *refusedError
	if errors.As(err, &refused) {
		// The configuration must change for it to go through: not
		// retryable.
		return fault.Wrap(fault.Forbidden, refused, "").WithTool(full)
	}
	e := fault.Wrap(fault.Unavailable, unwrapURLError(err), fmt.Sprintf("OpenAPI server %q is unreachable", sv.cfg.Name)).WithTool(full)
	e.Retryable = true
	return e
}

// result reads a response: a 2xx body as the call's value (parsed by its
// content type), anything else as a TOOL_ERROR.
func (sv *server) result(tctx, ctx context.Context, resp *http.Response, full string, timeout time.Duration) (json.RawMessage, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, defaultMaxResultBytes+1))
	if err != nil {
		return nil, sv.classify(ctx, tctx, err, full, timeout)
	}
	if len(body) > defaultMaxResultBytes {
		return nil, fault.Limitf(fault.LimitResultBytes, "the response is over the %d-byte limit", defaultMaxResultBytes).WithTool(full)
	}
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			msg += ": " + errNotFollowed.Error() + " (only redirects on the same host are followed)"
		} else if t := sv.errorText(body); t != "" {
			msg += ": " + t
		}
		e := &fault.Error{Code: fault.ToolError, Message: msg, Tool: full, Details: map[string]any{"status": resp.StatusCode}}
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			e.Retryable = true
		}
		return nil, e
	}
	return parseBody(body, ct, sv.h.Redactor())
}

// errorText is the start of an error response's body, on one line,
// masked before it is cut (Handle.Scrubber): a script that pads what the
// service echoes can put the cut anywhere.
func (sv *server) errorText(body []byte) string {
	red := sv.h.Scrubber()
	// Masked first as a parser reads it (a secret written with JSON
	// escapes), and before white space is folded (which may change a
	// secret's own); Cut masks again what the folding joined.
	body = red.JSON(body)
	s := strings.TrimSpace(string(bytes.ToValidUTF8(body, []byte("?"))))
	if json.Valid([]byte(s)) {
		var b bytes.Buffer
		if json.Compact(&b, []byte(s)) == nil {
			s = b.String()
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	return red.Cut(s, maxErrorBody)
}

// parseBody is a successful response's value: JSON as it is, text as a
// string, nothing as null, and anything else as {content_type, base64},
// of the bytes with every secret red knows masked first. The Set masks
// the value too, but a secret encoded in base64 is found there only when
// it is long enough and the encoding is left whole; masked in the raw
// bytes it is found in any case, and the base64 stays valid. That changes
// a binary body that holds a secret (an image, an archive): the mask
// takes its place, and the script gets bytes that are not the service's.
func parseBody(body []byte, ct string, red *redact.Redactor) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return json.RawMessage("null"), nil
	}
	base := mediaType(ct)
	switch {
	case isJSON(base) || (ct == "" && json.Valid(trimmed)):
		if !json.Valid(trimmed) {
			return nil, fault.New(fault.ToolError, "the response says %s but is not valid JSON", base)
		}
		return trimmed, nil
	case strings.HasPrefix(base, "text/") || strings.HasSuffix(base, "xml") || base == "" && utf8.Valid(body):
		return json.Marshal(string(body))
	}
	masked := red.String(string(body))
	return json.Marshal(map[string]string{"content_type": ct, "base64": base64.StdEncoding.EncodeToString([]byte(masked))})
}

// sigV4Transport signs each request with the process's AWS credentials
// (aws-sdk-go-v2's v4 signer), for API Gateway endpoints with IAM
// authorization.
type sigV4Transport struct {
	base http.RoundTripper
	cfg  Auth
	aws  func(context.Context) (aws.Config, error)
}

func (t *sigV4Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.aws == nil {
		return nil, errors.New("sigv4: no AWS configuration")
	}
	ac, err := t.aws(req.Context())
	if err != nil {
		return nil, fmt.Errorf("sigv4: %w", err)
	}
	if ac.Credentials == nil {
		return nil, errors.New("sigv4: no AWS credentials")
	}
	creds, err := ac.Credentials.Retrieve(req.Context())
	if err != nil {
		return nil, fmt.Errorf("sigv4: credentials: %w", err)
	}
	region, service := t.cfg.Region, t.cfg.Service
	if region == "" {
		region = ac.Region
	}
	if service == "" {
		service = "execute-api"
	}
	var payload []byte
	if req.Body != nil {
		if payload, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	sum := sha256.Sum256(payload)
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(payload))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(payload)), nil }
	if err := v4.NewSigner().SignHTTP(req.Context(), creds, out, hex.EncodeToString(sum[:]), service, region, time.Now()); err != nil {
		return nil, fmt.Errorf("sigv4: %w", err)
	}
	return t.base.RoundTrip(out)
}

var (
	_ toolsource.Kind      = Kind{}
	_ toolsource.Describer = (*server)(nil)
)
