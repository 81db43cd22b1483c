package app_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpapi"
)

func TestFromEnv(t *testing.T) {
	ds, err := demoserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		name    string
		env     map[string]string
		wantErr bool
		tools   []string // full names that must be in the catalog
	}{
		{"nothing configured", map[string]string{}, false, nil},
		{"demo tools", map[string]string{app.EnvDemoTools: "on"}, false, []string{"demo:echo"}},
		{"inline MCP servers", map[string]string{app.EnvMCPServers: `{"servers": [{"name": "kv", "url": "` + ds.StreamableURL() + `"}]}`}, false, []string{"kv:word_count"}},
		{"malformed server list", map[string]string{app.EnvMCPServers: `{"servers": [{"name": "kv"`}, true, nil},
		{"unknown field in the server list", map[string]string{app.EnvMCPServers: `{"servers": [{"name": "kv", "url": "http://127.0.0.1:1/mcp", "colour": "red"}]}`}, true, nil},
		{"bad server name", map[string]string{app.EnvMCPServers: `{"servers": [{"name": "__proto__", "url": "http://127.0.0.1:1/mcp"}]}`}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(app.EnvCompileCache, t.TempDir())
			t.Setenv(app.EnvCapFile, filepath.Join(t.TempDir(), "caps.json"))
			for _, k := range []string{app.EnvMCPServers, app.EnvMCPServersParam, app.EnvDemoTools, app.EnvTracesTable, app.EnvCapTable, app.EnvCapFunction, "AWS_XRAY_DAEMON_ADDRESS", "LAMBDA_TASK_ROOT"} {
				t.Setenv(k, "")
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			a, err := app.FromEnv(context.Background(), log)
			if tt.wantErr {
				if err == nil {
					a.Close(context.Background())
					t.Fatal("accepted a bad configuration")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background())
			names := map[string]bool{}
			for _, tool := range a.Service.Catalog(context.Background()) {
				names[tool.FullName()] = true
			}
			for _, want := range tt.tools {
				if !names[want] {
					t.Errorf("catalog lacks %s: %v", want, names)
				}
			}
			if a.Traces == nil || a.Capabilities == nil || a.Registry == nil {
				t.Fatalf("incomplete wiring: %+v", a)
			}
		})
	}
}

// TestSaveRefusesAServerNamespace: a capability named after a configured
// MCP server would take that server's calls while it is down; saving one is
// refused, and nothing is stored.
func TestSaveRefusesAServerNamespace(t *testing.T) {
	t.Setenv(app.EnvCompileCache, t.TempDir())
	t.Setenv(app.EnvCapFile, filepath.Join(t.TempDir(), "caps.json"))
	for _, k := range []string{app.EnvMCPServersParam, app.EnvDemoTools, app.EnvTracesTable, app.EnvCapTable, app.EnvCapFunction, "AWS_XRAY_DAEMON_ADDRESS", "LAMBDA_TASK_ROOT"} {
		t.Setenv(k, "")
	}
	// Never reachable: the refusal must not depend on the server's state.
	t.Setenv(app.EnvMCPServers, `{"servers": [{"name": "kv", "url": "http://127.0.0.1:1/mcp"}]}`)
	ctx := context.Background()
	a, err := app.FromEnv(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)

	_, err = a.Capabilities.Save(ctx, httpapi.CapabilitySave{Name: "kv:kv_get", Code: "return 1"})
	if fault.CodeOf(err) != fault.InvalidRequest || !strings.Contains(err.Error(), "MCP server") {
		t.Fatalf("saving kv:kv_get next to server kv: %v; want INVALID_REQUEST naming the server", err)
	}
	if caps, err := a.Registry.List(ctx); err != nil || len(caps) != 0 {
		t.Errorf("registry after the refused save: %v, %v; want it empty", caps, err)
	}
	if _, err := a.Capabilities.Save(ctx, httpapi.CapabilitySave{Name: "math:double", Code: "return 1"}); err != nil {
		t.Errorf("saving in a free namespace: %v", err)
	}
}
