package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
	"github.com/pml-sandbox/pml/internal/testutil/prism"
)

// petsPolicy is the operator's policy file: anyone reads pets, deletes
// only outside the protected range (1-99), at most 3 an hour per
// principal.
const petsPolicy = `
@id("read-pets")
permit (principal, action == PML::Action::"call", resource in PML::Server::"pets")
when { resource.name like "getPet*" };

@id("delete-pets")
@limit("3/1h")
permit (principal, action == PML::Action::"call", resource == PML::Tool::"pets:deletePet");

@id("protected-pets")
forbid (principal, action == PML::Action::"call", resource == PML::Tool::"pets:deletePet")
unless {
  context.args.hasTag("petId") &&
  context.args.getTag("petId") has long &&
  context.args.getTag("petId").long >= 100
};
`

// TestPolicyDeployed: one policy file decides every call in the deployed
// shape — the execute binary behind the Lambda emulator, an OpenAPI
// petstore over loopback, limits counted in DynamoDB Local — and two
// containers of the function count against one limit.
func TestPolicyDeployed(t *testing.T) {
	doc := prism.Document(t, "3.0/json/petstore.json")
	api := prism.Start(t, doc)
	policyFile := filepath.Join(t.TempDir(), "policy.cedar")
	if err := os.WriteFile(policyFile, []byte(petsPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	table := fmt.Sprintf("policy_%d", time.Now().UnixNano())
	pets := fmt.Sprintf(`{"name": "pets", "type": "openapi", "spec": %q, "base_url": %q,
	  "headers": {"api_key": "${env:PETSTORE_API_KEY}", "Authorization": "Bearer ${env:PETSTORE_TOKEN}"},
	  "allow_destructive": true}`, doc, api.URL)
	s := newStackWith(t, stackOptions{
		servers: []string{pets},
		env:     append([]string{app.EnvSuspTable + "=" + table, app.EnvPolicy + "=" + policyFile}, petstoreSecrets...),
		execute: func(f *lambdaemu.Function) { f.MaxConcurrency = 2 },
	})
	if err := suspend.CreateTable(context.Background(), s.db.Client(), table); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, principal, code string) execution.Response {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"code": code})
		ev := httpEvent("POST", "/execute", string(body))
		ev.RequestContext.Authorizer = authorizer(principal)
		_, r := decodeHTTP(t, s.invoke(t, "execute", ev, ""))
		return r
	}
	deletes := func() int { return len(regexp.MustCompile(`(?i)delete /pet/`).FindAllString(api.Log(), -1)) }

	t.Run("reads run, protected deletes are refused by name", func(t *testing.T) {
		before := deletes()
		r := run(t, agentPrincipal, `const pet = await mcp.pets.getPetById({petId: 5});
			const out = [typeof pet.name];
			for (const args of [{petId: 5}, {petId: "42"}, {petId: "150abc"}, {}]) {
			  try { await mcp.pets.deletePet(args); out.push("sent") } catch (e) { out.push(e.code + " " + e.message) }
			}
			try { await mcp.pets.findPetsByStatus({status: ["sold"]}); out.push("sent") } catch (e) { out.push(e.code + " " + e.message) }
			return out`)
		var out []string
		if err := json.Unmarshal(r.Result, &out); err != nil || len(out) != 6 {
			t.Fatalf("result %s, error %+v", r.Result, r.Error)
		}
		if out[0] != "string" {
			t.Errorf("the read: %q", out[0])
		}
		for _, got := range out[1:5] {
			if !strings.HasPrefix(got, "FORBIDDEN") || !strings.Contains(got, `policy "protected-pets"`) {
				t.Errorf("a protected delete: %q; want FORBIDDEN naming protected-pets", got)
			}
		}
		if !strings.HasPrefix(out[5], "FORBIDDEN") || !strings.Contains(out[5], "no policy permits it") {
			t.Errorf("a tool no policy permits: %q", out[5])
		}
		if n := deletes() - before; n != 0 {
			t.Errorf("%d refused deletes reached the service", n)
		}
		// The trace names the policies that decided each call.
		_, calls, err := s.traces.GetExecution(context.Background(), r.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != 6 || strings.Join(calls[0].Policies, ",") != "read-pets" || strings.Join(calls[1].Policies, ",") != "protected-pets" {
			t.Errorf("traced policies: %+v", calls)
		}
	})

	t.Run("two containers count against one limit", func(t *testing.T) {
		before := deletes()
		// Both executions wait first, so both are in flight at once and
		// the emulator runs them in two processes: two containers, each
		// with its own memory, one count in DynamoDB.
		code := `await new Promise(r => setTimeout(r, 1500));
			const out = [];
			for (const petId of [101, 102, 103]) {
			  try { await mcp.pets.deletePet({petId}); out.push("sent") }
			  catch (e) { out.push(e.code === "TOOL_ERROR" ? "sent" : e.code + " " + e.message) }
			}
			return out`
		var wg sync.WaitGroup
		results := make([]execution.Response, 2)
		for i := range results {
			wg.Go(func() { results[i] = run(t, agentPrincipal, code) })
		}
		wg.Wait()
		if n, err := s.emu.Recycle("execute"); err != nil || n != 2 {
			t.Fatalf("%d containers ran the two executions (%v); want 2", n, err)
		}
		sent, over := 0, 0
		for _, r := range results {
			var out []string
			if err := json.Unmarshal(r.Result, &out); err != nil {
				t.Fatalf("result %s, error %+v", r.Result, r.Error)
			}
			for _, got := range out {
				switch {
				case got == "sent":
					sent++
				case strings.HasPrefix(got, "LIMIT_EXCEEDED") && strings.Contains(got, `policy "delete-pets"`) && strings.Contains(got, "3/1h"):
					over++
				default:
					t.Errorf("a delete: %q", got)
				}
			}
		}
		if sent != 3 || over != 3 {
			t.Fatalf("%d deletes sent and %d over the limit; want 3 and 3", sent, over)
		}
		if n := deletes() - before; n != 3 {
			t.Errorf("%d deletes reached the service; want 3", n)
		}
		// The limit is per principal: another still has its three.
		r := run(t, approverPrincipal, `const out = [];
			for (const petId of [201, 202, 203, 204]) {
			  try { await mcp.pets.deletePet({petId}); out.push("sent") } catch (e) { out.push(e.code === "TOOL_ERROR" ? "sent" : e.code) }
			}
			return out`)
		if string(r.Result) != `["sent","sent","sent","LIMIT_EXCEEDED"]` {
			t.Fatalf("another principal: %s %+v", r.Result, r.Error)
		}
	})
}
