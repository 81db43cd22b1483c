package demoserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/toolsource"
	mcpkind "github.com/pml-sandbox/pml/internal/toolsource/mcp"
)

// sources are the two ways to the demo tools: in process, and over MCP
// from a demo server.
func sources(t *testing.T) map[string]execution.ToolSource {
	t.Helper()
	srv, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	pool, err := new(mcpkind.Kind).NewSet(context.Background(), toolsource.Env{Logger: slog.New(slog.DiscardHandler)}, mcpkind.Config{Config: toolsource.Config{Name: demoserver.Name, AllowDestructive: true}, URL: srv.StreamableURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	return map[string]execution.ToolSource{
		"in process": demoserver.Source{Set: demoserver.New()},
		"over MCP":   pool,
	}
}

// TestOneDemo: both ways offer the same tools, described alike, and
// answer every call with the same value or the same error code.
func TestOneDemo(t *testing.T) {
	steps := []struct {
		tool, args string
		want       string     // JSON result
		code       fault.Code // else the error
	}{
		{tool: "echo", args: `{"x":[1]}`, want: `{"x":[1]}`},
		{tool: "echo", args: `{}`, want: `{}`},
		{tool: "add", args: `{"a":2,"b":3}`, want: `5`},
		{tool: "add", args: `{"a":"x","b":3}`, code: fault.InvalidArguments},
		{tool: "fail", args: `{"message":"boom"}`, code: fault.ToolError},
		{tool: "sleep", args: `{"ms":1}`, want: `{"slept_ms":1}`},
		{tool: "sleep", args: `{"ms":60001}`, code: fault.InvalidArguments},
		{tool: "kv_set", args: `{"key":"k","value":{"n":1}}`, want: `{"key":"k","stored":true}`},
		{tool: "kv_get", args: `{"key":"k"}`, want: `{"key":"k","found":true,"value":{"n":1}}`},
		{tool: "kv_list", args: `{}`, want: `{"keys":["k"]}`},
		{tool: "kv_delete", args: `{"key":"k"}`, want: `"deleted k"`},
		{tool: "kv_delete", args: `{"key":"k"}`, code: fault.ToolError},
		{tool: "kv_get", args: `{"key":"k"}`, want: `{"key":"k","found":false}`},
		{tool: "word_count", args: `{"text":"a b\nc"}`, want: `{"words":3,"lines":2,"chars":5}`},
		{tool: "transform_text", args: `{"text":"hello world","op":"title"}`, want: `"Hello World"`},
		{tool: "transform_text", args: `{"text":"abc","op":"reverse"}`, want: `"cba"`},
		{tool: "transform_text", args: `{"text":"abc","op":"shout"}`, code: fault.InvalidArguments},
	}
	ctx := context.Background()
	var listings [][]catalog.Tool
	for name, src := range sources(t) {
		t.Run(name, func(t *testing.T) {
			tools, err := src.Tools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tools {
				tools[i].Kind = ""
			}
			slices.SortFunc(tools, func(a, b catalog.Tool) int { return bytes.Compare([]byte(a.Name), []byte(b.Name)) })
			listings = append(listings, tools)
			byName := map[string]catalog.Tool{}
			for _, tl := range tools {
				byName[tl.Name] = tl
			}
			// Under MCP's defaults a tool that says nothing is
			// destructive: every demo tool says what it is, and only
			// kv_delete is, so the demo reads and writes without asking.
			for _, tl := range tools {
				if tl.IsDestructive() != (tl.Name == "kv_delete") || tl.Annotations.ReadOnly == nil || tl.Annotations.Destructive == nil {
					t.Errorf("%s: destructive %v, annotations %+v", tl.Name, tl.IsDestructive(), tl.Annotations)
				}
			}
			for _, s := range steps {
				got, err := src.Call(ctx, byName[s.tool], json.RawMessage(s.args), execution.CallOptions{Lineage: execution.Lineage{AllowDestructive: true}})
				if s.code != "" {
					if fault.CodeOf(err) != s.code {
						t.Errorf("%s(%s): %s %v; want %s", s.tool, s.args, got, err, s.code)
					}
					continue
				}
				if err != nil || !jsonEqual(got, s.want) {
					t.Errorf("%s(%s) = %s %v; want %s", s.tool, s.args, got, err, s.want)
				}
			}
			now, err := src.Call(ctx, byName["now"], nil, execution.CallOptions{})
			var n struct {
				ISO    string `json:"iso"`
				UnixMS int64  `json:"unix_ms"`
			}
			if err != nil || json.Unmarshal(now, &n) != nil || n.ISO == "" || time.Since(time.UnixMilli(n.UnixMS)) > time.Minute {
				t.Errorf("now = %s %v", now, err)
			}
		})
	}
	if len(listings) == 2 {
		a, _ := json.Marshal(listings[0])
		b, _ := json.Marshal(listings[1])
		if !bytes.Equal(a, b) {
			t.Errorf("the listings differ:\n%s\n%s", a, b)
		}
	}
}

func jsonEqual(raw json.RawMessage, want string) bool {
	var g, w any
	if json.Unmarshal(raw, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return bytes.Equal(gb, wb)
}

// TestSleepStopsWithItsContext: a sleep ends when its caller gives up.
func TestSleepStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := demoserver.New().Call(ctx, "sleep", json.RawMessage(`{"ms":60000}`))
	if fault.CodeOf(err) != fault.Timeout {
		t.Fatalf("got %v; want TIMEOUT", err)
	}
}

// TestGuestHostAnswersAtOnce: the benchmark's host answers every tool but
// sleep on the calling goroutine, and leaves sleep to CallTool.
func TestGuestHostAnswersAtOnce(t *testing.T) {
	tools, host := demoserver.New().Guest()
	if len(tools) != len(demoserver.Definitions()) {
		t.Fatalf("%d tools; want every demo tool", len(tools))
	}
	im, ok := host.(guest.ImmediateHost)
	if !ok {
		t.Fatal("the guest host is no ImmediateHost")
	}
	tests := []struct {
		tool, args string
		handled    bool
		want       string
	}{
		{"echo", `{"i":1}`, true, `{"i":1}`},
		{"add", `{"a":1,"b":2}`, true, `3`},
		{"sleep", `{"ms":1}`, false, ``},
	}
	for _, tt := range tests {
		got, handled, err := im.CallImmediate(guest.Call{Server: demoserver.Name, Tool: tt.tool, Args: json.RawMessage(tt.args)})
		if handled != tt.handled || (handled && (err != nil || !jsonEqual(got, tt.want))) {
			t.Errorf("%s: %s %v %v; want handled=%v %s", tt.tool, got, handled, err, tt.handled, tt.want)
		}
	}
	if got, err := host.CallTool(context.Background(), guest.Call{Server: demoserver.Name, Tool: "sleep", Args: json.RawMessage(`{"ms":1}`)}); err != nil || !jsonEqual(got, `{"slept_ms":1}`) {
		t.Errorf("sleep: %s %v", got, err)
	}
}
