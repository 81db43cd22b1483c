package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/capapi"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// cleanEnv clears every variable app reads, then points the compilation
// cache and the capability file at the test's own directories.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, k := range app.EnvVars {
		t.Setenv(k, "")
	}
	t.Setenv(app.EnvCompileCache, t.TempDir())
	t.Setenv(app.EnvCapFile, filepath.Join(t.TempDir(), "caps.json"))
}

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
		{"a server named then", map[string]string{app.EnvMCPServers: `{"servers": [{"name": "then", "url": "http://127.0.0.1:1/mcp"}]}`}, true, nil},
		{"one demo in process", map[string]string{app.EnvDemoTools: "on"}, false, []string{"demo:echo", "demo:add", "demo:fail", "demo:sleep", "demo:kv_get", "demo:word_count", "demo:now"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t)
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
	cleanEnv(t)
	// Never reachable: the refusal must not depend on the server's state.
	t.Setenv(app.EnvMCPServers, `{"servers": [{"name": "kv", "url": "http://127.0.0.1:1/mcp"}]}`)
	ctx := context.Background()
	a, err := app.FromEnv(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)

	// The Lambda's default policy: the caller may not publish, and a
	// save in a free namespace waits as a draft.
	_, err = a.Capabilities.Submit(ctx, approval.Decider{}, "", capapi.CapabilitySave{Name: "kv:kv_get", Code: "return 1"})
	if fault.CodeOf(err) != fault.InvalidRequest || !strings.Contains(err.Error(), "MCP server") {
		t.Fatalf("saving kv:kv_get next to server kv: %v; want INVALID_REQUEST naming the server", err)
	}
	if caps, err := a.Registry.List(ctx); err != nil || len(caps) != 0 {
		t.Errorf("registry after the refused save: %v, %v; want it empty", caps, err)
	}
	if out, err := a.Capabilities.Submit(ctx, approval.Decider{}, "", capapi.CapabilitySave{Name: "math:double", Code: "return 1"}); err != nil || out.Status != capability.OutcomeDraft {
		t.Errorf("saving in a free namespace: %+v, %v; want a draft", out, err)
	}
}

// TestHealthWithoutServers: /healthz lists no servers as an empty list,
// never null, whichever front end serves it.
func TestHealthWithoutServers(t *testing.T) {
	cleanEnv(t)
	a, err := app.FromEnv(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	b, err := json.Marshal(a.Health())
	if err != nil || string(b) != `{"mcp_servers":[]}` {
		t.Fatalf("health %s %v; want {\"mcp_servers\":[]}", b, err)
	}
}

func TestLogger(t *testing.T) {
	tests := []struct {
		env        string
		def        slog.Level
		debug, err bool // which lines get through
	}{
		{"", slog.LevelWarn, false, true},
		{"debug", slog.LevelWarn, true, true},
		{"error", slog.LevelInfo, false, true},
		{"loud", slog.LevelInfo, false, true},
	}
	for _, tt := range tests {
		t.Setenv(app.EnvLogLevel, tt.env)
		var buf bytes.Buffer
		log := app.Logger(&buf, tt.def)
		log.Debug("d")
		log.Error("e")
		if got := strings.Contains(buf.String(), `"msg":"d"`); got != tt.debug {
			t.Errorf("%s=%q, default %s: debug logged %v", app.EnvLogLevel, tt.env, tt.def, got)
		}
		if got := strings.Contains(buf.String(), `"msg":"e"`); got != tt.err {
			t.Errorf("%s=%q, default %s: error logged %v", app.EnvLogLevel, tt.env, tt.def, got)
		}
	}
}

func TestMCPTextBytes(t *testing.T) {
	for v, want := range map[string]int{"": 0, "4096": 4096, "0": 0, "-1": -1, "lots": -1} {
		t.Setenv(app.EnvMCPTextBytes, v)
		n, err := app.MCPTextBytes()
		if want < 0 {
			if fault.CodeOf(err) != fault.InvalidRequest {
				t.Errorf("%q: %d, %v; want INVALID_REQUEST", v, n, err)
			}
			continue
		}
		if err != nil || n != want {
			t.Errorf("%q: %d, %v; want %d", v, n, err, want)
		}
	}
}

// TestSuspensionsFromEnv: a Lambda keeps suspended executions only where
// every container reaches them (a table, or a directory named on purpose),
// and the TTL comes from PML_SUSPENSION_TTL.
func TestSuspensionsFromEnv(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		env     map[string]string
		want    app.SuspensionConfig
		wantErr bool
	}{
		{"nothing", map[string]string{}, app.SuspensionConfig{}, false},
		{"table", map[string]string{app.EnvSuspTable: "susp"}, app.SuspensionConfig{Table: "susp"}, false},
		{"directory and TTL", map[string]string{app.EnvSuspDir: dir, app.EnvSuspTTL: "90m"}, app.SuspensionConfig{Dir: dir, TTL: 90 * time.Minute}, false},
		{"bad TTL", map[string]string{app.EnvSuspTTL: "a day"}, app.SuspensionConfig{}, true},
		{"negative TTL", map[string]string{app.EnvSuspTTL: "-1h"}, app.SuspensionConfig{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg, err := app.ConfigFromEnv()
			if tt.wantErr {
				if fault.CodeOf(err) != fault.InvalidRequest {
					t.Fatalf("%v; want INVALID_REQUEST", err)
				}
				return
			}
			if err != nil || cfg.Suspensions != tt.want {
				t.Fatalf("%+v %v; want %+v", cfg.Suspensions, err, tt.want)
			}
		})
	}
	// With a directory, a request may suspend; without a store, it is
	// refused.
	cleanEnv(t)
	t.Setenv(app.EnvDemoTools, "on")
	for _, withDir := range []bool{false, true} {
		if withDir {
			t.Setenv(app.EnvSuspDir, dir)
		}
		a, err := app.FromEnv(context.Background(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		r := a.Service.Execute(context.Background(), execution.Request{Code: `return await mcp.demo.kv_delete({key: "k"})`, Approval: execution.ApprovalSuspend})
		a.Close(context.Background())
		if got := r.Status == execution.StatusSuspended; got != withDir || (a.Suspensions != nil) != withDir {
			t.Fatalf("with a directory %v: status %q, error %+v, store %v", withDir, r.Status, r.Error, a.Suspensions)
		}
	}
}
