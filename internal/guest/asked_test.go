package guest_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/trace"
)

// askingHost answers "ask" with a question the first time (guest.Asked),
// and with the answer it is sent again with; every other call echoes.
type askingHost struct {
	mu    sync.Mutex
	calls []guest.Call
}

func (h *askingHost) CallTool(_ context.Context, c guest.Call) (json.RawMessage, error) {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	if c.Tool != "ask" {
		return json.RawMessage(`"echo"`), nil
	}
	if c.Answer == nil {
		return nil, &guest.Asked{Question: json.RawMessage(`{"q":"sure?","state":"s-1"}`)}
	}
	return json.RawMessage(`{"question":` + string(c.Question) + `,"answer":` + string(c.Answer) + `}`), nil
}

// TestAskedParksAfterTheCall: a call whose host answers with a question
// parks (its record too) and the run suspends once nothing else is in
// flight, the other call's answer delivered; the question is kept with the
// parked call; an approval with an answer sends the call again, with the
// question and the answer, and the script gets what it answers; a
// rejection is REJECTED, which the script may catch.
func TestAskedParksAfterTheCall(t *testing.T) {
	const code = `const [a, b] = await Promise.all([mcp.demo.ask({x: 1}).catch(e => e.code), mcp.demo.other({})]); return [a, b]`
	tools := func(r *guest.Request) {
		r.Tools = []guest.Tool{{Server: "demo", Name: "ask"}, {Server: "demo", Name: "other"}}
	}
	h := &askingHost{}
	r := run(t, code, tools, func(r *guest.Request) { r.Host = h })
	if r.Suspended == nil {
		t.Fatalf("not suspended: ok=%v err=%+v value=%s", r.OK, r.Err, r.Value)
	}
	s := roundTrip(t, r.Suspended)
	if len(s.Parked) != 1 || s.Parked[0].Tool != "ask" || string(s.Parked[0].Question) != `{"q":"sure?","state":"s-1"}` || string(s.Parked[0].Args) != `{"x":1}` {
		t.Fatalf("parked %+v", s.Parked)
	}
	for _, c := range r.Calls {
		if c.Tool == "ask" && c.Status != trace.StatusParked || c.Tool == "other" && !c.OK {
			t.Fatalf("calls at suspension %+v", r.Calls)
		}
	}
	id := s.Parked[0].CallID

	t.Run("answered", func(t *testing.T) {
		h := &askingHost{}
		a := engine.Resume(context.Background(), s, guest.Request{Host: h}, map[int]guest.Decision{id: {Approve: true, Answer: json.RawMessage(`{"ok":true}`)}})
		mustOK(t, a)
		jsonEq(t, a.Value, `[{"question": {"q": "sure?", "state": "s-1"}, "answer": {"ok": true}}, "echo"]`)
		if len(h.calls) != 1 || h.calls[0].ID != id || string(h.calls[0].Args) != `{"x":1}` {
			t.Fatalf("calls sent again %+v", h.calls)
		}
	})
	t.Run("rejected", func(t *testing.T) {
		h := &askingHost{}
		a := engine.Resume(context.Background(), s, guest.Request{Host: h}, map[int]guest.Decision{id: {Reason: "no"}})
		mustOK(t, a)
		jsonEq(t, a.Value, `["`+string(fault.Rejected)+`", "echo"]`)
		if len(h.calls) != 0 {
			t.Fatalf("a rejected call was sent again: %+v", h.calls)
		}
	})
}
