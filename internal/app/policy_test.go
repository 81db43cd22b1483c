package app_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// TestPolicyFromEnv: PML_POLICY names the set every call goes through; a
// set that does not validate stops the service from starting, naming the
// problem and its line.
func TestPolicyFromEnv(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.cedar"), filepath.Join(dir, "bad.cedar")
	_ = os.WriteFile(good, []byte(`@id("echo-only") permit (principal, action == PML::Action::"call", resource == PML::Tool::"demo:echo");`), 0o600)
	_ = os.WriteFile(bad, []byte("@id(\"typo\")\npermit (principal, action == PML::Action::\"call\", resource)\nwhen { resource.readOnyl };"), 0o600)

	cleanEnv(t)
	t.Setenv(app.EnvDemoTools, "on")
	t.Setenv(app.EnvPolicy, bad)
	if a, err := app.FromEnv(ctx, log); err == nil {
		a.Close(ctx)
		t.Fatal("a policy set that does not validate was loaded")
	} else if fault.CodeOf(err) != fault.InvalidRequest || !strings.Contains(err.Error(), "bad.cedar:1: policy \"typo\"") || !strings.Contains(err.Error(), "readOnyl") {
		t.Fatalf("the refusal: %v", err)
	}
	t.Setenv(app.EnvPolicy, filepath.Join(dir, "missing.cedar"))
	if a, err := app.FromEnv(ctx, log); err == nil {
		a.Close(ctx)
		t.Fatal("a missing policy file was not an error")
	}

	t.Setenv(app.EnvPolicy, good)
	a, err := app.FromEnv(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	r := a.Service.Execute(ctx, execution.Request{Code: `const e = await mcp.demo.echo({x: 1});
		try { await mcp.demo.add({a: 1, b: 2}); return "added" } catch (err) { return err.code }`})
	if !r.OK || string(r.Result) != `"FORBIDDEN"` {
		t.Fatalf("under the file: %s %+v", r.Result, r.Error)
	}
	if got := r.Calls[0].Policies; len(got) != 1 || got[0] != "echo-only" {
		t.Errorf("the call's policies: %v", got)
	}
}
