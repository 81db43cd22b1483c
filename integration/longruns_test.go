package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/app"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/lambdaemu"
	"github.com/pml-sandbox/pml/internal/testutil/mcptest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// longStack is a deployment for long runs: the execute function's timeout
// is 90 s (the template allows up to 900), its REST API answers stream
// (PML_STREAM_REST_API, as the template sets it), it keeps suspensions
// and runs in DynamoDB Local, and the emulator delivers every
// asynchronous invocation twice, as Lambda may.
func longStack(t *testing.T, adjust func(*lambdaemu.Function), more ...lambdaemu.Function) *stack {
	t.Helper()
	tableName := fmt.Sprintf("longruns_%d", time.Now().UnixNano())
	s := newStackWith(t, stackOptions{
		env: []string{app.EnvStreamREST + "=on", app.EnvSuspTable + "=" + tableName},
		execute: func(f *lambdaemu.Function) {
			f.Timeout, f.MaxConcurrency = 90*time.Second, 8
			f.AsyncDuplicates, f.AsyncRetryDelay = 1, 200*time.Millisecond
			if adjust != nil {
				adjust(f)
			}
		},
		more: more,
	})
	if err := suspend.CreateTable(context.Background(), s.db.Client(), tableName); err != nil {
		t.Fatal(err)
	}
	s.suspTable = tableName
	return s
}

// runDoc is an execution's document as these tests read it.
type runDoc struct {
	OK              bool            `json:"ok"`
	Status          string          `json:"status"`
	ExecutionID     string          `json:"execution_id"`
	Result          json.RawMessage `json:"result"`
	CancelRequested bool            `json:"cancel_requested"`
	Error           *struct {
		Code, Message string
	} `json:"error"`
	Calls []trace.Call `json:"calls"`
}

func decodeDoc(t *testing.T, resp *http.Response) runDoc {
	t.Helper()
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var d runDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	return d
}

// poll GETs an execution's document until it is not running.
func poll(t *testing.T, base, id string) runDoc {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(base + "/executions/" + id)
		if err != nil {
			t.Fatal(err)
		}
		d := decodeDoc(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %+v", id, resp.StatusCode, d)
		}
		if d.Status != "running" {
			return d
		}
	}
	t.Fatalf("%s still running after a minute", id)
	return runDoc{}
}

// kvValue reads a key of the kv server through a plain execution.
func kvValue(t *testing.T, base, key string) string {
	t.Helper()
	resp := post(t, context.Background(), base+"/execute", `{"code": "return (await mcp.kv.kv_get({key: '`+key+`'})).value ?? null"}`)
	d := decodeDoc(t, resp)
	if !d.OK {
		t.Fatalf("reading %s: %+v", key, d.Error)
	}
	return string(d.Result)
}

// twentyCalls makes 20 calls 500 ms apart.
const twentyCalls = `for (let i = 0; i < 20; i++) await mcp.text.sleep({ms: 500}); return "done"`

// TestLongRuns runs the checks against the real function binaries
// behind the Lambda emulator, side by side on one deployment: live events
// over the streaming front (POST /execute and MCP progress), a 45-second
// script through it while the HTTP API gives up at 30 s, an asynchronous
// execution polled to completion, one cancelled, each started twice.
func TestLongRuns(t *testing.T) {
	s := longStack(t, nil)
	rest := s.restGateway(t, nil)
	httpAPI := s.apiGateway(t)

	t.Run("events arrive as they happen over /execute", func(t *testing.T) {
		t.Parallel()
		sent := time.Now()
		resp := post(t, context.Background(), rest+"/execute", fmt.Sprintf(`{"code": %q, "timeout_ms": 60000}`, twentyCalls), "Accept", "text/event-stream")
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		events := readSSE(resp.Body)
		var starts, ends []sse
		for _, e := range events {
			switch e.name {
			case "call_start":
				starts = append(starts, e)
			case "call_end":
				ends = append(ends, e)
			}
		}
		if len(starts) != 20 || len(ends) != 20 || events[len(events)-1].name != "result" || !strings.Contains(events[len(events)-1].data, `"result":"done"`) {
			t.Fatalf("%d call_start, %d call_end, last %+v", len(starts), len(ends), events[len(events)-1])
		}
		// Each call's start and end is read within moments of when it
		// happened (its record says when: the clock is this machine's),
		// never held for the whole run — which would have kept the first
		// back ~10 s. Measured from the call, not the request, so a cold
		// container's start on a loaded machine is not counted.
		var worst time.Duration
		for i := range ends {
			for _, e := range []sse{starts[i], ends[i]} {
				var c trace.Call
				if err := json.Unmarshal([]byte(e.data), &c); err != nil {
					t.Fatal(err)
				}
				at := c.StartedAt
				if e.name == "call_end" {
					at = at.Add(time.Duration(c.DurationMS * float64(time.Millisecond)))
				}
				lag := e.at.Sub(at)
				if lag > 4*time.Second || lag < -50*time.Millisecond {
					t.Errorf("call %d's %s read %v after it happened", i+1, e.name, lag)
				}
				worst = max(worst, lag)
			}
		}
		if span := ends[19].at.Sub(ends[0].at); span < 8*time.Second {
			t.Errorf("20 calls 500 ms apart ended within %v of each other", span)
		}
		t.Logf("first event after %v; call ends spread over %v, each read at most %v after it ended", starts[0].at.Sub(sent), ends[19].at.Sub(ends[0].at), worst)
	})

	t.Run("MCP progress arrives as it happens", func(t *testing.T) {
		t.Parallel()
		c := mcptest.Streamable(t, rest+"/mcp", mcp.ProtocolVersion20251125)
		type note struct {
			msg string
			at  time.Time
		}
		var mu sync.Mutex
		var notes []note
		c.OnNotification(func(n mcp.JSONRPCNotification) {
			if n.Method != "notifications/progress" {
				return
			}
			raw, _ := json.Marshal(n.Params)
			mu.Lock()
			notes = append(notes, note{string(raw), time.Now()})
			mu.Unlock()
		})
		var req mcp.CallToolRequest
		req.Params.Name = "execute_code"
		req.Params.Arguments = map[string]any{"code": twentyCalls, "timeout_ms": 60000}
		req.Params.Meta = &mcp.Meta{ProgressToken: "p1"}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := c.CallTool(ctx, req)
		if err != nil || res.IsError {
			t.Fatalf("execute_code: %+v %v", res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		var started, ended []time.Time
		for _, n := range notes {
			switch {
			case strings.Contains(n.msg, "text:sleep started"):
				started = append(started, n.at)
			case strings.Contains(n.msg, "text:sleep ended"):
				ended = append(ended, n.at)
			}
		}
		if len(started) != 20 || len(ended) != 20 {
			t.Fatalf("%d started, %d ended notifications of %d", len(started), len(ended), len(notes))
		}
		// A call's end is notified half a second after its start: the
		// notifications were sent as the calls ran, not at the end.
		for i := range ended {
			if gap := ended[i].Sub(started[i]); gap < 350*time.Millisecond {
				t.Errorf("call %d: ended notified %v after it started", i+1, gap)
			}
		}
		if span := ended[19].Sub(started[0]); span < 9*time.Second {
			t.Errorf("the progress spread over %v", span)
		}
	})

	t.Run("a 45-second script completes through the streaming front", func(t *testing.T) {
		t.Parallel()
		code := `for (let i = 0; i < 9; i++) await mcp.text.sleep({ms: 5000}); return "45 s later"`
		body := fmt.Sprintf(`{"code": %q, "timeout_ms": 80000}`, code)
		// The same script through the HTTP API, at the same time: it
		// stops waiting at 30 s, and the function answers before with the
		// execution's id and TIMEOUT rather than run on for nobody.
		viaHTTPAPI := make(chan runDoc, 1)
		var httpAPIStatus int
		var httpAPITook time.Duration
		go func() {
			start := time.Now()
			resp := post(t, context.Background(), httpAPI+"/execute", body)
			httpAPIStatus, httpAPITook = resp.StatusCode, time.Since(start)
			viaHTTPAPI <- decodeDoc(t, resp)
		}()
		start := time.Now()
		d := decodeDoc(t, post(t, context.Background(), rest+"/execute", body))
		took := time.Since(start)
		if !d.OK || string(d.Result) != `"45 s later"` || took < 45*time.Second {
			t.Fatalf("through the REST API: %+v after %v", d, took)
		}
		h := <-viaHTTPAPI
		if httpAPIStatus != 504 || h.Error == nil || h.Error.Code != "TIMEOUT" || h.ExecutionID == "" || httpAPITook > httpAPITimeout {
			t.Fatalf("through the HTTP API: %d %+v after %v", httpAPIStatus, h, httpAPITook)
		}
		t.Logf("REST API: completed after %v; HTTP API: %d TIMEOUT after %v", took, httpAPIStatus, httpAPITook)
	})

	t.Run("an asynchronous execution polled to completion runs once", func(t *testing.T) {
		t.Parallel()
		key := fmt.Sprintf("async-%d", time.Now().UnixNano())
		code := fmt.Sprintf(`const c = (await mcp.kv.kv_get({key: %q})).value ?? 0
await mcp.kv.kv_set({key: %q, value: c + 1})
await mcp.text.sleep({ms: 1500})
return c + 1`, key, key)
		start := time.Now()
		resp := post(t, context.Background(), httpAPI+"/execute", fmt.Sprintf(`{"code": %q, "async": true}`, code))
		d := decodeDoc(t, resp)
		// 202 "running" is the proof it did not wait for the run; the time
		// only catches a hang (a cold container on a loaded machine
		// included).
		if resp.StatusCode != 202 || d.Status != "running" || d.ExecutionID == "" || resp.Header.Get("Location") != "executions/"+d.ExecutionID ||
			time.Since(start) > 30*time.Second {
			t.Fatalf("POST async: %d %+v %v after %v", resp.StatusCode, d, resp.Header, time.Since(start))
		}
		final := poll(t, httpAPI, d.ExecutionID)
		if final.Status != "completed" || !final.OK || string(final.Result) != "1" || len(final.Calls) != 3 {
			t.Fatalf("final document %+v", final)
		}
		// Both deliveries of the start have ended; the script ran once.
		if got := kvValue(t, httpAPI, key); got != "1" {
			t.Fatalf("the counter is %s: the script ran more than once", got)
		}
	})

	t.Run("a cancelled execution ends CANCELLED within one step", func(t *testing.T) {
		t.Parallel()
		resp := post(t, context.Background(), httpAPI+"/execute", fmt.Sprintf(`{"code": %q, "timeout_ms": 60000, "async": true}`, twentyCalls))
		d := decodeDoc(t, resp)
		if resp.StatusCode != 202 {
			t.Fatalf("POST async: %d %+v", resp.StatusCode, d)
		}
		time.Sleep(3 * time.Second) // a few steps in
		req, _ := http.NewRequest(http.MethodDelete, httpAPI+"/executions/"+d.ExecutionID, nil)
		at := time.Now()
		dresp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		c := decodeDoc(t, dresp)
		if dresp.StatusCode != 202 || c.Status != "running" || !c.CancelRequested {
			t.Fatalf("DELETE: %d %+v", dresp.StatusCode, c)
		}
		final := poll(t, httpAPI, d.ExecutionID)
		if final.Status != "cancelled" || final.Error == nil || final.Error.Code != "CANCELLED" {
			t.Fatalf("final document %+v", final)
		}
		// The runner polls every 250 ms; a step is 500 ms. No call may
		// start later than one step after the cancel (with room for a
		// loaded machine), and the run was cut well short of 20.
		var last time.Time
		for _, call := range final.Calls {
			if call.StartedAt.After(last) {
				last = call.StartedAt
			}
		}
		if late := last.Sub(at); late > 250*time.Millisecond+500*time.Millisecond+500*time.Millisecond {
			t.Errorf("the last call started %v after the cancel", late)
		}
		if n := len(final.Calls); n < 3 || n > 12 {
			t.Errorf("%d calls", n)
		}
		t.Logf("cancelled after %d calls; the last started %v after the DELETE", len(final.Calls), last.Sub(at))
	})
}

// TestAsyncRetriedAfterCrash: the container running an asynchronous
// execution dies mid-run (SIGKILL); Lambda retries the invocation (here a
// moment after the run's lease lapsed, as Lambda's retry a minute later
// always is), and the retry takes the run over and continues it from its
// last checkpoint: the script completes, its one write is not made again
// (the journal answers it), and its result is the one it would have had.
func TestAsyncRetriedAfterCrash(t *testing.T) {
	s := contStack(t, nil, func(f *lambdaemu.Function) { f.AsyncDuplicates = 0 })
	base := s.apiGateway(t)
	key := fmt.Sprintf("crash-%d", time.Now().UnixNano())
	code := fmt.Sprintf(`const c = (await mcp.kv.kv_get({key: %q})).value ?? 0
await mcp.kv.kv_set({key: %q, value: c + 1})
for (let i = 0; i < 40; i++) await mcp.text.sleep({ms: 250})
return c + 1`, key, key)
	d := decodeDoc(t, post(t, context.Background(), base+"/execute", fmt.Sprintf(`{"code": %q, "async": true}`, code)))
	if d.Status != "running" {
		t.Fatalf("POST async: %+v", d)
	}
	for deadline := time.Now().Add(30 * time.Second); kvValue(t, base, key) != "1"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the script never started")
		}
	}
	time.Sleep(time.Second) // a few sleeps in
	if _, err := s.emu.Recycle("execute"); err != nil {
		t.Fatal(err)
	}
	doc := waitEnded(t, base, d.ExecutionID, 60*time.Second)
	if doc.Status != "completed" || !doc.OK || string(doc.Result) != "1" {
		t.Fatalf("after the crash: %s %s %+v", doc.Status, doc.Result, doc.Error)
	}
	if got := kvValue(t, base, key); got != "1" {
		t.Fatalf("the counter is %s after the continuation: the script ran again", got)
	}
	if len(doc.Effects) != 1 || doc.Effects[0].Status != "applied" || doc.Effects[0].CallID != 2 {
		t.Fatalf("effects %+v", doc.Effects)
	}
	for deadline := time.Now().Add(10 * time.Second); s.emu.AsyncDone("execute") < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the retried delivery never ended")
		}
	}
}
