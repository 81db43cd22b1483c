package httpapi_test

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/delivery"
	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/httpapi"
	"github.com/pml-sandbox/pml/internal/testutil/fronttest"
	"github.com/pml-sandbox/pml/internal/trace"
)

func streamingServer(t *testing.T, streaming bool, sources ...execution.ToolSource) *httptest.Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: append([]execution.ToolSource{demoserver.Source{}}, sources...), Logger: log})
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Service: svc, Logger: log, Streaming: streaming}))
	t.Cleanup(srv.Close)
	return srv
}

type sseEvent struct{ name, data string }

// readEvent reads the next server-sent event.
func readEvent(t *testing.T, sc *bufio.Scanner) sseEvent {
	t.Helper()
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && ev.name != "":
			return ev
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
	t.Fatalf("stream ended (%v) before an event; last %+v", sc.Err(), ev)
	return ev
}

func postStream(t *testing.T, url, body string) *http.Response {
	t.Helper()
	return postStreamTo(t, url+"/execute", body)
}

// postStreamTo posts body to url asking for an event stream.
func postStreamTo(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestExecuteStreamsEventsAsTheyHappen: the events of a call arrive while
// the call is still running (the gate is opened only once its call_start
// has been read), and the result event carries the document and the
// status the plain request would have had.
func TestExecuteStreamsEventsAsTheyHappen(t *testing.T) {
	gate := fronttest.GateSource{Open: make(chan struct{})}
	srv := streamingServer(t, true, gate)
	resp := postStream(t, srv.URL, `{"code": "console.log('before'); await mcp.demo.add({a: 1, b: 2}); return await mcp.gate.wait({})"}`)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" || resp.Header.Get("X-Execution-Id") == "" {
		t.Fatalf("status %d, Content-Type %q, X-Execution-Id %q", resp.StatusCode, ct, resp.Header.Get("X-Execution-Id"))
	}
	sc := bufio.NewScanner(resp.Body)
	want := []struct{ name, contains string }{
		{"log", `"message":"before"`},
		{"call_start", `"tool":"add"`},
		{"call_end", `"tool":"add"`},
		{"call_start", `"tool":"wait"`},
	}
	for _, w := range want {
		if ev := readEvent(t, sc); ev.name != w.name || !strings.Contains(ev.data, w.contains) {
			t.Fatalf("event %s %s, want %s with %s", ev.name, ev.data, w.name, w.contains)
		}
	}
	close(gate.Open) // only now can the call, and the script, end
	if ev := readEvent(t, sc); ev.name != "call_end" || !strings.Contains(ev.data, `"tool":"wait"`) || !strings.Contains(ev.data, `"ok":true`) {
		t.Fatalf("event %s %s, want call_end of wait", ev.name, ev.data)
	}
	ev := readEvent(t, sc)
	var res struct {
		Status int             `json:"status"`
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
		Calls  []trace.Call    `json:"calls"`
		ID     string          `json:"execution_id"`
	}
	if err := json.Unmarshal([]byte(ev.data), &res); err != nil || ev.name != "result" {
		t.Fatalf("event %s %s (%v), want result", ev.name, ev.data, err)
	}
	if res.Status != 200 || !res.OK || string(res.Result) != `"opened"` || len(res.Calls) != 2 || res.ID != resp.Header.Get("X-Execution-Id") {
		t.Errorf("result = %+v", res)
	}
	if sc.Scan() {
		t.Errorf("more after the result: %q", sc.Text())
	}
}

func TestExecuteStreamStatusAndFallbacks(t *testing.T) {
	srv := streamingServer(t, true)
	sc := bufio.NewScanner(postStream(t, srv.URL, `{"code": "throw new Error('no')"}`).Body)
	if ev := readEvent(t, sc); ev.name != "result" || !strings.Contains(ev.data, `"status":422`) || !strings.Contains(ev.data, `"SCRIPT_ERROR"`) {
		t.Errorf("event %s %s, want the result with status 422", ev.name, ev.data)
	}
	// A request that cannot be decoded is answered before any stream.
	if resp := postStream(t, srv.URL, `{"code": ""}`); resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("empty code: %d %s, want a plain 400", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// Without Streaming (the Lambda), and without the Accept header, JSON.
	for name, url := range map[string]string{"not streaming": streamingServer(t, false).URL, "no accept": srv.URL} {
		req, _ := http.NewRequest("POST", url+"/execute", strings.NewReader(`{"code": "return 1"}`))
		req.Header.Set("Content-Type", "application/json")
		if name == "not streaming" {
			req.Header.Set("Accept", "text/event-stream")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s, want plain JSON", name, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

// TestStreamHeartbeat: a stream whose script is silent longer than the
// heartbeat gets comment lines meanwhile (API Gateway closes a stream idle
// for 5 minutes, 30 s behind an edge-optimized endpoint), and they do not
// disturb the events.
func TestStreamHeartbeat(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Service: svc, Logger: log, Streaming: true, StreamHeartbeat: 40 * time.Millisecond}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("POST", srv.URL+"/execute", strings.NewReader(`{"code": "await mcp.demo.sleep({ms: 300}); return 1"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	beats := strings.Count(string(body), ": keep-alive\n\n")
	if beats < 2 || !strings.Contains(string(body), "event: call_end") || !strings.Contains(string(body), "event: result") {
		t.Fatalf("%d heartbeats in %q", beats, body)
	}
}

// TestStreamingPerRequest: a handler that does not stream (the Lambda)
// streams the requests its front marks (WithStreaming), and only those.
func TestStreamingPerRequest(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: log})
	h := httpapi.New(httpapi.Options{Service: svc, Logger: log})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Front") == "rest" {
			r = r.WithContext(delivery.WithStreaming(r.Context()))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	for front, want := range map[string]string{"rest": "text/event-stream", "http": "application/json"} {
		req, _ := http.NewRequest("POST", srv.URL+"/execute", strings.NewReader(`{"code": "return 1"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("X-Front", front)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Content-Type"); got != want {
			t.Errorf("%s front: %s, want %s", front, got, want)
		}
	}
}
