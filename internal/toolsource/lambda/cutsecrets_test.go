package lambda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// keyedKind is a kind of servers that only hold a header secret, so that
// the Set knows one the functions may echo.
type keyedKind struct{}

type keyedSpec struct{ toolsource.Config }

func (s keyedSpec) Base() toolsource.Config { c := s.Config; c.Type = "keyed"; return c }

type keyedServer struct{}

func (keyedKind) Info() toolsource.KindInfo {
	return toolsource.KindInfo{Type: "keyed", Noun: "keyed server"}
}
func (keyedKind) Decode(*yaml.Node) (toolsource.Spec, error) {
	return nil, errors.New("not decoded")
}
func (keyedKind) Open(context.Context, toolsource.Spec, *toolsource.Handle) (toolsource.Server, error) {
	return keyedServer{}, nil
}
func (keyedServer) Load(context.Context) ([]toolsource.Tool, error) { return nil, nil }
func (keyedServer) Call(context.Context, toolsource.Call) (json.RawMessage, error) {
	return nil, errors.New("no tools")
}
func (keyedServer) Close() error { return nil }

// TestFunctionErrorCutLeavesNoSecret: a function whose error message
// echoes a secret the Set knows after padding of the script's choosing
// shows no part of it, wherever the message's cut falls.
func TestFunctionErrorCutLeavesNoSecret(t *testing.T) {
	const key = "k3y-SECRET-0123456789abcdef"
	api := &fakeLambda{answer: func(_ string, payload []byte) (*awslambda.InvokeOutput, error) {
		var args struct{ Pad int }
		_ = json.Unmarshal(payload, &args)
		msg, _ := json.Marshal(map[string]string{"errorMessage": strings.Repeat("x", args.Pad) + key + " and more", "errorType": "E"})
		return &awslambda.InvokeOutput{StatusCode: 200, FunctionError: aws.String("Unhandled"), Payload: msg}, nil
	}}
	reg := toolsource.NewRegistry(Kind{Client: func(context.Context) (API, error) { return api, nil }}, keyedKind{})
	specs := []toolsource.Spec{
		Config{Config: toolsource.Config{Name: "fns"}, Functions: []Function{{Tool: "echo", Function: "echo", ReadOnly: true, InputSchema: json.RawMessage(`{}`)}}},
		keyedSpec{toolsource.Config{Name: "keyed", Headers: map[string]string{"X-Key": key}}},
	}
	src, err := toolsource.New(context.Background(), reg, specs, toolsource.Env{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for pad := maxErrorText - len(key) - 2; pad <= maxErrorText+2; pad++ {
		_, err := src.Call(context.Background(), catalog.Tool{Server: "fns", Name: "echo"}, json.RawMessage(fmt.Sprintf(`{"pad": %d}`, pad)), execution.CallOptions{})
		msg := fault.As(err).Message
		if fault.CodeOf(err) != fault.ToolError {
			t.Fatalf("pad %d: %v; want TOOL_ERROR", pad, err)
		}
		for k := len(key); k > 0; k-- {
			if strings.Contains(msg, "x"+key[:k]) {
				t.Errorf("pad %d: the message holds %q, the start of the key", pad, key[:k])
				break
			}
		}
	}
}
