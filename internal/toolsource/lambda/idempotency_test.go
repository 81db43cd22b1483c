package lambda

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// contextLambda records each invocation's client context.
type contextLambda struct {
	fakeLambda
	mu       sync.Mutex
	contexts []string
}

func (f *contextLambda) Invoke(ctx context.Context, in *awslambda.InvokeInput, opts ...func(*awslambda.Options)) (*awslambda.InvokeOutput, error) {
	f.mu.Lock()
	f.contexts = append(f.contexts, aws.ToString(in.ClientContext))
	f.mu.Unlock()
	return &awslambda.InvokeOutput{StatusCode: 200, Payload: []byte(`{"ok":true}`)}, nil
}

// TestClientContextCarriesKey: an effect's key reaches the function in
// its client context ({"custom": {"idempotency_key": …}}, base64), which
// the arguments cannot touch; a call without one has none. A call the
// kernel refuses says it was not sent; one it sends does not.
func TestClientContextCarriesKey(t *testing.T) {
	api := &contextLambda{}
	src := newSource(t, api, Config{Config: toolsource.Config{Name: "orders", AllowDestructive: true, IdempotencyKeys: true}, Functions: []Function{
		{Tool: "cancel", Function: "canceller", InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"}}}`)},
	}})
	tool := catalog.Tool{Server: "orders", Name: "cancel"}
	opts := execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}, IdempotencyKey: "pml-key"}
	refused := 0
	opts.NotSent = func() { refused++ }
	if _, err := src.Call(context.Background(), tool, json.RawMessage(`{"id": 7, "custom": {"idempotency_key": "forged"}}`), opts); err != nil {
		t.Fatal(err)
	}
	read := opts
	read.IdempotencyKey = ""
	if _, err := src.Call(context.Background(), tool, json.RawMessage(`{"id": 8}`), read); err != nil {
		t.Fatal(err)
	}
	if refused != 0 {
		t.Fatalf("a sent call said it was not sent (%d)", refused)
	}
	if _, err := src.Call(context.Background(), tool, json.RawMessage(`{"id": "not a number"}`), opts); err == nil || refused != 1 {
		t.Fatalf("a refused call: %v, NotSent called %d times", err, refused)
	}
	if _, err := src.Call(context.Background(), catalog.Tool{Server: "nobody", Name: "x"}, json.RawMessage(`{}`), opts); err == nil || refused != 2 {
		t.Fatalf("a call to no server: %v, NotSent called %d times", err, refused)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.contexts) != 2 || api.contexts[1] != "" {
		t.Fatalf("client contexts %q", api.contexts)
	}
	raw, err := base64.StdEncoding.DecodeString(api.contexts[0])
	if err != nil {
		t.Fatal(err)
	}
	var cc struct {
		Custom map[string]string `json:"custom"`
	}
	if err := json.Unmarshal(raw, &cc); err != nil || cc.Custom["idempotency_key"] != "pml-key" || len(cc.Custom) != 1 {
		t.Fatalf("client context %s", raw)
	}
	tools, _ := src.Tools(context.Background())
	if len(tools) != 1 || !tools[0].IdempotencyKeys {
		t.Fatalf("tools %+v", tools)
	}
}
