package lambda

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeLambda stands in for the Lambda API in this package's unit tests;
// integration/ runs real function binaries behind the emulator.
type fakeLambda struct {
	mu      sync.Mutex
	invoked []string
	tags    map[string]map[string]string
	tagErr  error
	answer  func(fn string, payload []byte) (*awslambda.InvokeOutput, error)
}

func (f *fakeLambda) Invoke(ctx context.Context, in *awslambda.InvokeInput, _ ...func(*awslambda.Options)) (*awslambda.InvokeOutput, error) {
	f.mu.Lock()
	f.invoked = append(f.invoked, aws.ToString(in.FunctionName)+" "+string(in.Payload))
	f.mu.Unlock()
	return f.answer(aws.ToString(in.FunctionName), in.Payload)
}

func (f *fakeLambda) ListTags(ctx context.Context, in *awslambda.ListTagsInput, _ ...func(*awslambda.Options)) (*awslambda.ListTagsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tagErr != nil {
		return nil, f.tagErr
	}
	return &awslambda.ListTagsOutput{Tags: f.tags[aws.ToString(in.Resource)]}, nil
}

func newSource(t *testing.T, api API, cfgs ...Config) *toolsource.Set {
	t.Helper()
	specs := make([]toolsource.Spec, len(cfgs))
	for i, c := range cfgs {
		specs[i] = c
	}
	reg := toolsource.NewRegistry(Kind{Client: func(context.Context) (API, error) { return api, nil }})
	s, err := toolsource.New(context.Background(), reg, specs, toolsource.Env{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

const arn = "arn:aws:lambda:us-east-1:123456789012:function:"

func TestConfigValidate(t *testing.T) {
	ok := Function{Tool: "get", Function: "getter", InputSchema: json.RawMessage(`{"type":"object"}`)}
	no := false
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", Config{Config: toolsource.Config{Name: "orders"}, Functions: []Function{ok}}, ""},
		{"no functions", Config{Config: toolsource.Config{Name: "orders"}}, "no functions"},
		{"reserved server name", Config{Config: toolsource.Config{Name: "then"}, Functions: []Function{ok}}, "reserved"},
		{"duplicate tool", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{ok, ok}}, "duplicate tool"},
		{"bad tool name", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{{Tool: "a:b", Function: "f"}}}, "contains ':'"},
		{"tags need an ARN", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{{Tool: "a", Function: "f"}}}, "needs its ARN"},
		{"tags with an ARN", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{{Tool: "a", Function: arn + "f"}}}, ""},
		{"schema not an object", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{{Tool: "a", Function: "f", InputSchema: json.RawMessage(`[]`)}}}, "JSON object"},
		{"schema does not compile", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{{Tool: "a", Function: "f", InputSchema: json.RawMessage(`{"type": 5}`)}}}, "type"},
		{"read-only and destructive", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{{Tool: "a", Function: "f", InputSchema: json.RawMessage(`{}`), ReadOnly: true, Destructive: func() *bool { t := true; return &t }()}}}, "read_only and destructive"},
		{"not destructive", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{{Tool: "a", Function: "f", InputSchema: json.RawMessage(`{}`), Destructive: &no}}}, ""},
		{"a path in the name", Config{Config: toolsource.Config{Name: "o"}, Functions: []Function{{Tool: "a", Function: "../f", InputSchema: json.RawMessage(`{}`)}}}, "want a function name or ARN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCalls(t *testing.T) {
	api := &fakeLambda{
		tags: map[string]map[string]string{arn + "tagged": {TagDescription: "from tags", TagInputSchema: `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`}},
		answer: func(fn string, payload []byte) (*awslambda.InvokeOutput, error) {
			switch fn {
			case "failing":
				return &awslambda.InvokeOutput{StatusCode: 200, FunctionError: aws.String("Unhandled"),
					Payload: []byte(`{"errorMessage": "order 7 is locked", "errorType": "LockedError"}`)}, nil
			case "text":
				return &awslambda.InvokeOutput{StatusCode: 200, Payload: []byte(`not json`)}, nil
			case "big":
				return &awslambda.InvokeOutput{StatusCode: 200, Payload: []byte(`"` + strings.Repeat("x", maxResultBytes) + `"`)}, nil
			case "slow":
				return nil, errors.New("connection reset")
			}
			return &awslambda.InvokeOutput{StatusCode: 200, Payload: append([]byte(`{"echo":`), append(payload, '}')...)}, nil
		},
	}
	no := false
	src := newSource(t, api, Config{Config: toolsource.Config{Name: "orders", AllowDestructive: true, Deny: []string{"hidden"}}, Functions: []Function{
		{Tool: "get", Function: "getter", ReadOnly: true, Description: "Get an order.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":false}`)},
		{Tool: "cancel", Function: "canceller", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Tool: "note", Function: "noter", Destructive: &no, InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Tool: "fail", Function: "failing", ReadOnly: true, InputSchema: json.RawMessage(`{}`)},
		{Tool: "text", Function: "text", ReadOnly: true, InputSchema: json.RawMessage(`{}`)},
		{Tool: "big", Function: "big", ReadOnly: true, InputSchema: json.RawMessage(`{}`)},
		{Tool: "flaky", Function: "slow", ReadOnly: true, InputSchema: json.RawMessage(`{}`)},
		{Tool: "tagged", Function: arn + "tagged:live", ReadOnly: true},
		{Tool: "hidden", Function: "hidden", InputSchema: json.RawMessage(`{}`)},
	}})
	tools, _ := src.Tools(context.Background())
	byName := map[string]catalog.Tool{}
	for _, tool := range tools {
		byName[tool.Name] = tool
	}
	if _, ok := byName["hidden"]; ok || len(tools) != 8 {
		t.Errorf("tools %v", tools)
	}
	if !byName["cancel"].IsDestructive() || byName["get"].IsDestructive() || byName["note"].IsDestructive() {
		t.Error("destructive when unsaid, not when read_only or destructive: false")
	}
	if byName["tagged"].Description != "from tags" || !strings.Contains(string(byName["tagged"].InputSchema), `"n"`) {
		t.Errorf("tagged %+v", byName["tagged"])
	}
	ctx := context.Background()
	allow := execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}}
	tests := []struct {
		tool, args string
		opt        execution.CallOptions
		want       string
		code       fault.Code
		msg        string
	}{
		{tool: "get", args: `{"id": 7}`, want: `{"echo":{"id": 7}}`},
		{tool: "get", args: `{"id": "7"}`, code: fault.InvalidArguments},
		{tool: "get", args: `{"id": 7, "extra": 1}`, code: fault.InvalidArguments},
		{tool: "cancel", args: `{}`, code: fault.Forbidden, msg: "does not allow destructive"},
		{tool: "cancel", args: `{}`, opt: allow, want: `{"echo":{}}`},
		{tool: "note", args: `{}`, want: `{"echo":{}}`},
		{tool: "fail", args: `{}`, code: fault.ToolError, msg: "function error LockedError: order 7 is locked"},
		{tool: "text", args: `{}`, want: `"not json"`},
		{tool: "big", args: `{}`, code: fault.LimitExceeded},
		{tool: "flaky", args: `{}`, code: fault.Unavailable, msg: "connection reset"},
		{tool: "tagged", args: `{}`, code: fault.InvalidArguments},
		{tool: "tagged", args: `{"n": 1}`, want: `{"echo":{"n": 1}}`},
		{tool: "hidden", args: `{}`, opt: allow, code: fault.Forbidden},
		{tool: "nothing", args: `{}`, code: fault.ToolNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.tool+tc.args, func(t *testing.T) {
			out, err := src.Call(ctx, catalog.Tool{Server: "orders", Name: tc.tool}, json.RawMessage(tc.args), tc.opt)
			if tc.code != "" {
				if fault.CodeOf(err) != tc.code || !strings.Contains(fault.As(err).Message, tc.msg) {
					t.Errorf("error %v, want %s %q", err, tc.code, tc.msg)
				}
				return
			}
			if err != nil || string(out) != tc.want {
				t.Errorf("%s, %v; want %s", out, err, tc.want)
			}
		})
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if inv := strings.Join(api.invoked, "\n"); strings.Contains(inv, `"extra"`) || strings.Contains(inv, `"7"`) || strings.Contains(inv, arn+"tagged:live {}") || strings.Contains(inv, "hidden") {
		t.Errorf("refused calls were invoked:\n%s", inv)
	}
}

// TestTagsUnreadable: a server whose tags cannot be read is unavailable
// (retryably), and the process carries on.
func TestTagsUnreadable(t *testing.T) {
	api := &fakeLambda{tagErr: errors.New("AccessDeniedException: not allowed to ListTags")}
	src := newSource(t, api, Config{Config: toolsource.Config{Name: "orders"}, Functions: []Function{{Tool: "x", Function: arn + "x"}}})
	err := src.CheckServer("orders")
	if fe := fault.As(err); fe.Code != fault.Unavailable || !fe.Retryable || !strings.Contains(fe.Message, "ListTags") {
		t.Errorf("CheckServer: %v", err)
	}
	if h := src.Health(); h[0].State != toolsource.StateUnavailable {
		t.Errorf("health %+v", h)
	}
}
