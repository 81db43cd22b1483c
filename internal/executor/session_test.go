package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/demoserver"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// sessionService is the demo service keeping sessions in dir, each built
// anew as another process would be.
func sessionService(dir string, opts ...func(*executor.Options)) *executor.Service {
	o := executor.Options{Sources: []execution.ToolSource{demoserver.Source{}}, Logger: slog.New(slog.DiscardHandler),
		Sessions: suspend.NewFileSessions(dir, suspend.Options{})}
	for _, f := range opts {
		f(&o)
	}
	return executor.New(engine, o)
}

func mustStep(t *testing.T, svc *executor.Service, req execution.Request, want string) *execution.Response {
	t.Helper()
	r := svc.Execute(context.Background(), req)
	if !r.OK || string(r.Result) != want {
		t.Fatalf("%q: result = %s, %+v; want %s", req.Code, r.Result, r.Error, want)
	}
	if r.Session == nil || !r.Session.Saved {
		t.Fatalf("%q: session = %+v, want it saved", req.Code, r.Session)
	}
	return r
}

// TestSessionThroughTheService: a session started, continued by fresh
// services over the same store (as other processes), refusing what it
// must, and traced in order.
func TestSessionThroughTheService(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	sink := tracedb.NewMemory(100)
	svc := func() *executor.Service {
		return sessionService(dir, func(o *executor.Options) { o.Sink = sink })
	}
	first := mustStep(t, svc(), execution.Request{Code: `const base = await mcp.demo.add({a: 40, b: 1}); function inc(x) { return x + 1 }`, Session: execution.SessionNew}, `null`)
	id := first.Session.ID
	if !execution.ValidSessionID(id) || first.Session.Executions != 1 || strings.Join(first.Session.Names, ",") != "base,inc" || first.Session.SizeBytes == 0 {
		t.Fatalf("first answer's session = %+v", first.Session)
	}
	mustStep(t, svc(), execution.Request{Code: `const base = 100`, SessionID: id}, `null`)
	failed := svc().Execute(context.Background(), execution.Request{Code: `globalThis.lost = true; const base = 0; throw new Error("no")`, SessionID: id})
	if failed.OK || failed.Session == nil || failed.Session.Saved || !strings.Contains(failed.Session.Note, "as execution") {
		t.Fatalf("failed step: %+v session %+v", failed.Error, failed.Session)
	}
	third := mustStep(t, svc(), execution.Request{Code: `return [inc(base), typeof lost]`, SessionID: id}, `[101,"undefined"]`)
	if third.Session.Executions != 3 {
		t.Fatalf("executions = %d, want 3", third.Session.Executions)
	}
	// Work left running is said, and does not carry over.
	left := mustStep(t, svc(), execution.Request{Code: `globalThis.ticks = 0; setTimeout(() => ticks++, 1000); mcp.demo.sleep({ms: 1000}).then(() => ticks++); return 1`, SessionID: id}, `1`)
	if left.Session.Left == nil || left.Session.Left.Timers != 1 || left.Session.Left.Calls != 1 || !strings.Contains(left.Session.Note, "still pending") {
		t.Fatalf("left: %+v", left.Session)
	}
	mustStep(t, svc(), execution.Request{Code: `await mcp.demo.sleep({ms: 1100}); return ticks`, SessionID: id}, `0`)

	// Read back: the session's description, never its state.
	info, ferr := svc().Session(context.Background(), execution.SessionRequest{SessionID: id})
	if ferr != nil {
		t.Fatal(ferr)
	}
	if info.State != "idle" || info.Executions != 5 || len(info.History) != 6 || info.History[2].Kept || !info.History[3].Kept || info.TTLS != 3600 {
		t.Fatalf("info = %+v", info)
	}
	raw, _ := json.Marshal(info)
	if strings.Contains(string(raw), "memory") {
		t.Fatalf("the session's description shows its state: %s", raw)
	}

	// The traces link the session's executions in order.
	for i, h := range info.History {
		ex, _, err := sink.GetExecution(context.Background(), h.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if ex.SessionID != id || ex.SessionStep != i+1 {
			t.Fatalf("trace %d: session %q step %d", i, ex.SessionID, ex.SessionStep)
		}
	}

	// Another principal: as unknown as an id that never was.
	for _, r := range []execution.Request{{Code: `return 1`, SessionID: id, Principal: "jwt:x#other"}, {Code: `return 1`, SessionID: "ss_neverwas"}} {
		resp := svc().Execute(context.Background(), r)
		if resp.OK || resp.Error.Code != fault.NotFound || !resp.Refused || resp.Error.Message != `no session "`+r.SessionID+`"` {
			t.Fatalf("%+v: %+v", r, resp.Error)
		}
	}
	if _, ferr := svc().Session(context.Background(), execution.SessionRequest{SessionID: id, Principal: "jwt:x#other"}); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("another's read: %v", ferr)
	}
	if ferr := svc().EndSession(context.Background(), execution.SessionRequest{SessionID: id, Principal: "jwt:x#other"}); ferr == nil || ferr.Code != fault.NotFound {
		t.Fatalf("another's delete: %v", ferr)
	}

	// Deleted: gone, for its owner too.
	if ferr := svc().EndSession(context.Background(), execution.SessionRequest{SessionID: id}); ferr != nil {
		t.Fatal(ferr)
	}
	if resp := svc().Execute(context.Background(), execution.Request{Code: `return base`, SessionID: id}); resp.Error == nil || resp.Error.Code != fault.NotFound {
		t.Fatalf("after delete: %+v", resp.Error)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, id+"*")); len(m) != 0 {
		t.Fatalf("files left after delete: %v", m)
	}
}

// TestSessionOneExecutionAtATime: an execution of a session that another
// holds is refused CONFLICT, retryable, naming the one that runs; nothing
// of it runs.
func TestSessionOneExecutionAtATime(t *testing.T) {
	svc := sessionService(filepath.Join(t.TempDir(), "sessions"))
	id := mustStep(t, svc, execution.Request{Code: `let n = 0`, Session: execution.SessionNew}, `null`).Session.ID
	started := make(chan struct{})
	var wg sync.WaitGroup
	var long *execution.Response
	wg.Add(1)
	go func() {
		defer wg.Done()
		long = svc.Execute(context.Background(), execution.Request{Code: `n++; await mcp.demo.sleep({ms: 1500}); return n`, SessionID: id, ExecutionID: "ex_long",
			OnEvent: func(e execution.Event) {
				if e.Type == execution.EventCallStart {
					close(started)
				}
			}})
	}()
	<-started
	resp := svc.Execute(context.Background(), execution.Request{Code: `n = 100; return n`, SessionID: id})
	if resp.Error == nil || resp.Error.Code != fault.Conflict || !resp.Error.Retryable || !resp.Refused || !strings.Contains(resp.Error.Message, "ex_long") {
		t.Fatalf("concurrent step: %+v", resp.Error)
	}
	wg.Wait()
	if !long.OK || string(long.Result) != "1" || !long.Session.Saved {
		t.Fatalf("the holder: %s %+v %+v", long.Result, long.Error, long.Session)
	}
	// The refused execution ran nothing.
	mustStep(t, svc, execution.Request{Code: `return n`, SessionID: id}, `1`)
}

// TestSessionRefusals: what a session's request may not ask for.
func TestSessionRefusals(t *testing.T) {
	svc := sessionService(filepath.Join(t.TempDir(), "sessions"), func(o *executor.Options) { o.SessionMaxBytes = 40 << 10 })
	id := mustStep(t, svc, execution.Request{Code: `const small = 1`, Session: execution.SessionNew, Tools: []string{"demo:add", "demo:echo"}}, `null`).Session.ID
	tests := []struct {
		name string
		req  execution.Request
		code fault.Code
		text string
	}{
		{"a tool outside the session's narrowing", execution.Request{Code: `return await mcp.demo.word_count({text: "a b"})`, SessionID: id}, fault.Forbidden, "demo:word_count"},
		{"widening consent", execution.Request{Code: `return 1`, SessionID: id, AllowDestructive: true}, fault.Forbidden, "allow_destructive"},
		{"a state past the size cap", execution.Request{Code: `const big = Array.from({length: 20000}, (_, i) => "row " + i * 7919)`, SessionID: id}, fault.LimitExceeded, "the limit is 40960"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := svc.Execute(context.Background(), tc.req)
			if r.OK || r.Error.Code != tc.code || !strings.Contains(r.Error.Message, tc.text) {
				t.Fatalf("%+v", r.Error)
			}
		})
	}
	// The session is still where its first execution left it.
	mustStep(t, svc, execution.Request{Code: `return [small, typeof big]`, SessionID: id}, `[1,"undefined"]`)
	if r := svc.Execute(context.Background(), execution.Request{Code: `return 1`, SessionID: id}); r.Session.SizeBytes > 40<<10 {
		t.Fatalf("size %d", r.Session.SizeBytes)
	}
	// The idle time runs out: EXPIRED.
	clock := time.Now()
	expiring := sessionService(filepath.Join(t.TempDir(), "sessions"), func(o *executor.Options) {
		o.Sessions = suspend.NewFileSessions(filepath.Join(t.TempDir(), "s2"), suspend.Options{Now: func() time.Time { return clock }})
	})
	id2 := mustStep(t, expiring, execution.Request{Code: `const x = 1`, Session: execution.SessionNew, SessionTTLS: 60}, `null`).Session.ID
	clock = clock.Add(61 * time.Second)
	if r := expiring.Execute(context.Background(), execution.Request{Code: `return x`, SessionID: id2}); r.Error == nil || r.Error.Code != fault.Expired || !r.Refused {
		t.Fatalf("expired: %+v", r.Error)
	}
}

// TestSessionQuotaThroughTheService: past its principal's quota a new
// session is refused LIMIT_EXCEEDED, saying which and how to make room
// (nothing runs); a state past the bytes is not kept: the execution fails
// LIMIT_EXCEEDED and the session keeps the state it had, to continue
// from.
func TestSessionQuotaThroughTheService(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	svc := sessionService(dir, func(o *executor.Options) {
		o.Sessions = suspend.NewFileSessions(dir, suspend.Options{Quota: suspend.Quota{Count: 1, Bytes: 200 << 10}})
	})
	ctx := context.Background()
	first := mustStep(t, svc, execution.Request{Code: `globalThis.n = 1`, Session: execution.SessionNew, Principal: "jwt:i#hog"}, `null`)
	r := svc.Execute(ctx, execution.Request{Code: `return 2`, Session: execution.SessionNew, Principal: "jwt:i#hog"})
	if r.OK || r.Error == nil || r.Error.Code != fault.LimitExceeded || r.Error.Limit != fault.LimitSessions || !strings.Contains(r.Error.Message, "PML_SESSIONS_PER_PRINCIPAL") {
		t.Fatalf("a second session past the quota: %+v", r.Error)
	}
	big := svc.Execute(ctx, execution.Request{Code: `globalThis.pad = Array.from({length: 400000}, (_, i) => i * 7919 % 1000003); return pad.length`, SessionID: first.Session.ID, Principal: "jwt:i#hog"})
	if big.OK || big.Error == nil || big.Error.Limit != fault.LimitSessionBytes || big.Session == nil || big.Session.Saved || big.Session.Executions != 1 {
		t.Fatalf("a state past the bytes: %+v %+v", big.Error, big.Session)
	}
	mustStep(t, svc, execution.Request{Code: `return [n, typeof pad]`, SessionID: first.Session.ID, Principal: "jwt:i#hog"}, `[1,"undefined"]`)
}
