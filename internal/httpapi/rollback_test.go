package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/compensate"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// bookSource is one server, "book": add makes an entry, remove (an undo
// declared for add; destructive when the test says) removes it.
type bookSource struct {
	destructive bool
	mu          sync.Mutex
	n           int
}

func (b *bookSource) Tools(context.Context) ([]catalog.Tool, error) {
	no := false
	undo, err := compensate.Compile("remove", json.RawMessage(`{"id":"$.result.id"}`))
	if err != nil {
		return nil, err
	}
	rm := catalog.Annotations{ReadOnly: &no, Destructive: &b.destructive}
	return []catalog.Tool{
		{Server: "book", Name: "add", Kind: trace.KindMCP, Annotations: catalog.Annotations{ReadOnly: &no, Destructive: &no}, Compensate: undo},
		{Server: "book", Name: "remove", Kind: trace.KindMCP, Annotations: rm},
	}, nil
}

func (b *bookSource) Call(_ context.Context, t catalog.Tool, _ json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	if t.NeedsApproval() && !opt.AllowDestructive {
		opt.Refused()
		return nil, fault.New(fault.Forbidden, "needs approval")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	return json.RawMessage(fmt.Sprintf(`{"id":"e-%d"}`, b.n)), nil
}

// TestRollbackRoute: POST /executions/{id}/rollback answers 200 with what
// became of each effect, and the execution's document then reads
// rolled_back; again, 409; another principal, exactly an unknown id's 404;
// a known execution with nothing to undo, 200; a rollback that waits for a
// person, 202 naming its execution; a body that is not JSON, 415 or 400.
func TestRollbackRoute(t *testing.T) {
	const owner, other = "arn:aws:iam::1:user/owner", "arn:aws:iam::1:user/mallory"
	for _, destructive := range []bool{false, true} {
		t.Run(fmt.Sprint("destructive undo ", destructive), func(t *testing.T) {
			log := slog.New(slog.DiscardHandler)
			traces := tracedb.NewMemory(0)
			j := journal.NewMemory()
			svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{&bookSource{destructive: destructive}}, Sink: traces, Traces: traces,
				Journal: j, Logger: log, Policy: approval.Policy{}, Suspensions: suspend.NewFile(t.TempDir(), suspend.Options{})})
			h := httpapi.New(httpapi.Options{Service: svc, Traces: traces, Journal: j, Logger: log})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r.WithContext(execution.WithPrincipal(r.Context(), r.Header.Get("X-Test-Principal"))))
			}))
			defer srv.Close()
			do := func(method, path, principal, ctype, body string) (int, string) {
				req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
				req.Header.Set("X-Test-Principal", principal)
				if ctype != "" {
					req.Header.Set("Content-Type", ctype)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			ran := svc.Execute(context.Background(), execution.Request{Code: `await mcp.book.add({}); await mcp.book.add({}); return 1`, Principal: owner})
			reads := svc.Execute(context.Background(), execution.Request{Code: `return 1`, Principal: owner})
			path := "/executions/" + ran.ExecutionID + "/rollback"

			status, missing := do("POST", "/executions/ex_nope/rollback", other, "", "")
			if status != 404 {
				t.Fatalf("unknown: %d %s", status, missing)
			}
			if status, body := do("POST", path, other, "", ""); status != 404 || strings.Replace(body, ran.ExecutionID, "ex_nope", 1) != missing {
				t.Fatalf("another principal: %d %s", status, body)
			}
			if status, body := do("POST", path, owner, "text/plain", `{}`); status != 415 {
				t.Fatalf("not JSON: %d %s", status, body)
			}
			if status, body := do("POST", path, owner, "application/json", `{"allow_destructiv": true}`); status != 400 || !strings.Contains(body, "allow_destructiv") {
				t.Fatalf("a typo: %d %s", status, body)
			}
			if status, body := do("POST", "/executions/"+reads.ExecutionID+"/rollback", owner, "", ""); status != 200 || !strings.Contains(body, `"status":"nothing_to_do"`) {
				t.Fatalf("nothing to do: %d %s", status, body)
			}
			status, body := do("POST", path, owner, "", "")
			var rb execution.Rollback
			_ = json.Unmarshal([]byte(body), &rb)
			if destructive {
				if status != 202 || rb.Status != execution.RollingBack || rb.Execution == nil || !rb.Execution.Suspended() {
					t.Fatalf("waits: %d %s", status, body)
				}
				if status, body := do("POST", path, owner, "", ""); status != 409 || !strings.Contains(body, "under way") {
					t.Fatalf("meanwhile: %d %s", status, body)
				}
				return
			}
			if status != 200 || rb.Status != execution.RolledBack || len(rb.Effects) != 2 {
				t.Fatalf("rollback: %d %s", status, body)
			}
			if _, doc := do("GET", "/executions/"+ran.ExecutionID, owner, "", ""); !strings.Contains(doc, `"rollback":"rolled_back"`) || !strings.Contains(doc, `"compensation":{"status":"compensated"`) {
				t.Fatalf("document %s", doc)
			}
			if _, doc := do("GET", "/executions/"+rb.RollbackID, owner, "", ""); !strings.Contains(doc, `"rollback_of":"`+ran.ExecutionID+`"`) {
				t.Fatalf("the rollback's own document %s", doc)
			}
			if status, body := do("POST", path, owner, "", ""); status != 409 || !strings.Contains(body, "rolled back already") {
				t.Fatalf("again: %d %s", status, body)
			}
		})
	}
}
