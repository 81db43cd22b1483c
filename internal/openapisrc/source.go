package openapisrc

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
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/oauthclient"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/secretref"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// Health states, as the MCP pool names them.
const (
	StateHealthy     = "healthy"
	StateUnavailable = "unavailable"
)

// defaultMaxResultBytes caps a response body.
const defaultMaxResultBytes = 1 << 20

// maxErrorBody bounds the part of an error response quoted in a
// TOOL_ERROR, in bytes.
const maxErrorBody = 2048

// Retry schedule of a document that could not be fetched: the next Tools
// or Call after the wait tries again.
const (
	retryInitial = 5 * time.Second
	retryMax     = 5 * time.Minute
)

// Options configure a Source.
type Options struct {
	// Logger receives the source's records (slog.Default() when nil),
	// scrubbed of every secret the configurations hold.
	Logger *slog.Logger
	// AWS is the AWS configuration SigV4 signs with (the function's
	// role), loaded when the first signing service starts.
	AWS func(context.Context) (aws.Config, error)
	// CredentialsDir, Secrets and Agent are OAuth's, as for the MCP pool
	// (toolsource.Env.OAuth).
	CredentialsDir string
	Secrets        func(context.Context) (oauthclient.SecretsAPI, error)
	Agent          oauthclient.UserAgent
	// Refs resolves the secret references of headers, query values and
	// OAuth client secrets, shared with the process's other tool sources
	// (toolsource.Env.Refs); nil makes one reading Secrets Manager
	// through Secrets.
	Refs *secretref.Resolver
	// Transport is the HTTP transport under everything (tests; default a
	// clone of http.DefaultTransport per service).
	Transport http.RoundTripper
}

// Health is one service's state.
type Health struct {
	Name string `json:"name"`
	// URL is where requests go, without credentials.
	URL       string    `json:"url"`
	State     string    `json:"state"`
	LastError string    `json:"last_error,omitempty"`
	Since     time.Time `json:"since"`
	Tools     int       `json:"tools"`
	// Dropped counts the operations left out of the tools.
	Dropped int `json:"dropped,omitempty"`
}

// Source offers the operations of OpenAPI services as tools. It owns its
// services' names (execution.ServerSource). It is safe for concurrent
// use; Close waits for the document fetches it started.
type Source struct {
	opts  Options
	log   *slog.Logger
	red   *redact.Redactor
	apis  map[string]*service
	order []*service

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// service is one configured OpenAPI service.
type service struct {
	src *Source
	cfg Config
	// red knows what this service is sent (its headers and query values,
	// resolved; its OAuth tokens): a service that echoes one back in a
	// result or an error has it masked there. The Source's own redactor
	// knows every service's, for logs and health.
	red    *redact.Redactor
	log    *slog.Logger
	drops  *catalog.DropLog
	client *http.Client
	tr     *http.Transport
	// setupErr says why the service cannot be called at all (its OAuth
	// or SigV4 could not be set up).
	setupErr error

	cat atomic.Pointer[toolSet]

	mu       sync.Mutex
	state    string
	lastErr  string
	since    time.Time
	nextTry  time.Time
	wait     time.Duration
	fetching bool
}

// toolSet is one loaded document's tools.
type toolSet struct {
	doc     *Document
	byName  map[string]*entry
	visible []catalog.Tool
}

type entry struct {
	op     *Operation
	tool   catalog.Tool
	denied bool
}

// New validates cfgs and loads every document, concurrently. A document
// that is refused (out of bounds, not OpenAPI 3, servers elsewhere, no
// usable operation) or a file that cannot be read is a configuration
// error (INVALID_REQUEST); a URL that cannot be fetched now leaves its
// service unavailable, tried again on demand.
func New(ctx context.Context, cfgs []Config, opts Options) (*Source, error) {
	seen := map[string]bool{}
	for i, c := range cfgs {
		if err := c.Validate(); err != nil {
			return nil, fault.Wrap(fault.InvalidRequest, fmt.Errorf("openapi servers[%d]: %w", i, err), "")
		}
		if seen[c.Name] {
			return nil, fault.New(fault.InvalidRequest, "openapi servers[%d]: duplicate server name %q", i, c.Name)
		}
		seen[c.Name] = true
	}
	red := redact.New()
	for _, c := range cfgs {
		red.Add(c.secrets()...)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Refs == nil {
		var client func(context.Context) (secretref.API, error)
		if f := opts.Secrets; f != nil {
			client = func(ctx context.Context) (secretref.API, error) { return f(ctx) }
		}
		opts.Refs = secretref.New(client, secretref.Options{})
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Source{opts: opts, log: slog.New(red.Handler(opts.Logger.Handler())), red: red,
		apis: map[string]*service{}, ctx: sctx, cancel: cancel}
	for _, c := range cfgs {
		a := s.newService(c)
		s.apis[c.Name] = a
		s.order = append(s.order, a)
	}
	errs := make([]error, len(s.order))
	var wg sync.WaitGroup
	for i, a := range s.order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.load(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.Close()
		return nil, fault.Wrap(fault.InvalidRequest, errors.New(red.String(err.Error())), "")
	}
	return s, nil
}

func (s *Source) newService(c Config) *service {
	log := s.log.With(slog.String("openapi_server", c.Name))
	a := &service{src: s, cfg: c, red: redact.New(c.secrets()...), log: log, drops: catalog.NewDropLog(log),
		state: StateUnavailable, lastErr: "not loaded yet", since: time.Now()}
	var base http.RoundTripper
	if s.opts.Transport != nil {
		base = s.opts.Transport
	} else {
		a.tr = http.DefaultTransport.(*http.Transport).Clone()
		a.tr.MaxIdleConnsPerHost = 64
		base = a.tr
	}
	a.client = &http.Client{Transport: base, CheckRedirect: sameHostRedirects}
	switch {
	case c.oauth():
		src, err := oauthclient.Build(s.ctx, oauthclient.Setup{Name: c.Name, URL: c.BaseURL, Config: c.Auth.Config,
			CredentialsDir: s.opts.CredentialsDir, Secrets: s.opts.Secrets, Refs: s.opts.Refs, Agent: s.opts.Agent,
			HTTPClient: &http.Client{Transport: base, Timeout: time.Minute}, AddSecret: a.addSecret,
			Options: func(o *oauthclient.Options) { o.Logger = log }})
		if err != nil {
			a.setupErr = fmt.Errorf("auth: %w", err)
			break
		}
		a.client.Transport = &oauthclient.Transport{Base: base, Source: src}
	case c.sigV4():
		a.client.Transport = &sigV4Transport{base: base, cfg: c.Auth, aws: s.opts.AWS}
	}
	return a
}

// addSecret makes both redactors mask secrets.
func (a *service) addSecret(secrets ...string) {
	a.red.Add(secrets...)
	a.src.red.Add(secrets...)
}

// fetchErr is a document that could not be fetched now (the network, the
// server): worth trying again, unlike a document that was refused.
type fetchErr struct{ err error }

func (e *fetchErr) Error() string { return e.err.Error() }
func (e *fetchErr) Unwrap() error { return e.err }

// load fetches and converts the document once; it returns the error of
// a document refused, and records one that could not be fetched.
func (a *service) load(ctx context.Context) error {
	err := a.loadOnce(ctx)
	var fe *fetchErr
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		a.failed(err)
		a.log.Warn("openapi document unavailable; tried again on demand", "err", err)
		return nil
	}
	a.failed(err)
	return fmt.Errorf("openapi server %q: %w", a.cfg.Name, err)
}

func (a *service) loadOnce(ctx context.Context) error {
	if a.setupErr != nil {
		return a.setupErr
	}
	data, loc, err := Fetch(ctx, &http.Client{Transport: a.client.Transport}, a.cfg.Spec, a.cfg.FetchTimeout)
	if err != nil {
		if isURL(a.cfg.Spec) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, errCrossHostRedirect) {
			return &fetchErr{err}
		}
		return err
	}
	doc, err := Parse(data, loc, a.cfg.BaseURL)
	if err != nil {
		return err
	}
	ts := a.buildToolSet(doc)
	a.cat.Store(ts)
	a.mu.Lock()
	a.setState(StateHealthy, "")
	a.wait = 0
	a.mu.Unlock()
	a.log.Info("openapi service loaded", "title", doc.Title, "version", doc.Version, "base", doc.Base.Redacted(),
		"tools", len(ts.visible), "dropped", len(doc.Drops))
	for _, d := range doc.Drops {
		a.drops.Drop(ctx, a.cfg.Name, d.Operation, d.Reason)
	}
	return nil
}

func (a *service) failed(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.setState(StateUnavailable, a.src.red.String(err.Error()))
	a.wait = min(max(2*a.wait, retryInitial), retryMax)
	a.nextTry = time.Now().Add(a.wait)
}

func (a *service) setState(st, lastErr string) {
	if st != a.state {
		a.since = time.Now()
	}
	a.state, a.lastErr = st, lastErr
}

// retry starts another fetch of a document that could not be fetched,
// once its wait is over; it never waits for it.
func (a *service) retry() {
	if a.cat.Load() != nil {
		return
	}
	a.mu.Lock()
	if a.fetching || time.Now().Before(a.nextTry) {
		a.mu.Unlock()
		return
	}
	a.fetching = true
	a.mu.Unlock()
	ok := a.src.spawn(func() {
		_ = a.load(a.src.ctx)
		a.mu.Lock()
		a.fetching = false
		a.mu.Unlock()
	})
	if !ok {
		a.mu.Lock()
		a.fetching = false
		a.mu.Unlock()
	}
}

func (s *Source) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// buildToolSet names the document's operations as this service's tools,
// with the configuration's lists and marks applied.
func (a *service) buildToolSet(doc *Document) *toolSet {
	ts := &toolSet{doc: doc, byName: make(map[string]*entry, len(doc.Operations))}
	t, f := true, false
	for _, op := range doc.Operations {
		tool := op.Tool
		tool.Server = a.cfg.Name
		// As the MCP pool does: a document that quotes a configured
		// secret does not show it in the catalog.
		tool.Title, tool.Description = a.red.String(tool.Title), a.red.String(tool.Description)
		tool.InputSchema, tool.OutputSchema = a.red.JSON(tool.InputSchema), a.red.JSON(tool.OutputSchema)
		ann := tool.Annotations
		switch {
		case catalog.MatchAnyToolGlob(a.cfg.Destructive, tool.Name):
			ann.ReadOnly, ann.Destructive = &f, &t
		case catalog.MatchAnyGlob(a.cfg.ReadOnly, tool.Name):
			ann.ReadOnly, ann.Destructive = &t, &f
		}
		tool.Annotations = ann
		tool.RequireApproval = catalog.MatchAnyToolGlob(a.cfg.RequireApproval, tool.Name)
		e := &entry{op: op, tool: tool}
		if why := a.refusal(tool.Name); why != "" {
			e.denied = true
			a.drops.Drop(context.Background(), a.cfg.Name, tool.Name, why)
		}
		ts.byName[tool.Name] = e
		if !e.denied {
			ts.visible = append(ts.visible, tool)
		}
	}
	sort.Slice(ts.visible, func(i, j int) bool { return ts.visible[i].Name < ts.visible[j].Name })
	return ts
}

// refusal says why the allow and deny lists hide a tool, "" when they do
// not (the rule every source applies).
func (a *service) refusal(tool string) string {
	return catalog.Refusal(a.cfg.Allow, a.cfg.Deny, tool)
}

// Tools implements execution.ToolSource: every loaded service's visible
// operations, in configuration order.
func (s *Source) Tools(ctx context.Context) ([]catalog.Tool, error) {
	var out []catalog.Tool
	for _, a := range s.order {
		ts := a.cat.Load()
		if ts == nil {
			a.retry()
			continue
		}
		out = append(out, ts.visible...)
	}
	return out, nil
}

// Servers implements execution.ServerSource.
func (s *Source) Servers() []string {
	out := make([]string, len(s.order))
	for i, a := range s.order {
		out[i] = a.cfg.Name
	}
	return out
}

// CheckServer implements execution.ServerSource: nil once the service's
// document is loaded.
func (s *Source) CheckServer(server string) error {
	a := s.apis[server]
	if a == nil {
		return fault.New(fault.ToolNotFound, "no OpenAPI server named %q", server)
	}
	if a.cat.Load() != nil {
		return nil
	}
	a.retry()
	return a.unavailable("")
}

func (a *service) unavailable(full string) *fault.Error {
	a.mu.Lock()
	last := a.lastErr
	a.mu.Unlock()
	e := fault.New(fault.Unavailable, "OpenAPI server %q is unavailable: %s", a.cfg.Name, last).WithTool(full)
	e.Retryable = true
	return e
}

// Health reports every service, in configuration order.
func (s *Source) Health() []Health {
	out := make([]Health, 0, len(s.order))
	for _, a := range s.order {
		a.mu.Lock()
		h := Health{Name: a.cfg.Name, URL: redactURL(a.cfg.BaseURL), State: a.state, LastError: a.lastErr, Since: a.since}
		a.mu.Unlock()
		if ts := a.cat.Load(); ts != nil {
			h.Tools, h.Dropped, h.URL = len(ts.visible), len(ts.doc.Drops), ts.doc.Base.Redacted()
		} else if h.URL == "" {
			h.URL = redactURL(a.cfg.Spec)
		}
		out = append(out, h)
	}
	return out
}

// Close stops background fetches and waits for them.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	for _, a := range s.order {
		if a.tr != nil {
			a.tr.CloseIdleConnections()
		}
	}
	return nil
}

// Call implements execution.ToolSource. Before anything is sent it checks
// that the operation exists (TOOL_NOT_FOUND), that the allow and deny
// lists and the destructive policy let it run (FORBIDDEN) and that args
// match its input schema (INVALID_ARGUMENTS). A response outside 2xx is a
// TOOL_ERROR with the status and the start of the body. Error messages are
// scrubbed of every secret the source knows.
func (s *Source) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	out, err := s.call(ctx, t.Server, t.Name, args, opt)
	if err != nil {
		fe := fault.As(err)
		fe.Message = s.red.String(fe.Message)
		return nil, fe
	}
	// The service's own secrets, wherever it echoed them (the redactor's
	// JSON form keeps the result valid JSON).
	if a := s.apis[t.Server]; a != nil {
		out = a.red.JSON(out)
	}
	return out, nil
}

func (s *Source) call(ctx context.Context, server, name string, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	full := server + ":" + name
	a := s.apis[server]
	if a == nil {
		return nil, fault.New(fault.ToolNotFound, "no OpenAPI server named %q", server).WithTool(full)
	}
	ts := a.cat.Load()
	if ts == nil {
		a.retry()
		return nil, a.unavailable(full)
	}
	e := ts.byName[name]
	switch {
	case e == nil:
		return nil, fault.New(fault.ToolNotFound, "OpenAPI server %q has no operation %q", server, name).WithTool(full)
	case e.denied:
		return nil, fault.New(fault.Forbidden, "tool is not allowed by the configuration of server %q", server).WithTool(full)
	case e.tool.IsDestructive() && !a.cfg.AllowDestructive:
		return nil, fault.New(fault.Forbidden, "destructive tool: server %q does not allow destructive tools", server).WithTool(full)
	case e.tool.IsDestructive() && !opt.AllowDestructive:
		return nil, fault.New(fault.Forbidden, "destructive tool: the request does not allow destructive tools").WithTool(full)
	}
	checked, ferr := e.op.input.Check(args)
	if ferr != nil {
		return nil, ferr.WithTool(full)
	}
	timeout := a.cfg.callTimeout()
	tctx, cancel := context.WithTimeoutCause(ctx, timeout, errCallTimeout)
	defer cancel()
	send := func() (*http.Response, error) {
		req, err := e.op.newRequest(tctx, ts.doc.Base, checked)
		if err != nil {
			return nil, fault.As(err).WithTool(full)
		}
		for k, v := range tracectx.Headers(ctx) {
			req.Header.Set(k, v)
		}
		if err := a.addCredentials(tctx, req); err != nil {
			return nil, fault.Wrap(fault.Unavailable, err, "credentials").WithTool(full)
		}
		req.Header.Set("User-Agent", "pml-sandbox")
		resp, err := a.client.Do(req)
		if err != nil {
			return nil, a.classify(ctx, tctx, err, full, timeout)
		}
		return resp, nil
	}
	resp, err := send()
	if err != nil {
		return nil, err
	}
	if a.rotated(tctx, resp.StatusCode) {
		// The credentials were refused and a secret they come from has
		// changed since it was read: once more, with the new value.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		_ = resp.Body.Close()
		if resp, err = send(); err != nil {
			return nil, err
		}
	}
	defer resp.Body.Close()
	return a.result(tctx, ctx, resp, full, timeout)
}

// rotated reports whether a response with status means a credential
// from Secrets Manager was rotated: the service refused the request (401,
// 403), a header or query value references a secret, and reading it again
// gave another value (secretref.Resolver.Refresh).
func (a *service) rotated(ctx context.Context, status int) bool {
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		return false
	}
	var vs []string
	for _, m := range []map[string]string{a.cfg.Headers, a.cfg.Query} {
		for _, v := range m {
			if secretref.HasSecret(v) {
				vs = append(vs, v)
			}
		}
	}
	if len(vs) == 0 {
		return false
	}
	changed, err := a.src.opts.Refs.Refresh(ctx, vs...)
	if err != nil {
		a.log.Warn("reading the service's secrets again after a refusal", "err", err)
	}
	return changed
}

var errCallTimeout = errors.New("call timed out")

// addCredentials puts the configured headers and query values on req,
// their secret references resolved now (a Secrets Manager secret from the
// process's cache while it is fresh), so that a rotated secret is read on
// the next call; every resolved value is added to the redactor before the
// request can go out.
func (a *service) addCredentials(ctx context.Context, req *http.Request) error {
	refs := a.src.opts.Refs
	for k, v := range a.cfg.Headers {
		r, err := refs.Resolve(ctx, "header "+k, v)
		if err != nil {
			return err
		}
		if strings.ContainsAny(r, "\r\n") {
			return fmt.Errorf("header %s: resolved value contains a line break", k)
		}
		a.addSecret(secretref.HeaderSecrets(r)...)
		req.Header.Set(k, r)
	}
	if len(a.cfg.Query) > 0 {
		q := req.URL.Query()
		for k, v := range a.cfg.Query {
			r, err := refs.Resolve(ctx, "query "+k, v)
			if err != nil {
				return err
			}
			a.addSecret(r)
			q.Set(k, r)
		}
		req.URL.RawQuery = q.Encode()
	}
	return nil
}

// classify turns a failed request into the error the caller sees.
func (a *service) classify(ctx, tctx context.Context, err error, full string, timeout time.Duration) error {
	var ae *oauthclient.Error
	switch {
	case errors.As(err, &ae):
		return fault.Wrap(fault.Unavailable, ae, "").WithTool(full)
	case tctx.Err() != nil && errors.Is(context.Cause(tctx), errCallTimeout):
		return &fault.Error{Code: fault.Timeout, Message: fmt.Sprintf("no answer within %s", timeout), Tool: full}
	case ctx.Err() != nil:
		return fault.Wrap(fault.Timeout, context.Cause(ctx), "call abandoned").WithTool(full)
	}
	e := fault.Wrap(fault.Unavailable, unwrapURLError(err), fmt.Sprintf("OpenAPI server %q is unreachable", a.cfg.Name)).WithTool(full)
	e.Retryable = true
	return e
}

// result reads a response: a 2xx body as the call's value (parsed by its
// content type), anything else as a TOOL_ERROR.
func (a *service) result(tctx, ctx context.Context, resp *http.Response, full string, timeout time.Duration) (json.RawMessage, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, defaultMaxResultBytes+1))
	if err != nil {
		return nil, a.classify(ctx, tctx, err, full, timeout)
	}
	if len(body) > defaultMaxResultBytes {
		return nil, fault.Limitf(fault.LimitResultBytes, "the response is over the %d-byte limit", defaultMaxResultBytes).WithTool(full)
	}
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			msg += ": " + errNotFollowed.Error() + " (only redirects on the same host are followed)"
		} else if t := errorText(body); t != "" {
			msg += ": " + t
		}
		e := &fault.Error{Code: fault.ToolError, Message: msg, Tool: full, Details: map[string]any{"status": resp.StatusCode}}
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			e.Retryable = true
		}
		return nil, e
	}
	return parseBody(body, ct)
}

// errorText is the start of an error response's body, on one line.
func errorText(body []byte) string {
	s := strings.TrimSpace(string(bytes.ToValidUTF8(body, []byte("?"))))
	if json.Valid([]byte(s)) {
		var b bytes.Buffer
		if json.Compact(&b, []byte(s)) == nil {
			s = b.String()
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	return truncate(s, maxErrorBody)
}

// parseBody is a successful response's value: JSON as it is, text as a
// string, nothing as null, and anything else as {content_type, base64}.
func parseBody(body []byte, ct string) (json.RawMessage, error) {
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
	return json.Marshal(map[string]string{"content_type": ct, "base64": base64.StdEncoding.EncodeToString(body)})
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

var _ execution.ServerSource = (*Source)(nil)
