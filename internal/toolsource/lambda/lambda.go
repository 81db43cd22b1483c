// Package lambda is the tool-source kind of AWS Lambda functions
// ("type": "lambda"): each configured function is mcp.<server>.<tool>(args),
// invoked synchronously with the arguments as its event and the process's
// AWS credentials (in the deployment, the execute function's role, which
// the template allows lambda:InvokeFunction on the listed functions only).
// A function is destructive unless its configuration says otherwise; one
// configured without an input schema is described by its tags (read at
// load, which needs its ARN). A function error (the invocation's
// FunctionError) is a TOOL_ERROR with the error's type and message.
// Everything else a call goes through (allow and deny lists, the
// destructive policy, the argument check, health and retries) is
// internal/toolsource's.
package lambda

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"
	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/toolsource"
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

// maxResultBytes caps a function's answer (Lambda's own cap is 6 MB).
const maxResultBytes = 1 << 20

// maxErrorText bounds a function error's message.
const maxErrorText = 4096

// tagsTimeout bounds reading one function's tags.
const tagsTimeout = 10 * time.Second

// Type is the server list's "type" of this kind.
const Type = "lambda"

// API is the part of the Lambda client the kind uses.
type API interface {
	Invoke(ctx context.Context, in *awslambda.InvokeInput, opts ...func(*awslambda.Options)) (*awslambda.InvokeOutput, error)
	ListTags(ctx context.Context, in *awslambda.ListTagsInput, opts ...func(*awslambda.Options)) (*awslambda.ListTagsOutput, error)
}

// Kind is the kind of Lambda functions. Its zero value makes its client
// from the process's AWS configuration (toolsource.Env.AWS).
type Kind struct {
	// Client, when set, returns the Lambda client instead (tests).
	Client func(context.Context) (API, error)
}

// Info implements toolsource.Kind. Lambda servers are eager: functions
// described by their tags are read before the process serves, and a
// server whose tags cannot be read is unavailable until they can.
func (Kind) Info() toolsource.KindInfo {
	return toolsource.KindInfo{Type: Type, Noun: "Lambda server", Eager: true}
}

// Decode implements toolsource.Kind.
func (Kind) Decode(n *yaml.Node) (toolsource.Spec, error) { return decode(n) }

// Open implements toolsource.Kind.
func (k Kind) Open(ctx context.Context, spec toolsource.Spec, h *toolsource.Handle) (toolsource.Server, error) {
	c, err := toolsource.SpecAs[Config](spec)
	if err != nil {
		return nil, err
	}
	client := k.Client
	if client == nil {
		aws := h.Env().AWS
		client = func(ctx context.Context) (API, error) {
			if aws == nil {
				return nil, errors.New("no AWS configuration")
			}
			cfg, err := aws(ctx)
			if err != nil {
				return nil, err
			}
			return awslambda.NewFromConfig(cfg), nil
		}
	}
	// One client per server, made when it is first needed, outliving
	// the caller that first asked.
	once := sync.OnceValues(func() (API, error) { return client(h.Context()) })
	return &server{cfg: c, client: func() (API, error) { return once() }, red: h.Scrubber()}, nil
}

// server is one configured server of functions.
type server struct {
	cfg    Config
	client func() (API, error)
	// red masks a function's error message before it is cut.
	red *redact.Redactor
}

// Load describes every function: from its configuration, or from its
// tags.
func (sv *server) Load(ctx context.Context) ([]toolsource.Tool, error) {
	out := make([]toolsource.Tool, 0, len(sv.cfg.Functions))
	t, f := true, false
	for _, fn := range sv.cfg.Functions {
		if fn.fromTags() {
			if err := sv.readTags(ctx, &fn); err != nil {
				return nil, fmt.Errorf("tool %q: %w", fn.Tool, err)
			}
		}
		tool := catalog.Tool{Name: fn.Tool, Description: fn.Description, InputSchema: fn.InputSchema,
			OutputSchema: fn.OutputSchema, Kind: trace.KindMCP, Endpoint: &catalog.Endpoint{Function: fn.Function}}
		switch {
		case fn.ReadOnly:
			tool.Annotations = catalog.Annotations{ReadOnly: &t, Destructive: &f}
		case fn.Destructive != nil && !*fn.Destructive:
			tool.Annotations = catalog.Annotations{ReadOnly: &f, Destructive: &f}
		default:
			tool.Annotations = catalog.Annotations{ReadOnly: &f, Destructive: &t}
		}
		out = append(out, toolsource.Tool{Tool: tool, Ref: fn})
	}
	return out, nil
}

// readTags fills fn's description and schemas from its tags.
func (sv *server) readTags(ctx context.Context, fn *Function) error {
	api, err := sv.client()
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, tagsTimeout)
	defer cancel()
	out, err := api.ListTags(tctx, &awslambda.ListTagsInput{Resource: aws.String(unqualified(fn.Function))})
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

// Close implements toolsource.Server: a server holds nothing open.
func (sv *server) Close() error { return nil }

// Call implements toolsource.Server: one synchronous invocation with the
// checked arguments as the event.
func (sv *server) Call(ctx context.Context, c toolsource.Call) (json.RawMessage, error) {
	full := c.Tool.FullName()
	fn := c.Ref.(Function)
	api, err := sv.client()
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "lambda client").WithTool(full)
	}
	tctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	in := &awslambda.InvokeInput{FunctionName: aws.String(fn.Function), InvocationType: types.InvocationTypeRequestResponse, Payload: c.Args}
	if key := c.Options.IdempotencyKey; key != "" {
		in.ClientContext = aws.String(clientContext(key))
	}
	out, err := api.Invoke(tctx, in)
	if err != nil {
		return nil, classify(ctx, tctx, err, full, c.Timeout)
	}
	if len(out.Payload) > maxResultBytes {
		return nil, fault.Limitf(fault.LimitResultBytes, "the function's answer is over the %d-byte limit", maxResultBytes).WithTool(full)
	}
	if out.FunctionError != nil {
		return nil, functionError(aws.ToString(out.FunctionError), out.Payload, sv.red).WithTool(full)
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

// clientContext is an effect's client context: its idempotency key in the
// custom map a function reads (context.ClientContext.Custom in Go,
// context.client_context.custom in Python), base64 of the JSON as Lambda
// takes it.
func clientContext(key string) string {
	b, _ := json.Marshal(map[string]map[string]string{"custom": {"idempotency_key": key}})
	return base64.StdEncoding.EncodeToString(b)
}

// functionError is the TOOL_ERROR of an invocation that failed in the
// function: its error type and message, as the runtime reports them
// ({"errorType": ..., "errorMessage": ...}), the message masked by red
// before it is cut (a cut secret would leave its start).
func functionError(kind string, payload []byte, red *redact.Redactor) *fault.Error {
	var p struct {
		Type    string `json:"errorType"`
		Message string `json:"errorMessage"`
	}
	_ = json.Unmarshal(payload, &p)
	msg := p.Message
	if msg == "" {
		msg = strings.TrimSpace(string(payload))
	}
	msg = red.Cut(msg, maxErrorText)
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

var _ toolsource.Kind = Kind{}
