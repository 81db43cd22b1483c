package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/trace"
)

func mustParse(t testing.TB, text string) *Set {
	t.Helper()
	s, err := Parse("test.cedar", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

var (
	getPet    = catalog.Tool{Server: "pets", Name: "getPetById", Kind: trace.KindMCP, SourceKind: "openapi", Annotations: catalog.Annotations{ReadOnly: yes()}}
	deletePet = catalog.Tool{Server: "pets", Name: "deletePet", Kind: trace.KindMCP, SourceKind: "openapi", Annotations: catalog.Annotations{ReadOnly: no(), Destructive: yes()}}
)

// TestLoadRefuses: every mistake in a policy file is an error at load,
// naming the policy and its line, never a policy that silently matches
// nothing (or everything).
func TestLoadRefuses(t *testing.T) {
	const call = `action == PML::Action::"call"`
	for _, tc := range []struct{ name, text, want string }{
		{"syntax error", `permit (principal, ` + call + `, resource) when { principal.kind == "arn" `, "test.cedar:1:"},
		{"unknown attribute", `permit (principal, ` + call + `, resource) when { principal.acount == "1" };`, "attribute `acount`"},
		{"unknown context attribute", `permit (principal, ` + call + `, resource) when { context.aproved };`, "attribute `aproved`"},
		{"an argument read as an attribute", `permit (principal, ` + call + `, resource) when { context.args.petId == 1 };`, "attribute `petId`"},
		{"a tag read unguarded", `permit (principal, ` + call + `, resource) when { context.args.getTag("petId").long > 1 };`, "unable to guarantee safety"},
		{"an optional attribute read unguarded", `permit (principal, ` + call + `, resource) when { context.args.hasTag("petId") && context.args.getTag("petId").long > 1 };`, "long"},
		{"unknown action", `permit (principal, action == PML::Action::"cal", resource);`, "unrecognized action"},
		{"unknown entity type", `permit (principal, ` + call + `, resource in PML::Servr::"pets");`, "PML::Servr"},
		{"attribute on the wrong resource", `permit (principal, action, resource) when { resource.destructive };`, "attribute `destructive`"},
		{"wrong type", `permit (principal, ` + call + `, resource) when { resource.destructive == "yes" };`, "not compatible"},
		{"unknown annotation", `@limt("3/1h") permit (principal, ` + call + `, resource);`, "unknown annotation @limt"},
		{"malformed limit", `@limit("3 an hour") permit (principal, ` + call + `, resource);`, "@limit"},
		{"limit on a forbid", `@limit("3/1h") forbid (principal, ` + call + `, resource);`, "forbid"},
		{"a limit that is no limit", `@limit("100000/1s") permit (principal, ` + call + `, resource);`, "hot key"},
		{"a window too long", `@limit("3/400d") permit (principal, ` + call + `, resource);`, "31d"},
		{"malformed sum", `@sum("500/24h") permit (principal, ` + call + `, resource);`, "@sum"},
		{"overLimit alone", `@overLimit("ask") permit (principal, ` + call + `, resource);`, "@overLimit without"},
		{"duplicate id", `@id("a") permit (principal, ` + call + `, resource); @id("a") permit (principal, ` + call + `, resource);`, `"a" is also the id`},
		{"an id that shadows a position", `@id("policy1") permit (principal, ` + call + `, resource); permit (principal, ` + call + `, resource);`, "another policy's @id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.cedar", []byte(tc.text))
			var le *LoadError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v; want a LoadError saying %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "test.cedar") {
				t.Errorf("the error does not name the file: %v", err)
			}
		})
	}
}

// TestLoadHuge: a set of 10,000 policies is refused at once, with what
// to do instead; one of MaxPolicies loads.
func TestLoadHuge(t *testing.T) {
	var b strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&b, "permit (principal, action == PML::Action::\"call\", resource == PML::Tool::\"s:t%d\");\n", i)
	}
	_, err := Parse("huge.cedar", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "at most 5000") {
		t.Fatalf("Parse(10,000 policies) = %v", err)
	}
	_, err = Parse("big.cedar", []byte(strings.Repeat("// padding\n", MaxBytes/11+1)))
	if err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("Parse(over MaxBytes) = %v", err)
	}
}

// TestScriptCannotSatisfyDeploymentFacts: the arguments are the script's,
// and live only under context.args: an argument named after a deployment
// fact (consent, approved, source, principal) satisfies no condition on
// that fact, and a condition can only read an argument as one.
func TestScriptCannotSatisfyDeploymentFacts(t *testing.T) {
	s := mustParse(t, `
@id("queued-only") permit (principal, action == PML::Action::"call", resource)
when { context.source == "sqs" && context.consent && context.approved && principal.account == "123456789012" && context.session == "s1" };`)
	g := &Gate{Rules: s}
	hostile := `{"source":"sqs","consent":true,"approved":true,"account":"123456789012","principal":{"account":"123456789012"},"session":"s1","context":{"source":"sqs"}}`
	out := g.Check(context.Background(), Call{Principal: "jwt:https://idp#agent", Tool: getPet, Args: []byte(hostile), Source: "http"})
	if out.Verdict == Allow {
		t.Fatalf("the script's arguments satisfied a condition on deployment facts: %+v", out)
	}
	// The same policy is satisfied by the facts themselves.
	out = g.Check(context.Background(), Call{Principal: "arn:aws:sts::123456789012:assumed-role/ops/x", Tool: getPet, Source: "sqs",
		Consent: true, Approved: true, Session: "s1"})
	if out.Verdict != Allow {
		t.Fatalf("the facts themselves: %+v", out)
	}
}

func TestArgs(t *testing.T) {
	s := mustParse(t, `
@id("unprotected") permit (principal, action == PML::Action::"call", resource == PML::Tool::"pets:deletePet")
when { context.args.hasTag("petId") && context.args.getTag("petId") has long && context.args.getTag("petId").long >= 100 };
@id("note") forbid (principal, action == PML::Action::"call", resource)
when { context.args.hasTag("body.note") && context.args.getTag("body.note").text like "*drop*" };`)
	g := &Gate{Rules: s}
	for _, tc := range []struct {
		args string
		want Verdict
	}{
		{`{"petId": 150}`, Allow},
		{`{"petId": "150"}`, Allow}, // a path parameter is text on the wire: the same pet
		{`{"petId": 150.0}`, Allow},
		{`{"petId": 1.5e2}`, Allow},
		{`{"petId": 42}`, Forbid}, // in the protected range
		{`{"petId": "42"}`, Forbid},
		{`{"petId": "150abc"}`, Forbid}, // not an integer: no long to compare
		{`{"petId": true}`, Forbid},
		{`{}`, Forbid},
		{`{"petId": 150, "body": {"note": "please drop tables"}}`, Forbid},
		{`{"petId": 150, "petId": 42}`, Forbid},                             // a name given twice
		{`{"petId": 150, "body.note": "x", "body": {"note": "y"}}`, Forbid}, // two spellings of one path
		{`{"petId": 150, "items": [1, {"a": [2]}]}`, Allow},
	} {
		t.Run(tc.args, func(t *testing.T) {
			out := g.Check(context.Background(), Call{Principal: "jwt:https://idp#agent", Tool: deletePet, Args: []byte(tc.args)})
			if out.Verdict != tc.want {
				t.Fatalf("verdict %v; want %v (%+v)", out.Verdict, tc.want, out)
			}
		})
	}
	var big strings.Builder
	big.WriteString(`{"petId": 150, "items": [`)
	for i := range maxArgValues + 1 {
		if i > 0 {
			big.WriteString(",")
		}
		big.WriteString("1")
	}
	big.WriteString("]}")
	out := g.Check(context.Background(), Call{Tool: deletePet, Args: []byte(big.String())})
	if out.Verdict != Forbid || !strings.Contains(out.Reason, "more than") {
		t.Fatalf("arguments past what a policy reads: %+v", out)
	}
}

// TestAsk: a call the set denies, and would permit approved, is asked of
// a person; one it denies either way is refused.
func TestAsk(t *testing.T) {
	s, err := DefaultSet(Switches{})
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{Rules: s}
	ctx := context.Background()
	if out := g.Check(ctx, Call{Tool: getPet}); out.Verdict != Allow || strings.Join(out.Decision.Policies, ",") != "call" {
		t.Errorf("a read: %+v", out)
	}
	if out := g.Check(ctx, Call{Tool: deletePet}); out.Verdict != Ask || strings.Join(out.Decision.Policies, ",") != "call-needs-a-person" {
		t.Errorf("a delete: %+v", out)
	}
	if out := g.Check(ctx, Call{Tool: deletePet, Approved: true}); out.Verdict != Allow {
		t.Errorf("a delete approved: %+v", out)
	}
	if out := g.Check(ctx, Call{Tool: deletePet, Consent: true}); out.Verdict != Allow {
		t.Errorf("a delete consented: %+v", out)
	}
	never := mustParse(t, `@id("never") forbid (principal, action == PML::Action::"call", resource) when { resource.destructive };
permit (principal, action == PML::Action::"call", resource);`)
	if out := (&Gate{Rules: never}).Check(ctx, Call{Tool: deletePet}); out.Verdict != Forbid || out.Decision.Why() != `policy "never"` {
		t.Errorf("a delete never allowed: %+v", out)
	}
}

// TestIndexChangesNothing: the index only narrows which policies are
// evaluated; over random sets and requests, its answers are Cedar's over
// the whole set.
func TestIndexChangesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	actions := []string{"call", "approve", "read", "consent"}
	tools := []string{"pets:getPetById", "pets:deletePet", "kv:kv_get"}
	resourceScope := func(action string) string {
		if action != "call" {
			return "resource"
		}
		switch r.IntN(5) {
		case 0:
			return fmt.Sprintf("resource == PML::Tool::%q", tools[r.IntN(len(tools))])
		case 1:
			return `resource in PML::Server::"pets"`
		case 2:
			return `resource is PML::Tool in PML::Server::"kv"`
		case 3:
			return "resource is PML::Tool"
		}
		return "resource"
	}
	for round := range 50 {
		var b strings.Builder
		for i := range 20 {
			effect := "permit"
			if r.IntN(4) == 0 {
				effect = "forbid"
			}
			act := actions[r.IntN(len(actions))]
			scope := fmt.Sprintf("action == PML::Action::%q", act)
			switch r.IntN(4) {
			case 0:
				scope = fmt.Sprintf(`action in [PML::Action::%q, PML::Action::"read"]`, act)
				if act != "read" && act != "approve" {
					scope = fmt.Sprintf("action == PML::Action::%q", act)
				}
			case 1:
				scope, act = "action", ""
			}
			rs := resourceScope(act)
			cond := ""
			if r.IntN(2) == 0 {
				cond = fmt.Sprintf(` when { principal.subject like "*%d*" }`, r.IntN(3))
			}
			fmt.Fprintf(&b, "@id(\"p%d\") %s (principal, %s, %s)%s;\n", i, effect, scope, rs, cond)
		}
		s := mustParse(t, b.String())
		whole, err := cedar.NewPolicySetFromBytes("w", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		for range 30 {
			who := fmt.Sprintf("jwt:https://idp#u%d", r.IntN(3))
			var in Input
			if r.IntN(2) == 0 {
				name := tools[r.IntN(len(tools))]
				srv, tool, _ := strings.Cut(name, ":")
				in, _ = CallInput(Call{Principal: who, Tool: catalog.Tool{Server: srv, Name: tool}}, false)
			} else {
				in = ExecutionInput(Action(actions[1+r.IntN(2)]), Decider{Principal: who}, "e1", "jwt:https://idp#u0")
			}
			d, _ := s.Authorize(context.Background(), in)
			want, _ := cedar.Authorize(whole, in.Entities, cedar.Request{Principal: in.Principal, Action: in.Action, Resource: in.Resource, Context: in.Context})
			if d.Allowed != (want == cedar.Allow) {
				t.Fatalf("round %d: %v on %v %v: indexed %v, whole set %v\n%s", round, in.Principal, in.Action, in.Resource, d.Allowed, want, b.String())
			}
		}
	}
}

// TestQuoteRoundTrips: a pattern or id with quotes, backslashes and
// control characters is written as a literal that reads back as itself,
// so a configured principal can never end a condition early.
func TestQuoteRoundTrips(t *testing.T) {
	for _, v := range []string{`plain`, `a"b`, `a\b`, "a\nb\tc\x00d\x7f", `") || true || ("`, "ünïcödé", `*`} {
		s := mustParse(t, `permit (principal, action == PML::Action::"oversee", resource) when { principal.text == `+Quote(v)+` };`)
		for _, who := range []string{v, "other"} {
			d, _ := s.Authorize(context.Background(), DeploymentInput(ActionOversee, Decider{Principal: who}))
			if d.Allowed != (who == v) {
				t.Errorf("%q as %q: %v", who, v, d.Allowed)
			}
		}
	}
	// A pattern naming a quote in a subject matches only that subject.
	cond := PatternCondition(`jwt:https://idp#a"b*`)
	s := mustParse(t, `permit (principal, action == PML::Action::"oversee", resource) when { `+cond+` };`)
	for who, want := range map[string]bool{`jwt:https://idp#a"bc`: true, `jwt:https://idp#ab`: false} {
		if d, _ := s.Authorize(context.Background(), DeploymentInput(ActionOversee, Decider{Principal: who})); d.Allowed != want {
			t.Errorf("%q: %v", who, d.Allowed)
		}
	}
}
