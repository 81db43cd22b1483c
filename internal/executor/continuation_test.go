package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/trace"
)

// writesLoop reads, then writes, six times: the reads are calls 2i+1, the
// writes 2i+2 (the 4th write is call 8). A write that fails is caught and
// its code kept.
const writesLoop = `const out = []
for (let i = 0; i < 6; i++) {
  await mcp.kv.get({key: "k" + i})
  try { out.push((await mcp.kv.put({key: "k" + i, value: i})).stored) } catch (e) { out.push(e.code) }
}
return out`

// kvServer is a remote key-value server as a tool source: put is an
// effect (and honours keys when dedup is on: a put sent again with a key
// it has seen is not applied again), get a read. It can hang on one call,
// as a runner's death leaves it: the call applied first or not.
type kvServer struct {
	dedup bool

	mu      sync.Mutex
	applied map[string]int  // key → times put applied it
	seen    map[string]bool // idempotency keys applied
	sent    []string        // "tool key idempotency-key", in order

	hangTool, hangKey string
	applyFirst        bool
	hung              chan struct{}
	hangOnce          sync.Once
}

func (s *kvServer) Tools(context.Context) ([]catalog.Tool, error) {
	yes, no := true, false
	write := catalog.Annotations{ReadOnly: &no, Destructive: &no}
	if s.dedup {
		write.Idempotent = &yes
	}
	return []catalog.Tool{
		{Server: "kv", Name: "put", Kind: trace.KindMCP, Annotations: write},
		{Server: "kv", Name: "get", Kind: trace.KindMCP, Annotations: catalog.Annotations{ReadOnly: &yes}},
	}, nil
}

func (s *kvServer) Call(ctx context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	var a struct{ Key string }
	_ = json.Unmarshal(args, &a)
	s.mu.Lock()
	s.sent = append(s.sent, t.Name+" "+a.Key+" "+opt.IdempotencyKey)
	hang := s.hung != nil && t.Name == s.hangTool && a.Key == s.hangKey
	if t.Name == "put" && (!hang || s.applyFirst) {
		if !s.dedup || !s.seen[opt.IdempotencyKey] {
			s.applied[a.Key]++
			s.seen[opt.IdempotencyKey] = true
		}
	}
	s.mu.Unlock()
	if hang {
		s.hangOnce.Do(func() { close(s.hung) })
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if t.Name == "put" {
		return json.RawMessage(fmt.Sprintf(`{"stored":%q}`, a.Key)), nil
	}
	return json.RawMessage(`{}`), nil
}

func (s *kvServer) times(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[key]
}

func newKV(dedup bool) *kvServer {
	return &kvServer{dedup: dedup, applied: map[string]int{}, seen: map[string]bool{}}
}

// mortal is what a runner writes through: once dead, nothing it writes
// lands (its process is gone), as after a SIGKILL.
type mortal struct {
	journal.Store
	dead atomic.Bool

	mu     sync.Mutex
	blobs  [][]byte
	fail   error
	uncont string
}

var errDead = errors.New("the runner is dead")

func (m *mortal) Intend(ctx context.Context, e *journal.Entry) (*journal.Entry, error) {
	if m.dead.Load() {
		return nil, errDead
	}
	return m.Store.Intend(ctx, e)
}

func (m *mortal) Resend(ctx context.Context, id string, call, attempts int) error {
	if m.dead.Load() {
		return errDead
	}
	return m.Store.Resend(ctx, id, call, attempts)
}

func (m *mortal) Settle(ctx context.Context, id string, call int, o journal.Outcome) error {
	if m.dead.Load() {
		return errDead
	}
	return m.Store.Settle(ctx, id, call, o)
}

// Checkpoint implements execution.Checkpointer.
func (m *mortal) Checkpoint(_ context.Context, blob []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead.Load() {
		return errDead
	}
	if m.fail != nil {
		return m.fail
	}
	m.blobs = append(m.blobs, append([]byte(nil), blob...))
	return nil
}

// Uncontinuable implements execution.Checkpointer.
func (m *mortal) Uncontinuable(_ context.Context, why string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.uncont = why
	return nil
}

func (m *mortal) last(t *testing.T) []byte {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.blobs) == 0 {
		t.Fatal("no checkpoint")
	}
	return m.blobs[len(m.blobs)-1]
}

// killedAt runs writesLoop as execution id through a runner that dies
// when kv hangs (kv.hung), and returns the last checkpoint it kept.
func killedAt(t *testing.T, kv *kvServer, j journal.Store, id string) []byte {
	t.Helper()
	m := &mortal{Store: j}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{kv}, Journal: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *execution.Response, 1)
	go func() {
		done <- svc.Execute(ctx, execution.Request{Code: writesLoop, ExecutionID: id, Checkpoints: m, TimeoutMS: 20000})
	}()
	select {
	case <-kv.hung:
	case r := <-done:
		t.Fatalf("the run ended before the kill: %+v", r)
	case <-time.After(20 * time.Second):
		t.Fatal("the run never reached the kill")
	}
	m.dead.Store(true)
	cancel()
	<-done
	return m.last(t)
}

// continued runs execution id on from blob in a new runner (a new
// service over the same journal and server).
func continued(t *testing.T, kv *kvServer, j journal.Store, id string, blob []byte) (*execution.Response, *mortal) {
	t.Helper()
	m := &mortal{Store: j}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{kv}, Journal: m})
	kv.mu.Lock()
	kv.hung = nil
	kv.mu.Unlock()
	return svc.Execute(context.Background(), execution.Request{Code: writesLoop, ExecutionID: id, Checkpoints: m, Checkpoint: blob, TimeoutMS: 20000}), m
}

// TestContinuedAfterTheRunnerDied: the runner dies with the 4th write in
// flight; another continues the run from its last checkpoint. Against a
// server that honours keys, the write is sent again with its key and
// applied once; against one that does not, it is not sent again, and the
// script catches OUTCOME_UNKNOWN, recorded unknown. Every other write is
// applied exactly once, and every effect listed with its key.
func TestContinuedAfterTheRunnerDied(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dedup bool
		want  string // what the script has of the 4th write
	}{
		{"honours keys", true, `"k3"`},
		{"does not", false, `"OUTCOME_UNKNOWN"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := newKV(tc.dedup)
			kv.hangTool, kv.hangKey, kv.applyFirst, kv.hung = "put", "k3", true, make(chan struct{})
			j := journal.NewFile(t.TempDir(), journal.Options{})
			id := "exec-continued-" + fmt.Sprint(tc.dedup)
			blob := killedAt(t, kv, j, id)
			resp, _ := continued(t, kv, j, id, blob)
			if !resp.OK {
				t.Fatalf("the continuation failed: %+v", resp.Error)
			}
			var out []json.RawMessage
			if err := json.Unmarshal(resp.Result, &out); err != nil || len(out) != 6 || string(out[3]) != tc.want {
				t.Fatalf("result %s", resp.Result)
			}
			for i := range 6 {
				if n := kv.times(fmt.Sprint("k", i)); n != 1 {
					t.Errorf("k%d applied %d times", i, n)
				}
			}
			if len(resp.Effects) != 6 {
				t.Fatalf("effects %+v", resp.Effects)
			}
			for i, e := range resp.Effects {
				want := "applied"
				if i == 3 && !tc.dedup {
					want = "unknown"
				}
				if e.CallID != 2*i+2 || e.Key != journal.Key(id, 2*i+2) || e.Status != want {
					t.Errorf("effect %d: %+v, want %s", i, e, want)
				}
			}
			entries, _ := j.List(context.Background(), id)
			if e := entries[3]; tc.dedup && e.Attempts != 2 || !tc.dedup && e.Attempts != 1 {
				t.Errorf("the 4th write's entry: %+v", e)
			}
		})
	}
}

// TestContinuedAfterTheOutcome: the runner dies after the 4th write's
// outcome was journalled, before its next checkpoint: the continuation
// answers the write from the journal and sends it nowhere.
func TestContinuedAfterTheOutcome(t *testing.T) {
	kv := newKV(false)
	kv.hangTool, kv.hangKey, kv.hung = "get", "k4", make(chan struct{})
	j := journal.NewFile(t.TempDir(), journal.Options{})
	blob := killedAt(t, kv, j, "exec-after-outcome")
	resp, _ := continued(t, kv, j, "exec-after-outcome", blob)
	if !resp.OK || string(resp.Result) != `["k0","k1","k2","k3","k4","k5"]` {
		t.Fatalf("continued: %s %+v", resp.Result, resp.Error)
	}
	for i := range 6 {
		if n := kv.times(fmt.Sprint("k", i)); n != 1 {
			t.Errorf("k%d applied %d times", i, n)
		}
	}
	for _, e := range resp.Effects {
		if e.Status != "applied" {
			t.Errorf("effect %+v", e)
		}
	}
}

// TestCheckpointNotKept: a checkpoint that cannot be kept stops its
// effect: not sent, journalled not_sent, and the script gets a retryable
// UNAVAILABLE.
func TestCheckpointNotKept(t *testing.T) {
	kv := newKV(true)
	j := journal.NewFile(t.TempDir(), journal.Options{})
	m := &mortal{Store: j, fail: errors.New("the store is down")}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{kv}, Journal: m})
	resp := svc.Execute(context.Background(), execution.Request{Code: `await mcp.kv.get({key: "a"})
try { await mcp.kv.put({key: "a", value: 1}); return "sent" } catch (e) { return [e.code, e.retryable, e.tool] }`,
		ExecutionID: "exec-not-kept", Checkpoints: m})
	if !resp.OK || string(resp.Result) != `["UNAVAILABLE",true,"kv:put"]` {
		t.Fatalf("%s %+v", resp.Result, resp.Error)
	}
	if kv.times("a") != 0 {
		t.Fatal("the effect was sent")
	}
	if len(resp.Effects) != 1 || resp.Effects[0].Status != "not_sent" || resp.Effects[0].Error == nil {
		t.Fatalf("effects %+v", resp.Effects)
	}
	entries, _ := j.List(context.Background(), "exec-not-kept")
	if len(entries) != 1 || entries[0].Status != journal.NotSent {
		t.Fatalf("journal %+v", entries)
	}
}

// TestCheckpointFromAnotherBuild: a checkpoint that cannot be read, or of
// another guest build, is not continued.
func TestCheckpointUnreadable(t *testing.T) {
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{newKV(true)}})
	resp := svc.Execute(context.Background(), execution.Request{Code: writesLoop, ExecutionID: "exec-bad", Checkpoint: []byte("PMLCKPT1garbage")})
	if resp.OK || resp.Error == nil || resp.Error.Code != fault.Internal {
		t.Fatalf("%+v", resp.Error)
	}
}

// capSource is one capability, cap:do, counting its runs.
type capSource struct{ runs atomic.Int32 }

func (c *capSource) Tools(context.Context) ([]catalog.Tool, error) {
	return []catalog.Tool{{Server: "cap", Name: "do", Kind: trace.KindCapability}}, nil
}

func (c *capSource) Call(ctx context.Context, _ catalog.Tool, _ json.RawMessage, _ execution.CallOptions) (json.RawMessage, error) {
	c.runs.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCapabilityInFlightNotRunAgain: a capability call running when the
// runner died is not run again by the continuation (its run may have made
// effects of its own): its await rejects OUTCOME_UNKNOWN.
func TestCapabilityInFlightNotRunAgain(t *testing.T) {
	kv := newKV(true)
	kv.hangTool, kv.hangKey, kv.hung = "put", "a", make(chan struct{})
	c := &capSource{}
	j := journal.NewFile(t.TempDir(), journal.Options{})
	code := `const c = mcp.cap.do({})
await mcp.kv.put({key: "a", value: 1})
try { await c; return "ran" } catch (e) { return [e.code, e.details.call_id] }`
	m := &mortal{Store: j}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{kv, c}, Journal: m})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *execution.Response, 1)
	go func() {
		done <- svc.Execute(ctx, execution.Request{Code: code, ExecutionID: "exec-cap", Checkpoints: m, TimeoutMS: 20000})
	}()
	<-kv.hung
	m.dead.Store(true)
	cancel()
	<-done
	m2 := &mortal{Store: j}
	kv.mu.Lock()
	kv.hung = nil
	kv.mu.Unlock()
	svc2 := executor.New(engine, executor.Options{Sources: []execution.ToolSource{kv, c}, Journal: m2})
	resp := svc2.Execute(context.Background(), execution.Request{Code: code, ExecutionID: "exec-cap", Checkpoints: m2, Checkpoint: m.last(t), TimeoutMS: 20000})
	if !resp.OK || string(resp.Result) != `["OUTCOME_UNKNOWN",1]` || c.runs.Load() != 1 || kv.times("a") != 1 {
		t.Fatalf("continued: %s %+v; the capability ran %d times", resp.Result, resp.Error, c.runs.Load())
	}
}
