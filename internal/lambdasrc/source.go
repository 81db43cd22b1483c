// Package lambdasrc offers AWS Lambda functions as tools: each configured
// function is mcp.<server>.<tool>(args), invoked synchronously with the
// arguments as its event and the process's AWS credentials (in the
// deployment, the execute function's role, which the template allows
// lambda:InvokeFunction on the listed functions only). A tool is guarded
// as an MCP server's: its input schema is checked before the invocation,
// allow and deny lists apply, and a function is destructive unless its
// configuration says otherwise. A function error (the invocation's
// FunctionError) is a TOOL_ERROR with the error's type and message.
package lambdasrc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Tags that describe a function whose configuration gives no input
// schema. A tag value holds at most 256 characters, so schemas there are
// small ones.
const (
	TagDescription  = "pml:description"
	TagInputSchema  = "pml:input_schema"
	TagOutputSchema = "pml:output_schema"
)

// Health states, as the MCP pool names them.
const (
	StateHealthy     = "healthy"
	StateUnavailable = "unavailable"
)

// maxResultBytes caps a function's answer (Lambda's own cap is 6 MB).
const maxResultBytes = 1 << 20

// maxErrorText bounds a function error's message.
const maxErrorText = 4096

// tagsTimeout bounds reading one function's tags.
const tagsTimeout = 10 * time.Second

// retryWait is how long a server whose tags could not be read waits
// before the next Tools or Call tries again.
const retryWait = 10 * time.Second

// API is the part of the Lambda client the source uses.
type API interface {
	Invoke(ctx context.Context, in *lambda.InvokeInput, opts ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
	ListTags(ctx context.Context, in *lambda.ListTagsInput, opts ...func(*lambda.Options)) (*lambda.ListTagsOutput, error)
}

// Options configure a Source.
type Options struct {
	// Logger receives the source's records (slog.Default() when nil).
	Logger *slog.Logger
	// Client returns the Lambda client, made when first needed.
	Client func(context.Context) (API, error)
}

// Health is one server's state.
type Health struct {
	Name      string    `json:"name"`
	State     string    `json:"state"`
	LastError string    `json:"last_error,omitempty"`
	Since     time.Time `json:"since"`
	Tools     int       `json:"tools"`
}

// Source offers configured Lambda functions as tools, one server per
// configuration. It owns its servers' names (execution.ServerSource).
type Source struct {
	log     *slog.Logger
	client  func(context.Context) (API, error)
	servers map[string]*server
	order   []*server

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

type server struct {
	src   *Source
	cfg   Config
	drops *catalog.DropLog
	cat   atomic.Pointer[toolSet]

	mu      sync.Mutex
	state   string
	lastErr string
	since   time.Time
	nextTry time.Time
	loading bool
}

type toolSet struct {
	byName  map[string]*entry
	visible []catalog.Tool
}

type entry struct {
	fn     Function
	tool   catalog.Tool
	denied bool
	input  *argcheck.Validator
}

// New validates cfgs and describes every function: from its
// configuration, or from its tags (read now; a server whose tags cannot
// be read is unavailable until they can).
func New(ctx context.Context, cfgs []Config, opts Options) (*Source, error) {
	seen := map[string]bool{}
	for i, c := range cfgs {
		if err := c.Validate(); err != nil {
			return nil, fault.Wrap(fault.InvalidRequest, fmt.Errorf("lambda servers[%d]: %w", i, err), "")
		}
		if seen[c.Name] {
			return nil, fault.New(fault.InvalidRequest, "lambda servers[%d]: duplicate server name %q", i, c.Name)
		}
		seen[c.Name] = true
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	once := sync.OnceValues(func() (API, error) {
		if opts.Client == nil {
			return nil, errors.New("no Lambda client configured")
		}
		return opts.Client(context.WithoutCancel(ctx))
	})
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Source{log: opts.Logger, client: func(context.Context) (API, error) { return once() },
		servers: map[string]*server{}, ctx: sctx, cancel: cancel}
	var wg sync.WaitGroup
	for _, c := range cfgs {
		sv := &server{src: s, cfg: c, drops: catalog.NewDropLog(opts.Logger.With(slog.String("lambda_server", c.Name))),
			state: StateUnavailable, lastErr: "not described yet", since: time.Now()}
		s.servers[c.Name] = sv
		s.order = append(s.order, sv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sv.describe(ctx)
		}()
	}
	wg.Wait()
	return s, nil
}

// describe builds the server's tools, reading tags where it must.
func (sv *server) describe(ctx context.Context) {
	ts := &toolSet{byName: map[string]*entry{}}
	t, f := true, false
	for _, fn := range sv.cfg.Functions {
		if fn.fromTags() {
			if err := sv.readTags(ctx, &fn); err != nil {
				sv.failed(fmt.Errorf("tool %q: %w", fn.Tool, err))
				return
			}
		}
		input := fn.InputSchema
		if len(input) == 0 {
			input = json.RawMessage(`{"type":"object"}`)
		}
		tool := catalog.Tool{Server: sv.cfg.Name, Name: fn.Tool, Description: fn.Description, InputSchema: input,
			OutputSchema: fn.OutputSchema, Kind: trace.KindMCP}
		switch {
		case fn.ReadOnly:
			tool.Annotations = catalog.Annotations{ReadOnly: &t, Destructive: &f}
		case fn.Destructive != nil && !*fn.Destructive:
			tool.Annotations = catalog.Annotations{ReadOnly: &f, Destructive: &f}
		default:
			tool.Annotations = catalog.Annotations{ReadOnly: &f, Destructive: &t}
		}
		tool.RequireApproval = catalog.MatchAnyToolGlob(sv.cfg.RequireApproval, fn.Tool)
		e := &entry{fn: fn, tool: tool, input: argcheck.New(input)}
		if why := sv.refusal(fn.Tool); why != "" {
			e.denied = true
			sv.drops.Drop(ctx, sv.cfg.Name, fn.Tool, why)
		}
		ts.byName[fn.Tool] = e
		if !e.denied {
			ts.visible = append(ts.visible, tool)
		}
	}
	sort.Slice(ts.visible, func(i, j int) bool { return ts.visible[i].Name < ts.visible[j].Name })
	sv.cat.Store(ts)
	sv.mu.Lock()
	sv.setState(StateHealthy, "")
	sv.mu.Unlock()
}

// readTags fills fn's description and schemas from its tags.
func (sv *server) readTags(ctx context.Context, fn *Function) error {
	api, err := sv.src.client(ctx)
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, tagsTimeout)
	defer cancel()
	out, err := api.ListTags(tctx, &lambda.ListTagsInput{Resource: aws.String(unqualified(fn.Function))})
	if err != nil {
		return fmt.Errorf("reading the function's tags: %w", err)
	}
	if fn.Description == "" {
		fn.Description = out.Tags[TagDescription]
	}
	for _, s := range []struct {
		tag string
		out *json.RawMessage
	}{{TagInputSchema, &fn.InputSchema}, {TagOutputSchema, &fn.OutputSchema}} {
		v, ok := out.Tags[s.tag]
		if !ok {
			continue
		}
		if err := checkSchema(json.RawMessage(v)); err != nil {
			return fmt.Errorf("tag %s: %w", s.tag, err)
		}
		*s.out = json.RawMessage(v)
	}
	return nil
}

// unqualified is a function ARN without its version or alias (ListTags
// takes the function's own ARN).
func unqualified(arn string) string {
	parts := strings.Split(arn, ":")
	if len(parts) == 8 {
		return strings.Join(parts[:7], ":")
	}
	return arn
}

func (sv *server) failed(err error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.setState(StateUnavailable, err.Error())
	sv.nextTry = time.Now().Add(retryWait)
	sv.src.log.Warn("lambda server unavailable; tried again on demand", "lambda_server", sv.cfg.Name, "err", err)
}

func (sv *server) setState(st, lastErr string) {
	if st != sv.state {
		sv.since = time.Now()
	}
	sv.state, sv.lastErr = st, lastErr
}

// retry describes a server again in the background once its wait is
// over.
func (sv *server) retry() {
	sv.mu.Lock()
	if sv.loading || time.Now().Before(sv.nextTry) {
		sv.mu.Unlock()
		return
	}
	sv.loading = true
	sv.mu.Unlock()
	done := func() {
		sv.mu.Lock()
		sv.loading = false
		sv.mu.Unlock()
	}
	if !sv.src.spawn(func() { sv.describe(sv.src.ctx); done() }) {
		done()
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

func (sv *server) refusal(tool string) string {
	return catalog.Refusal(sv.cfg.Allow, sv.cfg.Deny, tool)
}

// Tools implements execution.ToolSource.
func (s *Source) Tools(ctx context.Context) ([]catalog.Tool, error) {
	var out []catalog.Tool
	for _, sv := range s.order {
		ts := sv.cat.Load()
		if ts == nil {
			sv.retry()
			continue
		}
		out = append(out, ts.visible...)
	}
	return out, nil
}

// Servers implements execution.ServerSource.
func (s *Source) Servers() []string {
	out := make([]string, len(s.order))
	for i, sv := range s.order {
		out[i] = sv.cfg.Name
	}
	return out
}

// Functions lists every function the configurations name.
func (s *Source) Functions() []string {
	var out []string
	for _, sv := range s.order {
		out = append(out, sv.cfg.functionNames()...)
	}
	return out
}

// CheckServer implements execution.ServerSource.
func (s *Source) CheckServer(name string) error {
	sv := s.servers[name]
	if sv == nil {
		return fault.New(fault.ToolNotFound, "no Lambda server named %q", name)
	}
	if sv.cat.Load() != nil {
		return nil
	}
	sv.retry()
	return sv.unavailable("")
}

func (sv *server) unavailable(full string) *fault.Error {
	sv.mu.Lock()
	last := sv.lastErr
	sv.mu.Unlock()
	e := fault.New(fault.Unavailable, "Lambda server %q is unavailable: %s", sv.cfg.Name, last).WithTool(full)
	e.Retryable = true
	return e
}

// Health reports every server, in configuration order.
func (s *Source) Health() []Health {
	out := make([]Health, 0, len(s.order))
	for _, sv := range s.order {
		sv.mu.Lock()
		h := Health{Name: sv.cfg.Name, State: sv.state, LastError: sv.lastErr, Since: sv.since}
		sv.mu.Unlock()
		if ts := sv.cat.Load(); ts != nil {
			h.Tools = len(ts.visible)
		}
		out = append(out, h)
	}
	return out
}

// Close waits for background work.
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
	return nil
}

// Call implements execution.ToolSource: the checks an MCP tool gets, then
// one synchronous invocation with args as the event.
func (s *Source) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	full := t.FullName()
	sv := s.servers[t.Server]
	if sv == nil {
		return nil, fault.New(fault.ToolNotFound, "no Lambda server named %q", t.Server).WithTool(full)
	}
	ts := sv.cat.Load()
	if ts == nil {
		sv.retry()
		return nil, sv.unavailable(full)
	}
	e := ts.byName[t.Name]
	switch {
	case e == nil:
		return nil, fault.New(fault.ToolNotFound, "Lambda server %q has no tool %q", t.Server, t.Name).WithTool(full)
	case e.denied:
		return nil, fault.New(fault.Forbidden, "tool is not allowed by the configuration of server %q", t.Server).WithTool(full)
	case e.tool.IsDestructive() && !sv.cfg.AllowDestructive:
		return nil, fault.New(fault.Forbidden, "destructive tool: server %q does not allow destructive tools", t.Server).WithTool(full)
	case e.tool.IsDestructive() && !opt.AllowDestructive:
		return nil, fault.New(fault.Forbidden, "destructive tool: the request does not allow destructive tools").WithTool(full)
	}
	checked, ferr := e.input.Check(args)
	if ferr != nil {
		return nil, ferr.WithTool(full)
	}
	api, err := s.client(ctx)
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "lambda client").WithTool(full)
	}
	timeout := sv.cfg.callTimeout()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := api.Invoke(tctx, &lambda.InvokeInput{FunctionName: aws.String(e.fn.Function),
		InvocationType: types.InvocationTypeRequestResponse, Payload: checked})
	if err != nil {
		return nil, classify(ctx, tctx, err, full, timeout)
	}
	if len(out.Payload) > maxResultBytes {
		return nil, fault.Limitf(fault.LimitResultBytes, "the function's answer is over the %d-byte limit", maxResultBytes).WithTool(full)
	}
	if out.FunctionError != nil {
		return nil, functionError(aws.ToString(out.FunctionError), out.Payload).WithTool(full)
	}
	payload := bytes.TrimSpace(out.Payload)
	switch {
	case len(payload) == 0:
		return json.RawMessage("null"), nil
	case !json.Valid(payload):
		return json.Marshal(string(payload))
	}
	return payload, nil
}

// functionError is the TOOL_ERROR of an invocation that failed in the
// function: its error type and message, as the runtime reports them
// ({"errorType": ..., "errorMessage": ...}).
func functionError(kind string, payload []byte) *fault.Error {
	var p struct {
		Type    string `json:"errorType"`
		Message string `json:"errorMessage"`
	}
	_ = json.Unmarshal(payload, &p)
	msg := p.Message
	if msg == "" {
		msg = strings.TrimSpace(string(payload))
	}
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText] + "…"
	}
	text := "function error"
	if p.Type != "" {
		text += " " + p.Type
	}
	return &fault.Error{Code: fault.ToolError, Message: text + ": " + msg,
		Details: map[string]any{"function_error": kind, "error_type": p.Type}}
}

// classify turns a failed invocation into the error the caller sees.
func classify(ctx, tctx context.Context, err error, full string, timeout time.Duration) error {
	switch {
	case tctx.Err() != nil && ctx.Err() == nil:
		return &fault.Error{Code: fault.Timeout, Message: fmt.Sprintf("no answer within %s", timeout), Tool: full}
	case ctx.Err() != nil:
		return fault.Wrap(fault.Timeout, context.Cause(ctx), "call abandoned").WithTool(full)
	}
	e := fault.Wrap(fault.Unavailable, err, "invoking the function").WithTool(full)
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "AccessDeniedException", "ResourceNotFoundException", "InvalidParameterValueException", "RequestTooLargeException":
			// Retrying would not help: the configuration or the
			// deployment's policy is wrong, or the arguments too big.
			return e
		}
	}
	e.Retryable = true
	return e
}

var _ execution.ServerSource = (*Source)(nil)
