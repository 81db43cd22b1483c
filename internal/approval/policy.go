// Package approval decides who may decide: which principals may approve a
// call that needs a person (a destructive tool, or one a server lists in
// require_approval), and whether the caller that wrote the script is one of
// them. Which calls need a person is the tools' and the servers' to say;
// who decides belongs to the deployment, never to the caller it guards
// against. The package also mints and checks the tamper-proof state an MCP
// client carries between an elicitation and its answer (State).
package approval

import (
	"slices"
	"strings"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Policy is a deployment's answer to "who decides". The zero Policy lets
// nobody but the client's user through elicitation decide: no approver,
// and the caller may only reject.
type Policy struct {
	// Approvers are principal patterns (an IAM ARN, "jwt:<iss>#<sub>"; a
	// "*" matches any run of characters) whose holders may decide any
	// execution's pending calls, and may set allow_destructive.
	Approvers []string
	// CallerDecides lets the principal that runs a script decide for it:
	// set allow_destructive, and approve its own suspended calls. On for
	// local use (pml run, pml serve on loopback: the caller is the person
	// at the keyboard), off in the deployment, where the caller is an agent.
	CallerDecides bool
}

// ParseApprovers reads a comma-separated list of principal patterns
// (PML_APPROVERS): IAM ARNs ("arn:aws:iam::123456789012:role/ops-*") and
// JWT principals, written "jwt:<iss>#<sub>" or "<iss>#<sub>". Blank
// entries are skipped; anything else is refused with a message naming it.
func ParseApprovers(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			continue
		case p == "*" || p == "jwt:*":
			return nil, fault.New(fault.InvalidRequest, "approver %q would let anyone decide: name the principals (an IAM ARN, or jwt:<issuer>#<subject>)", p)
		case strings.HasPrefix(p, "arn:"):
		case strings.HasPrefix(p, "jwt:"):
			if !strings.Contains(p, "#") {
				return nil, fault.New(fault.InvalidRequest, "approver %q: a JWT principal is jwt:<issuer>#<subject>", p)
			}
		case strings.Contains(p, "#"):
			p = "jwt:" + p
		default:
			return nil, fault.New(fault.InvalidRequest, "approver %q is neither an IAM ARN (arn:…) nor a JWT principal (<issuer>#<subject>)", p)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// IsApprover reports whether principal matches one of the approver
// patterns. The empty principal (auth off) is never an approver.
func (p Policy) IsApprover(principal string) bool {
	if principal == "" {
		return false
	}
	for _, pattern := range p.Approvers {
		if catalog.MatchGlob(pattern, principal) {
			return true
		}
	}
	return false
}

// MayAccess reports whether principal may read or cancel owner's
// execution: the owner, or an approver.
func (p Policy) MayAccess(principal, owner string) bool {
	return principal == owner || p.IsApprover(principal)
}

// MayConsent reports whether principal may run calls that need approval
// without asking (allow_destructive).
func (p Policy) MayConsent(principal string) bool {
	return p.CallerDecides || p.IsApprover(principal)
}

// MayDecide reports whether principal may decide on owner's suspended
// execution: an approver may decide anything; the owner may reject, and
// may approve only where the caller decides. Anyone else may do nothing.
func (p Policy) MayDecide(principal, owner string, approve bool) bool {
	switch {
	case p.IsApprover(principal):
		return true
	case principal != owner:
		return false
	}
	return !approve || p.CallerDecides
}

// Deciders says who may approve under p, for messages that tell a caller
// whom to ask.
func (p Policy) Deciders() string {
	var who []string
	if p.CallerDecides {
		who = append(who, "the caller")
	}
	if len(p.Approvers) > 0 {
		who = append(who, "an approver ("+strings.Join(p.Approvers, ", ")+")")
	}
	who = append(who, "the MCP client's user, asked through elicitation")
	if len(who) == 1 {
		return who[0]
	}
	return strings.Join(who[:len(who)-1], ", ") + " or " + who[len(who)-1]
}

// Consenters says who may set allow_destructive under p.
func (p Policy) Consenters() string {
	switch {
	case p.CallerDecides:
		return "any caller"
	case len(p.Approvers) > 0:
		return "only an approver (" + strings.Join(p.Approvers, ", ") + ")"
	}
	return "no caller"
}
