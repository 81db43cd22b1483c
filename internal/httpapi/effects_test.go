package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/journal"
)

// TestExecutionDocumentListsEffects: GET /executions/{id} lists an
// execution's effects from the journal beside its trace; for one whose
// trace was lost (its runner died first) it answers from the journal
// alone, saying so — to its owner only: anyone else gets the answer for an
// unknown id.
func TestExecutionDocumentListsEffects(t *testing.T) {
	ctx := context.Background()
	const owner = "arn:aws:iam::1:user/owner"
	j := journal.NewMemory()
	for _, id := range []string{"ex_owned", "ex_lost"} {
		for call := 1; call <= 2; call++ {
			e := &journal.Entry{ExecutionID: id, CallID: call, Principal: owner, Server: "kv", Tool: "kv_set", Key: journal.Key(id, call), Args: json.RawMessage(`{}`)}
			if _, err := j.Intend(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.Settle(ctx, id, 1, journal.Outcome{Status: journal.Applied}); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Logger: log})
	h := httpapi.New(httpapi.Options{Service: svc, Traces: ownedTraces{id: "ex_owned", owner: owner}, Journal: j, Logger: log})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), r.Header.Get("X-Test-Principal"))))
	}))
	defer srv.Close()
	get := func(id, principal string) (int, map[string]any, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/executions/"+id, nil)
		req.Header.Set("X-Test-Principal", principal)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var doc map[string]any
		_ = json.Unmarshal(b, &doc)
		return resp.StatusCode, doc, string(b)
	}
	effects := func(doc map[string]any) []execution.Effect {
		raw, _ := json.Marshal(doc["effects"])
		var out []execution.Effect
		_ = json.Unmarshal(raw, &out)
		return out
	}
	status, doc, body := get("ex_owned", owner)
	if e := effects(doc); status != 200 || len(e) != 2 || e[0].Status != "applied" || e[0].Key != journal.Key("ex_owned", 1) ||
		e[1].Status != "unknown" || e[1].Error == nil || e[1].Error.Code != fault.OutcomeUnknown || doc["trace_missing"] != nil {
		t.Fatalf("with its trace: %d %s", status, body)
	}
	// Lost trace: the journal answers, and the effect in flight reads
	// pending (the run may still be going: it is not LostAfter old).
	status, doc, body = get("ex_lost", owner)
	if e := effects(doc); status != 200 || doc["trace_missing"] != true || len(e) != 2 || e[0].Status != "applied" || e[1].Status != "pending" {
		t.Fatalf("without its trace: %d %s", status, body)
	}
	_, _, missing := get("ex_none", "arn:aws:iam::1:user/mallory")
	for _, id := range []string{"ex_owned", "ex_lost"} {
		status, _, body := get(id, "arn:aws:iam::1:user/mallory")
		if status != 404 || strings.Replace(body, id, "ex_none", 1) != missing {
			t.Errorf("another principal reading %s: %d %s; want the answer for a missing id (%s)", id, status, body, missing)
		}
	}
}
