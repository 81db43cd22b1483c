package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/testutil/cputime"
)

// benchSet is a set of n policies as an operator would write them: one
// per tool of n/2 tools (servers of 10), a forbid reading an argument for
// each fifth, and decision rules.
func benchSet(n int) string {
	var b strings.Builder
	b.WriteString(`@id("ops") permit (principal, action in [PML::Action::"approve", PML::Action::"read"], resource)
when { principal.kind == "arn" && principal.account == "123456789012" && principal.role like "ops*" };
`)
	for i := 1; i < n; i++ {
		tool := fmt.Sprintf(`PML::Tool::"s%d:t%d"`, i/20, i/2)
		switch {
		case i%10 == 5:
			fmt.Fprintf(&b, `@id("p%d") forbid (principal, action == PML::Action::"call", resource == %s)
unless { context.args.hasTag("id") && context.args.getTag("id") has long && context.args.getTag("id").long >= 100 };
`, i, tool)
		case i%2 == 1:
			fmt.Fprintf(&b, `@id("p%d") @limit("100/1h") permit (principal, action == PML::Action::"call", resource == %s)
when { principal.kind == "jwt" && principal.issuer == "https://idp.example" };
`, i, tool)
		default:
			fmt.Fprintf(&b, `@id("p%d") permit (principal, action == PML::Action::"call", resource in PML::Server::"s%d")
when { resource.readOnly && context.source != "sqs" };
`, i, i/20)
		}
	}
	return b.String()
}

// BenchmarkEvaluate is the policy set's cost per tool call: the request
// built (principal, tool, arguments as tags) and evaluated, by sets of 10,
// 100 and 1,000 policies ("default": the set generated from the switches,
// which reads no arguments): "indexed" is what the host runs (Gate.Check:
// only the policies whose scope may apply, the principal's and tool's
// entities cached); "whole" evaluates every policy (cedar-go's
// PolicySet) over a request built afresh. Counting limits is not
// included (BenchmarkAdd in internal/policy/usage).
// cpu-µs/call is the process's CPU time per call: what a call costs on a
// machine shared with other work.
func BenchmarkEvaluate(b *testing.B) {
	ro := true
	call := Call{Principal: "jwt:https://idp.example#agent-7", Source: "http", ExecutionID: "ex_1",
		Tool: catalog.Tool{Server: "s0", Name: "t3", SourceKind: "mcp", Annotations: catalog.Annotations{ReadOnly: &ro}},
		Args: []byte(`{"id": 150, "note": "a pet", "tags": ["a", "b"]}`)}
	def, err := DefaultSet(Switches{Approvers: []string{"arn:aws:sts::123456789012:assumed-role/Approvers/*"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("default", func(b *testing.B) {
		g := &Gate{Rules: def}
		cpu0 := cputime.Process()
		for b.Loop() {
			if out := g.Check(context.Background(), call); out.Verdict != Allow {
				b.Fatalf("%+v", out)
			}
		}
		b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/call")
	})
	for _, n := range []int{10, 100, 1000} {
		text := benchSet(n)
		s, err := Parse("bench.cedar", []byte(text))
		if err != nil {
			b.Fatal(err)
		}
		whole, err := cedar.NewPolicySetFromBytes("bench.cedar", []byte(text))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Run(fmt.Sprintf("indexed/%d", n), func(b *testing.B) {
			g := &Gate{Rules: s, Counter: free{}}
			cpu0 := cputime.Process()
			for b.Loop() {
				if out := g.Check(ctx, call); out.Verdict != Allow {
					b.Fatalf("%+v", out)
				}
			}
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/call")
		})
		b.Run(fmt.Sprintf("whole/%d", n), func(b *testing.B) {
			cpu0 := cputime.Process()
			for b.Loop() {
				in, _ := CallInput(call, true)
				cedar.Authorize(whole, in.Entities, cedar.Request{Principal: in.Principal, Action: in.Action, Resource: in.Resource, Context: in.Context})
			}
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/call")
		})
	}
}

// free counts nothing: the counter's cost is BenchmarkAdd's.
type free struct{}

func (free) Add(context.Context, CountKey, int64, int64) (int64, bool, error) { return 0, true, nil }

// BenchmarkDecision is one approval decision (MayApprove's request) under
// the default set with three approver patterns.
func BenchmarkDecision(b *testing.B) {
	s, err := DefaultSet(Switches{Approvers: []string{"arn:aws:sts::123456789012:assumed-role/Approvers/*",
		"jwt:https://idp#alice", "arn:aws:iam::123456789012:role/ops-*"}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cpu0 := cputime.Process()
	for b.Loop() {
		d, _ := s.Authorize(ctx, ExecutionInput(ActionApprove, Decider{Principal: "arn:aws:sts::123456789012:assumed-role/Approvers/bob", Channel: "page"}, "ex_1", "jwt:https://idp#agent"))
		if !d.Allowed {
			b.Fatal("denied")
		}
	}
	b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-µs/op")
}

// BenchmarkLoad is parsing and validating a set of 1,000 policies.
func BenchmarkLoad(b *testing.B) {
	text := []byte(benchSet(1000))
	for b.Loop() {
		if _, err := Parse("bench.cedar", text); err != nil {
			b.Fatal(err)
		}
	}
}
