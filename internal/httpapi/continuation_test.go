package httpapi_test

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
)

// TestStreamedExecutionIsARun: a streamed execution is recorded as a run
// where the service keeps runs, so that its document is found by the id
// its stream sent first (and it would be continued, its process dying);
// the stream itself is what it was.
func TestStreamedExecutionIsARun(t *testing.T) {
	base := newAsyncServer(t, true)
	resp := postStream(t, base, `{"code": "await mcp.demo.kv_set({key: \"s\", value: 1}); return 7"}`)
	id := resp.Header.Get("X-Execution-Id")
	sc := bufio.NewScanner(resp.Body)
	var ev sseEvent
	for ev = readEvent(t, sc); ev.name != httpapi.EventResult; ev = readEvent(t, sc) {
	}
	var res struct {
		Status int             `json:"status"`
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(ev.data), &res); err != nil || res.Status != 200 || !res.OK || string(res.Result) != "7" {
		t.Fatalf("result %s", ev.data)
	}
	status, _, doc := fronttest.Call(t, "GET", base+"/executions/"+id, "", "")
	if status != 200 || doc["status"] != "completed" || doc["result"] != float64(7) {
		t.Fatalf("the run's document: %d %v", status, doc)
	}
	if effects, _ := doc["effects"].([]any); len(effects) != 1 {
		t.Fatalf("effects %v", doc["effects"])
	}
}

// TestFollowExecution: a caller whose stream was cut follows the
// execution by id, as an event stream (Last-Event-ID or not): keep-alives
// while it runs, then its result; one that has ended is answered at once,
// as a plain GET.
func TestFollowExecution(t *testing.T) {
	base := newAsyncServer(t, true)
	status, _, doc := fronttest.Call(t, "POST", base+"/execute", "", `{"code": "await mcp.demo.sleep({ms: 400}); return 5", "async": true}`)
	if status != 202 {
		t.Fatalf("POST async: %d %v", status, doc)
	}
	id, _ := doc["execution_id"].(string)
	req, _ := http.NewRequest("GET", base+"/executions/"+id, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	ev := readEvent(t, bufio.NewScanner(resp.Body))
	var res struct {
		Status      int    `json:"status"`
		OK          bool   `json:"ok"`
		ExecutionID string `json:"execution_id"`
	}
	if ev.name != httpapi.EventResult || json.Unmarshal([]byte(ev.data), &res) != nil || res.Status != 200 || !res.OK || res.ExecutionID != id {
		t.Fatalf("followed: %+v", ev)
	}
	again, _ := http.NewRequest("GET", base+"/executions/"+id, nil)
	again.Header.Set("Accept", "text/event-stream")
	plain, err := http.DefaultClient.Do(again)
	if err != nil {
		t.Fatal(err)
	}
	plain.Body.Close()
	if ct := plain.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("an ended execution followed: %q", ct)
	}
}

// TestEarlyID: with EarlyID, a synchronous POST /execute sends its
// execution's id in a 103 before the run, the same id its answer has.
func TestEarlyID(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Service: svc, Logger: log, Streaming: true, EarlyID: true}))
	t.Cleanup(srv.Close)
	var early string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusEarlyHints {
			early = h.Get("X-Execution-Id")
		}
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "POST", srv.URL+"/execute", strings.NewReader(`{"code": "return 1"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || early == "" || early != resp.Header.Get("X-Execution-Id") {
		t.Fatalf("status %d, early id %q, answer's %q", resp.StatusCode, early, resp.Header.Get("X-Execution-Id"))
	}
}
