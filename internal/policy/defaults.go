package policy

import (
	"fmt"
	"strings"
)

// Switches are the settings a deployment decides by when it has no
// policy file: the default set is generated from them (Default).
type Switches struct {
	// Approvers are principal patterns (PML_APPROVERS) whose holders
	// decide any execution's pending calls, publish any capability and
	// consent up front.
	Approvers []string
	// TrustedClients are principal patterns (PML_TRUSTED_CLIENTS) whose
	// MCP clients put a decision before their user in a form.
	TrustedClients []string
	// CallerDecides (PML_CALLER_DECIDES, on for local use) lets the
	// principal that runs a script decide for it.
	CallerDecides bool
	// SelfApproval (PML_SELF_APPROVAL) lets a person signed in on the
	// approval page decide what their own principal's execution asks.
	SelfApproval bool
}

// Default is the policy set a deployment decides by without a policy
// file, generated from its switches: what `pml policy print` shows, and
// where an operator's own file starts. Every decision the service makes
// about who may do what goes through it.
func Default(sw Switches) []byte {
	var b strings.Builder
	g := gen{b: &b}
	g.header(sw)
	g.calls()
	approvers := anyOf(sw.Approvers)
	trusted := anyOf(sw.TrustedClients)
	if approvers != "" {
		g.policy("approvers-decide", "Approvers (PML_APPROVERS) approve and answer what another principal's execution asks, with their\n"+
			"// credentials or on the approval page: never through an MCP client's form, which any agent can fill in.",
			`permit (principal, action in [PML::Action::"approve", PML::Action::"grant", PML::Action::"answer"], resource)`,
			`context.channel != "client" && principal != resource.owner && (`+approvers+`)`)
		g.policy("approvers-publish", "Approvers publish any capability version (not through a client's form either).",
			`permit (principal, action == PML::Action::"publish", resource)`,
			`context.channel != "client" && (`+approvers+`)`)
		g.policy("approvers-oversee", "Approvers reject and read any execution, consent up front to calls that need a person\n"+
			"// (allow_destructive), and oversee: see who wrote and published what, read every draft.",
			`permit (principal, action in [PML::Action::"reject", PML::Action::"read", PML::Action::"consent", PML::Action::"oversee"], resource)`,
			approvers)
	}
	g.policy("owner-reads-and-rejects", "Whoever runs an execution reads it, cancels it and rejects what it asks: refusing is always safe.",
		`permit (principal, action in [PML::Action::"reject", PML::Action::"read"], resource)`,
		`principal == resource.owner`)
	ownerOK := `(resource.owners.isEmpty() || resource.owners.contains(principal))`
	if sw.CallerDecides {
		g.callerDecides()
	} else {
		if sw.SelfApproval {
			g.policy("self-approval", "PML_SELF_APPROVAL: a person signed in on the approval page decides what their own principal's execution\n"+
				"// asks (signing in is what tells the person from the agent), and publishes their own code into a namespace\n"+
				"// that is new or theirs.",
				`permit (principal, action in [PML::Action::"approve", PML::Action::"grant", PML::Action::"answer"], resource)`,
				`context.channel == "page" && principal == resource.owner`)
			g.policy("self-approval-publish", "",
				`permit (principal, action == PML::Action::"publish", resource)`,
				`context.channel == "page" && principal == resource.author && `+ownerOK)
		}
		if trusted != "" {
			g.policy("trusted-clients", "PML_TRUSTED_CLIENTS: these principals' MCP clients put a decision before their user in a form the\n"+
				"// agent cannot answer; the user decides what that principal's own execution asks, and publishes its\n"+
				"// own code into a namespace that is new or its own.",
				`permit (principal, action == PML::Action::"trustClient", resource)`, trusted)
			g.policy("trusted-clients-decide", "",
				`permit (principal, action in [PML::Action::"approve", PML::Action::"grant", PML::Action::"answer"], resource)`,
				`context.channel == "client" && principal == resource.owner && (`+trusted+`)`)
			g.policy("trusted-clients-publish", "",
				`permit (principal, action == PML::Action::"publish", resource)`,
				`context.channel == "client" && principal == resource.author && (`+trusted+`) && `+ownerOK)
		}
		g.policy("owners-publish-drafts", "A namespace's owners (who published in it) publish another author's draft into it, signed in on the page.",
			`permit (principal, action == PML::Action::"publish", resource)`,
			`context.channel == "page" && principal != resource.author && resource.owners.contains(principal)`)
	}
	return []byte(b.String())
}

// gen writes a policy set.
type gen struct{ b *strings.Builder }

func (g gen) header(sw Switches) {
	onOff := map[bool]string{true: "on", false: "off"}
	list := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		q := make([]string, len(l))
		for i, p := range l {
			q[i] = Quote(p) // a comment never ends inside one
		}
		return strings.Join(q, ", ")
	}
	fmt.Fprintf(g.b, `// The default policy set, generated from this deployment's switches:
//   approvers (PML_APPROVERS):             %s
//   trusted clients (PML_TRUSTED_CLIENTS): %s
//   the caller decides (PML_CALLER_DECIDES): %s
//   self-approval (PML_SELF_APPROVAL):     %s
// A policy file (--policy, PML_POLICY) replaces this set whole: start from
// this text (docs/POLICY.md). What is not permitted is refused.
`, list(sw.Approvers), list(sw.TrustedClients), onOff[sw.CallerDecides], onOff[sw.SelfApproval])
}

func (g gen) calls() {
	g.policy("call", "Calls: whoever may run a script may call the tools its execution is given (a server's allow and deny\n"+
		"// lists, and the request's tools filter, decide which tools those are).",
		`permit (principal, action == PML::Action::"call", resource)`, "")
	g.b.WriteString(`
// A call of a tool that needs a person (destructive by its annotations, or
// named in its server's require_approval) runs only with the request's
// allow_destructive (honoured for whom "consent" permits) or a person's
// approval of that very call. Denied without, and permitted with, an
// approval, such a call is asked of a person: parked, or refused FORBIDDEN
// where the request does not wait.
@id("call-needs-a-person")
forbid (principal, action == PML::Action::"call", resource)
when { resource.destructive || resource.requireApproval }
unless { context.consent || context.approved };
`)
}

func (g gen) callerDecides() {
	g.policy("caller-decides", "PML_CALLER_DECIDES (local use: the caller is the person at the keyboard): the principal that runs a script\n"+
		"// decides what its execution asks, by any channel, consents up front, and publishes its own code.",
		`permit (principal, action in [PML::Action::"approve", PML::Action::"grant", PML::Action::"answer"], resource)`,
		`principal == resource.owner`)
	g.policy("caller-consents", "", `permit (principal, action in [PML::Action::"consent", PML::Action::"trustClient"], resource)`, "")
	g.policy("caller-publishes", "", `permit (principal, action == PML::Action::"publish", resource)`,
		`principal == resource.author || context.channel == "page"`)
}

// policy writes one policy: its comment, id, head and condition.
func (g gen) policy(id, comment, head, when string) {
	g.b.WriteString("\n")
	if comment != "" {
		g.b.WriteString("// " + comment + "\n")
	}
	fmt.Fprintf(g.b, "@id(%s)\n%s", Quote(id), head)
	switch {
	case strings.HasPrefix(when, "\n"):
		g.b.WriteString("\nwhen {" + when + "}")
	case when != "":
		g.b.WriteString("\nwhen { " + when + " }")
	}
	g.b.WriteString(";\n")
}

// anyOf is the condition that the principal matches one of patterns
// (PatternCondition), one per line; "" when none can match.
func anyOf(patterns []string) string {
	var conds []string
	for _, p := range patterns {
		if c := PatternCondition(p); c != "" {
			conds = append(conds, "\n    // "+Quote(p)+"\n    ("+c+")")
		}
	}
	if len(conds) == 0 {
		return ""
	}
	return strings.Join(conds, " ||") + "\n  "
}

// DefaultSet is the default set for sw, parsed. It fails only on a bug
// (the generated text does not validate).
func DefaultSet(sw Switches) (*Set, error) {
	s, err := Parse("default", Default(sw))
	if err != nil {
		return nil, fmt.Errorf("the generated default policy set: %w", err)
	}
	s.isDefault = true
	return s, nil
}
