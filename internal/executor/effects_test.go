package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/journal"
	"github.com/pml-sandbox/pml/internal/trace"
)

// storeSource is a tool source of one server, "store", standing in for a
// remote one: put writes (an effect; idempotent when honours), get reads,
// and the rest fail as servers do. It records each call it is sent with
// the key it carried.
type storeSource struct {
	honours bool

	mu   sync.Mutex
	sent []sentCall
	data map[string]json.RawMessage
}

type sentCall struct {
	tool, key string
	args      json.RawMessage
}

func (s *storeSource) Tools(context.Context) ([]catalog.Tool, error) {
	yes, no := true, false
	write := catalog.Annotations{ReadOnly: &no, Destructive: &no}
	if s.honours {
		write.Idempotent = &yes
	}
	read := catalog.Annotations{ReadOnly: &yes}
	var tools []catalog.Tool
	for _, n := range []string{"put", "slow", "bad", "refuse", "big"} {
		tools = append(tools, catalog.Tool{Server: "store", Name: n, Kind: trace.KindMCP, Annotations: write})
	}
	return append(tools, catalog.Tool{Server: "store", Name: "get", Kind: trace.KindMCP, Annotations: read}), nil
}

func (s *storeSource) Call(_ context.Context, t catalog.Tool, args json.RawMessage, opt execution.CallOptions) (json.RawMessage, error) {
	if t.Name == "refuse" {
		opt.Refused()
		return nil, fault.New(fault.Forbidden, "refused before sending")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, sentCall{tool: t.Name, key: opt.IdempotencyKey, args: args})
	var a struct {
		Key   string          `json:"key"`
		Value json.RawMessage `json:"value"`
	}
	_ = json.Unmarshal(args, &a)
	switch t.Name {
	case "put":
		if s.data == nil {
			s.data = map[string]json.RawMessage{}
		}
		s.data[a.Key] = a.Value
		return json.RawMessage(fmt.Sprintf(`{"stored":%q}`, a.Key)), nil
	case "get":
		return s.data[a.Key], nil
	case "slow":
		return nil, fault.New(fault.Timeout, "no answer within 1s")
	case "big":
		return json.RawMessage(`"` + strings.Repeat("b", journal.MaxResultBytes) + `"`), nil
	}
	return nil, fault.New(fault.ToolError, "the server says no")
}

func (s *storeSource) calls(tool string) []sentCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sentCall
	for _, c := range s.sent {
		if tool == "" || c.tool == tool {
			out = append(out, c)
		}
	}
	return out
}

func effectService(src *storeSource, j journal.Store) *executor.Service {
	return executor.New(engine, executor.Options{Sources: []execution.ToolSource{src}, Journal: j})
}

func withID(id string) func(*execution.Request) {
	return func(r *execution.Request) { r.ExecutionID = id }
}

func run(t *testing.T, svc *executor.Service, code string, mods ...func(*execution.Request)) *execution.Response {
	t.Helper()
	req := execution.Request{Code: code}
	for _, m := range mods {
		m(&req)
	}
	return svc.Execute(context.Background(), req)
}

// TestEffectsJournalled: writes are journalled with their keys and listed
// in the document, applied; reads are neither journalled nor keyed.
func TestEffectsJournalled(t *testing.T) {
	for _, store := range []struct {
		name string
		j    journal.Store
	}{{"file", journal.NewFile(t.TempDir(), journal.Options{})}, {"no store", nil}} {
		t.Run(store.name, func(t *testing.T) {
			src := &storeSource{}
			resp := run(t, effectService(src, store.j), `
for (let i = 0; i < 3; i++) {
  await mcp.store.put({key: "k" + i, value: i})
  await mcp.store.get({key: "k" + i})
}
return "done"`, withID("exec-journalled"))
			if !resp.OK {
				t.Fatal(resp.Error)
			}
			if len(resp.Effects) != 3 {
				t.Fatalf("effects %+v", resp.Effects)
			}
			for i, e := range resp.Effects {
				want := 1 + 2*i // the puts are calls 1, 3, 5
				if e.CallID != want || e.Server != "store" || e.Tool != "put" || e.Status != "applied" || e.Key != journal.Key("exec-journalled", want) || e.Error != nil {
					t.Errorf("effect %d: %+v", i, e)
				}
			}
			for _, c := range src.calls("get") {
				if c.key != "" {
					t.Errorf("a read carried key %q", c.key)
				}
			}
			for i, c := range src.calls("put") {
				if c.key != journal.Key("exec-journalled", 1+2*i) {
					t.Errorf("put %d carried key %q", i, c.key)
				}
			}
			if store.j == nil {
				return
			}
			entries, err := store.j.List(context.Background(), "exec-journalled")
			if err != nil || len(entries) != 3 {
				t.Fatalf("journal %+v %v", entries, err)
			}
			if e := entries[0]; e.Status != journal.Applied || string(e.Result) != `{"stored":"k0"}` || string(e.Args) != `{"key":"k0","value":0}` || e.Principal != "" || e.Attempts != 1 {
				t.Errorf("entry %+v", e)
			}
		})
	}
}

// TestKeyUnforgeable: whatever a script puts in its arguments, the key an
// effect carries is the host's.
func TestKeyUnforgeable(t *testing.T) {
	src := &storeSource{}
	resp := run(t, effectService(src, nil), `await mcp.store.put({key: "a", value: 1, "Idempotency-Key": "forged", _meta: {"io.pml/idempotency-key": "forged"}, headers: {"Idempotency-Key": "forged"}})`,
		withID("exec-forge"))
	if !resp.OK {
		t.Fatal(resp.Error)
	}
	sent := src.calls("put")
	if len(sent) != 1 || sent[0].key != journal.Key("exec-forge", 1) || resp.Effects[0].Key != sent[0].key {
		t.Fatalf("sent %+v, document %+v", sent, resp.Effects)
	}
}

// TestOutcomes: how each answer is recorded: a server's error failed, no
// answer unknown, a refusal before sending not sent.
func TestOutcomes(t *testing.T) {
	j := journal.NewMemory()
	src := &storeSource{}
	resp := run(t, effectService(src, j), `
const out = []
for (const t of ["bad", "slow", "refuse"]) {
  try { await mcp.store[t]({}) } catch (e) { out.push(e.code) }
}
return out`, withID("exec-outcomes"))
	jsonEq(t, resp.Result, `["TOOL_ERROR","TIMEOUT","FORBIDDEN"]`)
	want := []struct {
		status string
		code   fault.Code
	}{{"failed", fault.ToolError}, {"unknown", fault.Timeout}, {"not_sent", fault.Forbidden}}
	if len(resp.Effects) != 3 {
		t.Fatalf("effects %+v", resp.Effects)
	}
	for i, w := range want {
		if e := resp.Effects[i]; e.Status != w.status || e.Error == nil || e.Error.Code != w.code {
			t.Errorf("effect %d: %+v, want %s %s", i, e, w.status, w.code)
		}
	}
}

// TestAnsweredFromTheJournal: an execution whose journal holds the outcome
// of a call (a retry, a continuation) gets that outcome, and the effect
// is not sent again; a call the journal has as another call is refused.
func TestAnsweredFromTheJournal(t *testing.T) {
	ctx := context.Background()
	j := journal.NewFile(t.TempDir(), journal.Options{})
	args := json.RawMessage(`{"key":"a","value":1}`)
	for call, o := range map[int]journal.Outcome{
		1: {Status: journal.Applied, Result: json.RawMessage(`{"stored":"from the journal"}`)},
		2: {Status: journal.Failed, Error: fault.New(fault.ToolError, "it failed the first time")},
	} {
		e := &journal.Entry{ExecutionID: "exec-again", CallID: call, Server: "store", Tool: "put", Key: journal.Key("exec-again", call), Args: args}
		if _, err := j.Intend(ctx, e); err != nil {
			t.Fatal(err)
		}
		if err := j.Settle(ctx, "exec-again", call, o); err != nil {
			t.Fatal(err)
		}
	}
	other := &journal.Entry{ExecutionID: "exec-again", CallID: 3, Server: "store", Tool: "put", Key: journal.Key("exec-again", 3), Args: json.RawMessage(`{"key":"z"}`)}
	if _, err := j.Intend(ctx, other); err != nil {
		t.Fatal(err)
	}
	src := &storeSource{}
	resp := run(t, effectService(src, j), `
const first = await mcp.store.put({key: "a", value: 1})
let second, third
try { await mcp.store.put({key: "a", value: 1}) } catch (e) { second = e.message }
try { await mcp.store.put({key: "a", value: 1}) } catch (e) { third = e.code }
const fourth = await mcp.store.put({key: "a", value: 1})
return {first, second, third, fourth}`, withID("exec-again"))
	jsonEq(t, resp.Result, `{"first":{"stored":"from the journal"},"second":"it failed the first time","third":"INTERNAL","fourth":{"stored":"a"}}`)
	if sent := src.calls("put"); len(sent) != 1 || sent[0].key != journal.Key("exec-again", 4) {
		t.Fatalf("sent %+v: only call 4 should have left", sent)
	}
}

// TestPendingEffect: a pending entry (its runner died with it in flight)
// is sent again with its key when its tool honours keys, once; otherwise
// it is not sent, fails OUTCOME_UNKNOWN with its server, tool and key, and
// reads unknown.
func TestPendingEffect(t *testing.T) {
	ctx := context.Background()
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprint("honours ", honours), func(t *testing.T) {
			j := journal.NewMemory()
			e := &journal.Entry{ExecutionID: "exec-pending", CallID: 1, Server: "store", Tool: "put", Key: journal.Key("exec-pending", 1),
				Args: json.RawMessage(`{"key":"a","value":1}`), Honours: honours}
			if _, err := j.Intend(ctx, e); err != nil {
				t.Fatal(err)
			}
			src := &storeSource{honours: honours}
			resp := run(t, effectService(src, j), `try { return await mcp.store.put({key: "a", value: 1}) } catch (e) { return e }`, withID("exec-pending"))
			entries, _ := j.List(ctx, "exec-pending")
			sent := src.calls("put")
			if honours {
				if len(sent) != 1 || sent[0].key != e.Key || entries[0].Status != journal.Applied || entries[0].Attempts != 2 {
					t.Fatalf("sent %+v, entry %+v, result %s", sent, entries[0], resp.Result)
				}
				return
			}
			var got fault.Error
			if err := json.Unmarshal(resp.Result, &got); err != nil || got.Code != fault.OutcomeUnknown {
				t.Fatalf("result %s", resp.Result)
			}
			d, _ := got.Details.(map[string]any)
			if len(sent) != 0 || d["key"] != e.Key || d["server"] != "store" || d["tool"] != "put" || entries[0].Status != journal.Unknown ||
				resp.Effects[0].Status != "unknown" {
				t.Fatalf("sent %+v, details %+v, entry %+v, effects %+v", sent, d, entries[0], resp.Effects)
			}
		})
	}
}

// failingJournal fails every intent.
type failingJournal struct{ *journal.Memory }

func (*failingJournal) Intend(context.Context, *journal.Entry) (*journal.Entry, error) {
	return nil, errors.New("disk full")
}

// TestFailClosed: an effect whose intent cannot be written is not sent:
// the call fails UNAVAILABLE, and the document says not_sent. Reads go on.
func TestFailClosed(t *testing.T) {
	src := &storeSource{}
	j := &failingJournal{Memory: journal.NewMemory()}
	resp := run(t, effectService(src, j), `
let code
try { await mcp.store.put({key: "a", value: 1}) } catch (e) { code = e.code + (e.retryable ? " retryable" : "") }
await mcp.store.get({key: "a"})
return code`, withID("exec-closed"))
	jsonEq(t, resp.Result, `"UNAVAILABLE retryable"`)
	if sent := src.calls(""); len(sent) != 1 || sent[0].tool != "get" {
		t.Fatalf("sent %+v", sent)
	}
	if len(resp.Effects) != 1 || resp.Effects[0].Status != "not_sent" || !strings.Contains(resp.Effects[0].Error.Message, "disk full") {
		t.Fatalf("effects %+v", resp.Effects)
	}
}

// TestResultOverTheCap: a result the journal could not keep is not
// pretended: the call met again fails LIMIT_EXCEEDED effect_bytes, and is
// not sent again.
func TestResultOverTheCap(t *testing.T) {
	j := journal.NewMemory()
	src := &storeSource{}
	resp := run(t, effectService(src, j), `return (await mcp.store.big({})).length`, withID("exec-big"))
	jsonEq(t, resp.Result, fmt.Sprint(journal.MaxResultBytes))
	resp = run(t, effectService(src, j), `try { await mcp.store.big({}) } catch (e) { return [e.code, e.limit] }`, withID("exec-big"))
	jsonEq(t, resp.Result, `["LIMIT_EXCEEDED","effect_bytes"]`)
	if n := len(src.calls("big")); n != 1 {
		t.Fatalf("sent %d times", n)
	}
}

// TestEffectsBound: an execution may make MaxEffects effects; the next is
// refused with a named limit, unsent. Reads are not counted.
func TestEffectsBound(t *testing.T) {
	src := &storeSource{}
	svc := executor.New(engine, executor.Options{Sources: []execution.ToolSource{src}, Limits: guest.Limits{ToolCalls: 3 * journal.MaxEffects}})
	resp := run(t, svc, fmt.Sprintf(`
for (let i = 0; i < %d; i++) { await mcp.store.put({key: "k", value: i}); await mcp.store.get({key: "k"}) }
try { await mcp.store.put({key: "k", value: -1}) } catch (e) { return [e.code, e.limit] }`, journal.MaxEffects), func(r *execution.Request) { r.TimeoutMS = 60000 })
	jsonEq(t, resp.Result, `["LIMIT_EXCEEDED","effects"]`)
	if n := len(src.calls("put")); n != journal.MaxEffects {
		t.Fatalf("%d sent", n)
	}
}
