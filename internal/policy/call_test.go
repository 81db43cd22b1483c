package policy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// memCounter counts in memory: a fake for this package's tests (the real
// ones are internal/policy/usage's).
type memCounter struct {
	mu     sync.Mutex
	counts map[string]int64
	writes int
	fail   error
}

func (m *memCounter) Add(_ context.Context, k CountKey, n, max int64) (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	if m.fail != nil {
		return 0, false, m.fail
	}
	if m.counts == nil {
		m.counts = map[string]int64{}
	}
	c := m.counts[k.String()]
	if max >= 0 && c+n > max {
		return c, false, nil
	}
	m.counts[k.String()] = c + n
	return c + n, true, nil
}

const limited = `
@id("reads") permit (principal, action == PML::Action::"call", resource == PML::Tool::"pets:getPetById");
@id("deletes") @limit("3/1h")
permit (principal, action == PML::Action::"call", resource == PML::Tool::"pets:deletePet");
@id("refunds") @sum("amount, 500/24h") @limit("10/1h")
permit (principal, action == PML::Action::"call", resource == PML::Tool::"pay:refund");
@id("asks") @limit("1/1h") @overLimit("ask")
permit (principal, action == PML::Action::"call", resource == PML::Tool::"pay:charge");
`

func TestLimits(t *testing.T) {
	s := mustParse(t, limited)
	now := time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)
	c := &memCounter{}
	g := &Gate{Rules: s, Counter: c, Now: func() time.Time { return now }}
	ctx := context.Background()
	alice, bob := "jwt:https://idp#alice", "jwt:https://idp#bob"
	call := func(who string, tool string, args string) Outcome {
		srv, name, _ := strings.Cut(tool, ":")
		tl := deletePet
		tl.Server, tl.Name = srv, name
		return g.Check(ctx, Call{Principal: who, Tool: tl, Args: []byte(args), Consent: true})
	}
	for i := range 3 {
		if out := call(alice, "pets:deletePet", `{"petId": 1}`); out.Verdict != Allow {
			t.Fatalf("delete %d: %+v", i+1, out)
		}
	}
	out := call(alice, "pets:deletePet", `{"petId": 1}`)
	if out.Verdict != OverLimit || out.Limit.Policy != "deletes" || !out.WindowEnds.Equal(time.Date(2026, 5, 1, 11, 0, 0, 0, time.UTC)) {
		t.Fatalf("the fourth delete: %+v", out)
	}
	writes := c.writes
	if out := call(alice, "pets:deletePet", `{"petId": 1}`); out.Verdict != OverLimit || c.writes != writes {
		t.Fatalf("a fifth delete: %+v, %d writes (want none: the gate knows the count is full)", out, c.writes-writes)
	}
	if out := call(bob, "pets:deletePet", `{"petId": 1}`); out.Verdict != Allow {
		t.Fatalf("another principal's count is its own: %+v", out)
	}
	now = now.Add(30 * time.Minute) // the next window
	if out := call(alice, "pets:deletePet", `{"petId": 1}`); out.Verdict != Allow {
		t.Fatalf("the next window: %+v", out)
	}

	// Sums: 300 + 200 fit; 0.000001 more does not, and the count of
	// calls it took is given back.
	for _, amount := range []string{"300", `"150.5"`, "49.5"} {
		if out := call(alice, "pay:refund", `{"amount": `+amount+`}`); out.Verdict != Allow {
			t.Fatalf("refund %s: %+v", amount, out)
		}
	}
	if out := call(alice, "pay:refund", `{"amount": 0.000001}`); out.Verdict != OverLimit || out.Limit.Arg != "amount" {
		t.Fatalf("past the sum: %+v", out)
	}
	if out := call(alice, "pay:refund", `{"amount": 0}`); out.Verdict != Allow {
		t.Fatalf("a refund of nothing: %+v", out)
	}
	for _, bad := range []string{`{"amount": -100}`, `{}`, `{"amount": "ten"}`, `{"amount": {"value": 1}}`, `{"amount": 1e300}`} {
		if out := call(bob, "pay:refund", bad); out.Verdict != Forbid || !strings.Contains(out.Reason, "amount") {
			t.Errorf("%s: %+v", bad, out)
		}
	}
	calls := c.counts[CountKey{Policy: "refunds", Measure: "calls", Principal: alice, Tool: "pay:refund", Window: now.Truncate(time.Hour)}.String()]
	if calls != 4 {
		t.Errorf("refund calls counted %d; want 4 (the refused one given back; a refund of nothing is still a call)", calls)
	}

	// Over a limit that asks: a person decides; approved, it runs.
	if out := call(alice, "pay:charge", `{}`); out.Verdict != Allow {
		t.Fatalf("first charge: %+v", out)
	}
	if out := call(alice, "pay:charge", `{}`); out.Verdict != Ask || out.Limit == nil {
		t.Fatalf("second charge: %+v", out)
	}
	tl := deletePet
	tl.Server, tl.Name = "pay", "charge"
	if out := g.Check(ctx, Call{Principal: alice, Tool: tl, Approved: true, Consent: true}); out.Verdict != Allow {
		t.Fatalf("second charge, approved: %+v", out)
	}
}

// TestLimitsFailClosed: a limit that cannot be counted refuses the call.
func TestLimitsFailClosed(t *testing.T) {
	s := mustParse(t, limited)
	for name, g := range map[string]*Gate{
		"no counter":     {Rules: s},
		"counter failed": {Rules: s, Counter: &memCounter{fail: errors.New("throttled")}},
	} {
		out := g.Check(context.Background(), Call{Principal: "a", Tool: deletePet, Consent: true})
		if out.Verdict != Forbid || out.Reason == "" {
			t.Errorf("%s: %+v", name, out)
		}
	}
}
