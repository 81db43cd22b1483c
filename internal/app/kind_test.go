package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/serverconfig"
	"github.com/pml-sandbox/pml/internal/toolsource"
	"github.com/pml-sandbox/pml/internal/trace"
)

// greetKind is a whole kind of tool source, declared here: its protocol
// is a greeting in the configuration. Everything else — decoding the
// common block, health, the catalog, the checks before a call, the
// service, the HTTP API and /mcp — is the house's.
type greetKind struct{}

type greetSpec struct {
	toolsource.Config
	Greeting string
}

func (greetKind) Info() toolsource.KindInfo {
	return toolsource.KindInfo{Type: "greet", Noun: "greeter"}
}

func (greetKind) Decode(n *yaml.Node) (toolsource.Spec, error) {
	var e struct {
		toolsource.Fields `yaml:",inline"`
		Greeting          string `yaml:"greeting"`
	}
	c, err := toolsource.Decode(n, &e, &e.Fields)
	return greetSpec{Config: c, Greeting: e.Greeting}, err
}

func (greetKind) Open(_ context.Context, spec toolsource.Spec, _ *toolsource.Handle) (toolsource.Server, error) {
	return greeter(spec.(greetSpec).Greeting), nil
}

type greeter string

func (g greeter) Load(context.Context) ([]toolsource.Tool, error) {
	ro := true
	return []toolsource.Tool{{Tool: catalog.Tool{Name: "say", Description: "Greet someone.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
		Annotations: catalog.Annotations{ReadOnly: &ro}}}}, nil
}

func (g greeter) Call(_ context.Context, c toolsource.Call) (json.RawMessage, error) {
	var a struct{ Name string }
	if err := json.Unmarshal(c.Args, &a); err != nil {
		return nil, err
	}
	return json.Marshal(string(g) + ", " + a.Name)
}

func (greeter) Close() error { return nil }

// TestAKindCostsItsProtocol: a kind declared in a test file is configured
// from a server list, health-checked, listed and called through the
// service and HTTP API that pml serve wires.
func TestAKindCostsItsProtocol(t *testing.T) {
	cleanEnv(t)
	doc := "servers:\n  - {name: hi, type: greet, greeting: hello, deny: [secret_*]}\n"
	servers, err := serverconfig.Parse("servers.yaml", []byte(doc), app.Kinds(greetKind{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := serverconfig.Parse("servers.yaml", []byte(doc), app.Kinds()); err == nil || !strings.Contains(err.Error(), `unknown type "greet"`) {
		t.Fatalf("without the kind registered: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	a, err := app.New(context.Background(), app.Config{CacheDir: t.TempDir(), Servers: servers,
		Kinds: []toolsource.Kind{greetKind{}}}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	// As pml serve on loopback without a token: /healthz tells its details.
	srv := httptest.NewServer(a.HTTPHandler(httpapi.Options{Logger: log, Guard: &httpapi.Guard{}}))
	defer srv.Close()

	var health struct {
		Details struct {
			Servers []toolsource.Health `json:"mcp_servers"`
		} `json:"details"`
	}
	get(t, srv.URL+"/healthz", &health)
	if h := health.Details.Servers; len(h) != 1 || h[0].Name != "hi" || h[0].State != toolsource.StateHealthy || h[0].Transport != "greet" {
		t.Fatalf("health: %+v", h)
	}
	var listed struct{ Tools []catalog.Tool }
	get(t, srv.URL+"/tools", &listed)
	if tools := listed.Tools; len(tools) != 1 || tools[0].FullName() != "hi:say" || tools[0].Kind != trace.KindMCP {
		t.Fatalf("tools: %+v", tools)
	}
	resp, err := http.Post(srv.URL+"/execute", "application/json",
		strings.NewReader(`{"code": "return await mcp.hi.say({name: 'Ada'})"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		OK     bool   `json:"ok"`
		Result string `json:"result"`
	}
	if err := json.Unmarshal(body, &out); err != nil || !out.OK || out.Result != "hello, Ada" {
		t.Fatalf("execute: %s", body)
	}
}

func get(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}
