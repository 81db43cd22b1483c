package approval

// The approval policy as Go code, before the policy set decided: kept
// here, and only here, as the oracle TestDefaultSetIsTheOldPolicy holds
// the generated default set to.

import (
	"slices"
	"strings"

	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
)

// Policy is a deployment's answer to "who decides". The zero Policy lets
// nobody approve: no approver, no trusted client, and the caller may only
// reject.
type oldPolicy struct {
	// Approvers are principal patterns (an IAM ARN, "jwt:<iss>#<sub>";
	// a "*" matches any run of characters within one part of a principal,
	// never across a ':', '/' or '#': see ParseApprovers) whose holders may
	// decide any execution's pending calls and publish any capability, and
	// may set allow_destructive.
	Approvers []string
	// CallerDecides lets the principal that runs a script decide for it:
	// set allow_destructive, approve its own suspended calls, publish its
	// own capabilities. On for local use (pml run, pml serve on loopback:
	// the caller is the person at the keyboard), off in the deployment,
	// where the caller is an agent.
	CallerDecides bool
	// TrustedClients are principal patterns whose MCP clients the
	// deployment trusts to put a form-mode elicitation before a person (a
	// dialog the agent cannot answer for itself). Any other client's
	// answer is no decision: its user is sent to the approval page.
	TrustedClients []string
	// SelfApproval lets a person signed in on the approval page decide
	// what an execution of their own principal asks: for deployments where
	// an agent acts under its user's identity, and signing in on the page
	// is what tells the person from the agent. Off by default: a person
	// principal equal to the caller's is refused.
	SelfApproval bool
}

// matches reports whether principal matches one of patterns, part by part
// (matchPrincipal). The empty principal (auth off) matches none.
func oldMatches(patterns []string, principal string) bool {
	return slices.ContainsFunc(patterns, func(pattern string) bool { return oldMatchPrincipal(pattern, principal) })
}

// IsApprover reports whether principal matches one of the approver
// patterns. The empty principal (auth off) is never an approver.
func (p oldPolicy) IsApprover(principal string) bool { return oldMatches(p.Approvers, principal) }

// TrustsClient reports whether a form-mode elicitation answered through
// principal's MCP client counts as its user's decision.
func (p oldPolicy) TrustsClient(principal string) bool {
	return p.CallerDecides || oldMatches(p.TrustedClients, principal)
}

// MayAccess reports whether principal may read or cancel owner's
// execution: the owner, or an approver.
func (p oldPolicy) MayAccess(principal, owner string) bool {
	return principal == owner || p.IsApprover(principal)
}

// MayConsent reports whether principal may run calls that need approval
// without asking (allow_destructive), or publish its own capability
// without a draft: consent given up front, with the caller's credentials.
func (p oldPolicy) MayConsent(principal string) bool {
	return p.CallerDecides || p.IsApprover(principal)
}

// MayApprove reports whether d may approve what asker's execution asks (a
// pending call). Nobody approves their own ask with the credentials they
// asked with, unless the caller decides; their own MCP client counts only
// where the deployment trusts it; on the approval page a person approves
// another's ask as an approver, their own only where the deployment allows
// self-approval.
func (p oldPolicy) MayApprove(d Decider, asker string) bool {
	self := d.Principal == asker
	switch d.Channel {
	case execution.ChannelClient:
		// Only the asker's own client is asked.
		return self && p.TrustsClient(d.Principal)
	case execution.ChannelPage:
		if self {
			return p.CallerDecides || p.SelfApproval
		}
		return p.IsApprover(d.Principal)
	default:
		if self {
			return p.CallerDecides
		}
		return p.IsApprover(d.Principal)
	}
}

// MayAnswer reports whether d may answer the question a remote MCP server
// asked about a call of asker's execution (its elicitation, parked as the
// call's Pending.Questions). It is weighed as an approval is (MayApprove):
// the server put it to its client's user, and we cannot tell a question
// that only asks for data ("which branch?") from one that guards against
// the agent ("delete the repository?"). So the answer belongs to the same
// people — a person signed in on the page, an approver, the asker's MCP
// client only where the deployment trusts its forms, the caller's own
// credentials only where the caller decides — never to whatever answers
// for the agent's client.
func (p oldPolicy) MayAnswer(d Decider, asker string) bool { return p.MayApprove(d, asker) }

// MayReject reports whether d may reject what asker's execution asks: the
// asker itself (refusing is always safe), or anyone who may approve it.
func (p oldPolicy) MayReject(d Decider, asker string) bool {
	return d.Principal == asker || p.IsApprover(d.Principal) || p.MayApprove(d, asker)
}

// MayDecide reports whether d may make these decisions on asker's
// execution: approving needs MayApprove, rejecting MayReject.
func (p oldPolicy) MayDecide(d Decider, asker string, approve bool) bool {
	if approve {
		return p.MayApprove(d, asker)
	}
	return p.MayReject(d, asker)
}

// MayPublish reports whether d may publish a capability version that
// author wrote (a draft author proposed, or d's own save when d is the
// author) into a namespace whose owners are owners (none: a namespace
// nobody has published in). Publishing is a decision that guards against
// the agent, weighed as approvals are:
//   - an approver publishes anything, by credentials or on the page (a
//     form-mode answer makes no one an approver);
//   - a namespace that has owners takes versions only from them (and the
//     approvers);
//   - the author publishing its own code: with its credentials only where
//     the caller decides (consent, as allow_destructive), through its MCP
//     client only where that client is trusted, on the page only with
//     self-approval;
//   - another author's draft: a person signed in on the page, into a
//     namespace that person owns.
//
// owners are principals, recorded whole when they first published, not
// patterns: they are compared exactly (a '*' in a recorded subject is
// that subject's character, never a wildcard), which is what a pattern
// without a '*' does under the approvers' matcher too.
func (p oldPolicy) MayPublish(d Decider, author string, owners []string) bool {
	if d.Channel != execution.ChannelClient && p.IsApprover(d.Principal) {
		return true
	}
	owns := slices.Contains(owners, d.Principal)
	if len(owners) > 0 && !owns && !p.CallerDecides {
		return false
	}
	if d.Principal == author {
		switch d.Channel {
		case execution.ChannelClient:
			return p.TrustsClient(d.Principal)
		case execution.ChannelPage:
			return p.CallerDecides || p.SelfApproval
		default:
			return p.CallerDecides
		}
	}
	return d.Channel == execution.ChannelPage && (owns || p.CallerDecides)
}

// Shapes of principal: how its parts are read.
const (
	oShapeOther = "other"
	oShapeARN   = "arn"
	oShapeJWT   = "jwt"
)

// oprincipal is a principal, or a pattern, split into its parts.
type oprincipal struct {
	shape string
	// authority are the parts that vouch, spelled exactly by a pattern:
	// an ARN's partition, service, region, account and resource type and
	// the separators between its names; a JWT's issuer; another shape's
	// whole text.
	authority []string
	// names are the parts vouched for, each matched by a pattern's
	// glob: an ARN's resource names after its type, a JWT's subject.
	names []string
}

// oParsePrincipal splits s into its parts. An ARN lacking any of its six
// fields, or its resource, is of no known shape: matched exactly.
func oParsePrincipal(s string) oprincipal {
	if rest, ok := strings.CutPrefix(s, "jwt:"); ok {
		if iss, sub, ok := strings.Cut(rest, "#"); ok {
			return oprincipal{shape: oShapeJWT, authority: []string{iss}, names: []string{sub}}
		}
	}
	if f := strings.SplitN(s, ":", 6); len(f) == 6 && f[0] == "arn" && f[5] != "" {
		// The resource: its type, then its names, each after the
		// separator that precedes it. The separators vouch too: "a/b" and
		// "a:b" are different resources.
		res := f[5]
		i := strings.IndexAny(res, "/:")
		if i < 0 {
			return oprincipal{shape: oShapeARN, authority: []string{f[1], f[2], f[3], f[4], res, ""}}
		}
		typ, seps, names := res[:i], "", []string(nil)
		for res = res[i:]; res != ""; {
			seps += res[:1]
			res = res[1:]
			j := strings.IndexAny(res, "/:")
			if j < 0 {
				j = len(res)
			}
			names = append(names, res[:j])
			res = res[j:]
		}
		return oprincipal{shape: oShapeARN, authority: []string{f[1], f[2], f[3], f[4], typ, seps}, names: names}
	}
	return oprincipal{shape: oShapeOther, authority: []string{s}}
}

// matchPrincipal reports whether pattern matches oprincipal p (the empty
// principal, auth off, matches nothing). It matches part by part, never
// as one string: a '*' that could run across the parts of a principal
// would let whoever picks one part satisfy a pattern meant for another.
// An assumed role's session name is the sharpest case: the caller of
// sts:AssumeRole chooses it, so "assumed-role/*/alice@example.com" would
// be satisfied by an agent in any role that names its session
// alice@example.com, and "assumed-role/Approvers*" by the role
// ApproversEvil, or by any session of Approvers, the '*' having run over
// the '/'.
//
// So a oprincipal is split into the parts that vouch (authority: who says
// the rest is so) and the names they vouch for:
//
//   - an ARN, arn:<partition>:<service>:<region>:<account>:<type>/<name>…:
//     the partition, service, region, account and resource type vouch;
//     the names are the resource's parts after its type, split at '/' and
//     ':' (an assumed role's role and session, an IAM user's path and
//     name);
//   - a JWT principal, jwt:<issuer>#<subject>: the issuer vouches (split
//     at the first '#': an OpenID issuer has no fragment, so a subject
//     holding a '#' cannot pass for an issuer); the subject is the name;
//   - any other shape (local:person, which the CLI adds itself): the whole
//     oprincipal vouches, and is matched exactly.
//
// A pattern matches a oprincipal when both have the same shape, spell the
// parts that vouch identically (a '*' there is a character, never a
// oWildcard — and ParseApprovers refuses it), and have as many names, each
// matched by its own (catalog.MatchGlob, case counting). A '*' therefore
// never crosses a ':', '/' or '#', a pattern's session only ever matches
// a session, and a pattern naming fewer or more parts than a principal
// has does not match it. One more pattern matches nothing, and is refused
// by ParseApprovers: an assumed role's, whose role holds a '*' and whose
// session is anything but '*' (oSessionRefusal).
func oldMatchPrincipal(pattern, p string) bool {
	if p == "" {
		return false
	}
	pat, got := oParsePrincipal(pattern), oParsePrincipal(p)
	if pat.shape != got.shape || !slices.Equal(pat.authority, got.authority) || len(pat.names) != len(got.names) {
		return false
	}
	if pat.oSessionRefusal() != "" {
		return false
	}
	for i, glob := range pat.names {
		if !catalog.MatchGlob(glob, got.names[i]) {
			return false
		}
	}
	return true
}

// oIsAssumedRole reports whether p is an assumed role's session ARN
// (arn:aws:sts::<account>:assumed-role/<role>/<session>), or a pattern
// for one.
func (p oprincipal) oIsAssumedRole() bool {
	return p.shape == oShapeARN && p.authority[4] == "assumed-role"
}

// oSessionRefusal says why an assumed role's pattern cannot be honoured,
// "" when it can. The role is the authority: whoever may assume it is
// who the account lets. The session name is a label the caller of
// sts:AssumeRole writes, so a literal session identifies a person only
// within a role the pattern names; with a '*' in the role it would
// identify anyone, in any matching role, who chose that label.
func (p oprincipal) oSessionRefusal() string {
	if !p.oIsAssumedRole() || len(p.names) != 2 {
		return ""
	}
	if strings.Contains(p.names[0], oWildcard) && p.names[1] != oWildcard {
		return "a session name is chosen by whoever assumes the role, so it cannot identify a person in a role the pattern does not name: " +
			"name the role (assumed-role/<role>/<session>), or match every session of the roles (assumed-role/<role pattern>/*)"
	}
	return ""
}

// oWildcard is the one oWildcard of a oprincipal pattern.
const oWildcard = "*"
