package policy

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// swapping is an Authorizer whose set in force changes (as a
// source.Watcher's does when a new version loads).
type swapping struct{ cur atomic.Pointer[Set] }

func (w *swapping) Snapshot() *Set { return w.cur.Load() }
func (w *swapping) Authorize(ctx context.Context, in Input) (Decision, error) {
	return w.cur.Load().Authorize(ctx, in)
}

// TestGateKeptDecisions: the answers a Gate keeps for a set that reads no
// arguments are the answers the set gives, call after call, whatever
// changes between them (approval, consent, tool, principal, run, chain,
// the set in force); limits are still counted on every call, and a set
// that reads the arguments is asked about each call's.
func TestGateKeptDecisions(t *testing.T) {
	const approvals = `
@id("approved") permit (principal, action == PML::Action::"call", resource) when { context.approved };
@id("consented") permit (principal, action == PML::Action::"call", resource) when { context.consent && context.execution == "run-1" };
@id("not-bob") forbid (principal, action == PML::Action::"call", resource) when { principal.subject == "bob" };
@id("not-in-cap") forbid (principal, action == PML::Action::"call", resource) when { context.depth > 0 && !context.approved };
@id("reads") @limit("2/1h") permit (principal, action == PML::Action::"call", resource == PML::Tool::"pets:getPetById");
`
	const byArgs = `
@id("all") permit (principal, action == PML::Action::"call", resource);
@id("no-big") forbid (principal, action == PML::Action::"call", resource) when { context.args.hasTag("petId") && context.args.getTag("petId") has long && context.args.getTag("petId").long == 7 };
`
	alice, bob := "jwt:https://idp#alice", "jwt:https://idp#bob"
	get := deletePet
	get.Name = "getPetById"
	now := time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)
	w := &swapping{}
	w.cur.Store(mustParse(t, approvals))
	g := &Gate{Rules: w, Counter: &memCounter{}, Now: func() time.Time { return now }}
	base := Call{Principal: alice, Tool: deletePet, ExecutionID: "run-1", Args: []byte(`{"petId": 1}`)}
	with := func(f func(*Call)) Call { c := base; f(&c); return c }
	steps := []struct {
		name string
		set  string // a new set in force from this step on
		call Call
		want Verdict
	}{
		{name: "neither approved nor consented", call: base, want: Ask},
		{name: "approved", call: with(func(c *Call) { c.Approved = true }), want: Allow},
		{name: "not approved again", call: base, want: Ask},
		{name: "consented", call: with(func(c *Call) { c.Consent = true }), want: Allow},
		{name: "consented in another run", call: with(func(c *Call) { c.Consent = true; c.ExecutionID = "run-2" }), want: Ask},
		{name: "another principal", call: with(func(c *Call) { c.Principal = bob; c.Approved = true }), want: Forbid},
		{name: "in a capability", call: with(func(c *Call) { c.Consent = true; c.Chain = []string{"cap"} }), want: Ask},
		{name: "in a capability, approved", call: with(func(c *Call) { c.Chain = []string{"cap"}; c.Approved = true }), want: Allow},
		{name: "limited 1", call: with(func(c *Call) { c.Tool = get }), want: Allow},
		{name: "limited 2", call: with(func(c *Call) { c.Tool = get }), want: Allow},
		{name: "limited 3: counted though kept", call: with(func(c *Call) { c.Tool = get }), want: OverLimit},
		{name: "a new set", set: `@id("none") forbid (principal, action, resource);`, call: with(func(c *Call) { c.Approved = true }), want: Forbid},
		{name: "args read: petId 1", set: byArgs, call: base, want: Allow},
		{name: "args read: petId 7", call: with(func(c *Call) { c.Args = []byte(`{"petId": 7}`) }), want: Forbid},
		{name: "args read: petId 1 again", call: base, want: Allow},
	}
	for _, st := range steps {
		if st.set != "" {
			w.cur.Store(mustParse(t, st.set))
		}
		if got := g.Check(context.Background(), st.call).Verdict; got != st.want {
			t.Errorf("%s: verdict %d, want %d", st.name, got, st.want)
		}
		// The same call again, answered from what the gate kept.
		if st.want != Allow && st.want != OverLimit {
			if got := g.Check(context.Background(), st.call).Verdict; got != st.want {
				t.Errorf("%s, again: verdict %d, want %d", st.name, got, st.want)
			}
		}
	}
}

// TestGateKeptDecisionIsACopy: a caller changing a decision's policies
// does not change what the gate answers next.
func TestGateKeptDecisionIsACopy(t *testing.T) {
	g := &Gate{Rules: mustParse(t, `@id("p") permit (principal, action == PML::Action::"call", resource);`), Counter: &memCounter{}}
	c := Call{Principal: "jwt:https://idp#alice", Tool: deletePet, ExecutionID: "run-1"}
	out := g.Check(context.Background(), c)
	out.Decision.Policies[0] = "changed"
	if got := g.Check(context.Background(), c).Decision.Policies; len(got) != 1 || got[0] != "p" {
		t.Fatalf("policies %v, want [p]", got)
	}
}
