package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

var errCallTimeout = errors.New("call timed out")

// maxErrorText bounds the message of a TOOL_ERROR built from the tool's
// own text; it is cut after it is masked (toolsource.Handle.Scrubber).
const maxErrorText = 4096

// Call implements toolsource.Server: one tools/call, whose result is
// normalised (see normalizeResult) and capped. The Set has checked the
// tool, its policy and its arguments, and masks the result and the
// errors.
//
// A 2026-07-28 server that asks a question first (input_required with
// elicitation requests) gets none answered here: Call returns an
// *execution.Question, and the call is sent again with the call's
// Options.Retry once someone has answered. A server that asks for
// sampling or roots, which the client does not offer, fails the call
// (TOOL_ERROR), as does one that keeps asking to retry without asking
// anything.
func (s *remote) Call(ctx context.Context, tc toolsource.Call) (json.RawMessage, error) {
	c := s.conn.Load()
	if c == nil {
		// Lost since the Set found the server ready.
		return nil, s.unavailable(tc.Tool.FullName(), errConnLost)
	}
	header, _ := tc.Ref.(*mcpgo.Tool)
	return s.call(ctx, c, tc, header)
}

// callParams is tools/call's params; Arguments goes out verbatim. Meta
// carries the call's W3C trace context (traceparent, tracestate), as MCP
// 2026-07-28 puts it in a request's _meta; the HTTP transports send it as
// headers too (dial).
type callParams struct {
	Name      string            `json:"name"`
	Arguments json.RawMessage   `json:"arguments"`
	Meta      map[string]string `json:"_meta,omitempty"`
	// The answers to the server's question, and its state (SEP-2322).
	InputResponses map[string]json.RawMessage `json:"inputResponses,omitempty"`
	RequestState   string                     `json:"requestState,omitempty"`
}

// MetaIdempotencyKey is the _meta key of an effect's idempotency key in
// its tools/call (execution.CallOptions.IdempotencyKey); over HTTP it is
// the Idempotency-Key header too.
const MetaIdempotencyKey = "io.pml/idempotency-key"

// idempotencyKeyContext carries a call's idempotency key to the header
// function its transport calls for each request.
type idempotencyKeyContext struct{}

// maxShedRetries bounds the retries of a server that answers
// input_required asking nothing (shedding load: "retry, with this state").
const maxShedRetries = 3

func (s *remote) call(ctx context.Context, c *conn, tc toolsource.Call, header *mcpgo.Tool) (json.RawMessage, error) {
	full := tc.Tool.FullName()
	key := tc.Options.IdempotencyKey
	if key != "" {
		// Read by requestHeaders, for every HTTP request of the call.
		ctx = context.WithValue(ctx, idempotencyKeyContext{}, key)
	}
	ctx, untrack := s.track(ctx, tc.Tool.Name)
	defer untrack()
	timeout := tc.Timeout
	tw := &tripwire{}
	tctx, tcancel := context.WithTimeoutCause(withTripwire(ctx, tw), timeout, errCallTimeout)
	defer tcancel()
	// A lost connection fails the call now rather than at its timeout
	// (classify reads why from c.ctx itself). One context of the call's
	// own, not a cancellable one under the timeout's too: ~500 of the
	// ~12,400 bytes a call through a script allocates (issue 43).
	stop := context.AfterFunc(c.ctx, tcancel)
	defer stop()

	params := callParams{Name: tc.Tool.Name, Arguments: tc.Args, Meta: tracectx.Headers(ctx)}
	if key != "" {
		meta := make(map[string]string, len(params.Meta)+1)
		maps.Copy(meta, params.Meta)
		meta[MetaIdempotencyKey] = key
		params.Meta = meta
	}
	if r := tc.Options.Retry; r != nil {
		params.InputResponses, params.RequestState = r.InputResponses, r.RequestState
	}
	gen := c.sessionGen.Load()
	var raw json.RawMessage
	var res wireResult
	var err, derr error
	for shed := 0; ; shed++ {
		raw, err = c.send(tctx, string(mcpgo.MethodToolsCall), params, header)
		s.k.calls.Add(1)
		if err != nil && errors.Is(err, transport.ErrSessionTerminated) && !c.modern && tctx.Err() == nil {
			if rerr := s.reinit(tctx, c, gen); rerr != nil {
				err = fmt.Errorf("re-initialising the expired session: %w", rerr)
			} else {
				raw, err = c.send(tctx, string(mcpgo.MethodToolsCall), params, header)
				s.k.calls.Add(1)
			}
		}
		if err != nil {
			return nil, s.classify(ctx, tctx, c, tw, err, full, timeout)
		}
		// One decode serves the question check and the result: only a
		// result that says input_required (or will not decode) is read
		// again, as a question.
		res, derr = decodeResult(raw)
		var q *execution.Question
		var ferr *fault.Error
		if derr != nil || res.inputRequired() {
			q, ferr = question(raw, s.cfg.Name, tc.Tool.Name)
		}
		switch {
		case ferr != nil:
			return nil, ferr.WithTool(full)
		case q == nil:
		case len(q.Requests) > 0:
			return nil, q
		case shed < maxShedRetries:
			// Asked nothing: the server sheds load and wants the same call
			// again, with its state.
			params.RequestState = q.RequestState
			continue
		default:
			return nil, fault.New(fault.ToolError, "the server asked %d times to retry without asking anything", maxShedRetries+1).WithTool(full)
		}
		break
	}

	parseText := tc.Options.ParseJSONText || tc.Tool.OutputSchema != nil
	value, isErr, msg, err := normalizeDecoded(res, derr, parseText)
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, &protocolError{msg: err.Error()}, "tools/call result").WithTool(full)
	}
	if isErr {
		return nil, fault.New(fault.ToolError, "%s", s.h.Scrubber().Cut(msg, maxErrorText)).WithTool(full)
	}
	if limit := s.k.maxResultBytes(); len(value) > limit {
		return nil, fault.Limitf(fault.LimitResultBytes, "result of %d bytes exceeds the %d-byte limit", len(value), limit).WithTool(full)
	}
	return value, nil
}

// classify turns a failed request into the error the caller sees.
func (s *remote) classify(ctx, tctx context.Context, c *conn, tw *tripwire, err error, full string, timeout time.Duration) error {
	if tw.tripped.Load() || errors.Is(err, errMessageTooLarge) {
		return fault.Limitf(fault.LimitResultBytes, "the server sent a message over the %d-byte cap", s.k.maxMessageBytes()).WithTool(full)
	}
	// mcp-go's SSE transport arms its own timer for the time left before
	// the deadline and may give up a hair before the context does; an error
	// at or past the deadline is the deadline's.
	if dl, ok := tctx.Deadline(); ok && !time.Now().Before(dl) {
		<-tctx.Done()
	}
	if tctx.Err() != nil && errors.Is(context.Cause(tctx), errCallTimeout) {
		return &fault.Error{Code: fault.Timeout, Message: fmt.Sprintf("no answer within %s", timeout), Tool: full}
	}
	if ctx.Err() != nil {
		return fault.Wrap(fault.Timeout, context.Cause(ctx), "call abandoned").WithTool(full)
	}
	// Checked on c.ctx itself, not through tctx: the transport may notice
	// the closed connection before the AfterFunc has cancelled tctx.
	if c.ctx.Err() != nil {
		cc := context.Cause(c.ctx)
		if errors.Is(cc, errMessageTooLarge) {
			return fault.Limitf(fault.LimitResultBytes, "the server sent a message over the %d-byte cap", s.k.maxMessageBytes()).WithTool(full)
		}
		return s.unavailable(full, cc)
	}
	if ae := authError(err); ae != nil {
		return authUnavailable(full, ae)
	}
	var rpc *rpcError
	if errors.As(err, &rpc) {
		return &fault.Error{Code: fault.ToolError, Message: s.h.Scrubber().Cut(rpc.Message, maxErrorText), Tool: full,
			Details: map[string]any{"jsonrpc_code": rpc.Code}}
	}
	var pe *protocolError
	if !errors.As(err, &pe) {
		// The transport failed: find out whether the server is still there.
		s.probe(c)
	}
	return s.unavailable(full, err)
}

// unavailable is the error of a call that failed with its connection:
// retryable, unless the Set is closing or the server could not authorize
// it.
func (s *remote) unavailable(full string, cause error) *fault.Error {
	if s.h.Context().Err() != nil {
		return fault.Wrap(fault.Unavailable, errClosed, "").WithTool(full)
	}
	if ae := authError(cause); ae != nil {
		return authUnavailable(full, ae)
	}
	e := fault.Wrap(fault.Unavailable, cause, fmt.Sprintf("MCP server %q is unavailable", s.cfg.Name)).WithTool(full)
	e.Retryable = true
	return e
}

// wireResult is a tools/call result; content items stay raw until
// normalised.
type wireResult struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent"`
	IsError           bool              `json:"isError"`
	// ResultType stays raw: a result whose resultType is not a string is
	// no question (question), and must not fail here.
	ResultType json.RawMessage `json:"resultType"`
}

// decodeResult decodes a tools/call result.
func decodeResult(raw json.RawMessage) (wireResult, error) {
	var r wireResult
	err := json.Unmarshal(raw, &r)
	return r, err
}

// inputRequired reports whether r says it is a question (2026-07-28
// input_required), which question then reads in full.
func (r *wireResult) inputRequired() bool {
	if len(r.ResultType) == 0 {
		return false
	}
	var t string
	return json.Unmarshal(r.ResultType, &t) == nil && t == string(mcpgo.ResultTypeInputRequired)
}

// normalizeResult turns a tools/call result into the JS value a script
// gets:
//   - structuredContent, when present, as is;
//   - else one content item as its normalised value, several as an array,
//     none as null;
//   - a text item is a string, or the JSON it holds when parseText is set
//     and the text is valid JSON;
//   - any other item is its object without annotations and _meta
//     ({type, mimeType, data} for images and audio, {type, uri, ...} for
//     resource links); an embedded resource is flattened to
//     {type: "resource", uri, mimeType, text|blob}.
//
// For an isError result it returns isErr and the text of its text items.
func normalizeResult(raw json.RawMessage, parseText bool) (value json.RawMessage, isErr bool, msg string, err error) {
	r, err := decodeResult(raw)
	return normalizeDecoded(r, err, parseText)
}

// normalizeDecoded is normalizeResult of a result decodeResult has
// decoded, with the error it returned.
func normalizeDecoded(r wireResult, derr error, parseText bool) (value json.RawMessage, isErr bool, msg string, err error) {
	if derr != nil {
		return nil, false, "", derr
	}
	if r.IsError {
		return nil, true, errorText(r.Content), nil
	}
	if len(r.StructuredContent) > 0 && string(r.StructuredContent) != "null" {
		return r.StructuredContent, false, "", nil
	}
	switch len(r.Content) {
	case 0:
		return json.RawMessage("null"), false, "", nil
	case 1:
		v, err := normalizeItem(r.Content[0], parseText)
		return v, false, "", err
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, item := range r.Content {
		if i > 0 {
			b.WriteByte(',')
		}
		v, err := normalizeItem(item, parseText)
		if err != nil {
			return nil, false, "", fmt.Errorf("content[%d]: %w", i, err)
		}
		b.Write(v)
	}
	b.WriteByte(']')
	return b.Bytes(), false, "", nil
}

func normalizeItem(raw json.RawMessage, parseText bool) (json.RawMessage, error) {
	var head struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, err
	}
	switch head.Type {
	case "text":
		if head.Text == nil {
			return nil, errors.New("text content without text")
		}
		if parseText {
			if t := bytes.TrimSpace([]byte(*head.Text)); len(t) > 0 && json.Valid(t) {
				return t, nil
			}
		}
		return marshalString(*head.Text)
	case "resource":
		var r struct {
			Resource map[string]json.RawMessage `json:"resource"`
		}
		if err := json.Unmarshal(raw, &r); err != nil || r.Resource == nil {
			return nil, errors.New("resource content without resource")
		}
		delete(r.Resource, "_meta")
		r.Resource["type"] = json.RawMessage(`"resource"`)
		return json.Marshal(r.Resource)
	default:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		delete(m, "annotations")
		delete(m, "_meta")
		return json.Marshal(m)
	}
}

// marshalString encodes s as a JSON string without HTML escaping, so that
// "<" reaches the script as "<", not "\u003c".
func marshalString(s string) (json.RawMessage, error) {
	if plainString(s) {
		// What the encoder would write, without its buffer and encoder
		// (most tool results are short plain text).
		b := make([]byte, 0, len(s)+2)
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"'), nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// plainString reports whether encoding/json (HTML escaping off) writes s
// between quotes unchanged: valid UTF-8 without control characters, '"',
// '\\', U+2028 or U+2029.
func plainString(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.ValidString(s) && !strings.ContainsAny(s, "\u2028\u2029")
}

// errorText joins the text items of an isError result, whole: the call
// masks it, then cuts it.
func errorText(content []json.RawMessage) string {
	var parts []string
	for _, item := range content {
		var t struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(item, &t) == nil && t.Type == "text" && t.Text != "" {
			parts = append(parts, t.Text)
		}
	}
	if len(parts) == 0 {
		return "the tool reported an error"
	}
	return strings.Join(parts, "\n")
}
