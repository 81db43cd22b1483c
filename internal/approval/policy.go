// Package approval decides who may decide: which principals may approve a
// call that needs a person (a destructive tool, or one a server lists in
// require_approval) or publish a capability version every agent will run,
// and whether the caller that wrote the script is one of them. Which calls
// need a person is the tools' and the servers' to say; who decides belongs
// to the deployment, never to the caller it guards against. A decision is
// weighed by who could have made it (execution.Channel): a form-mode
// answer is only as human as the client that relayed it, a request with
// the caller's credentials may be the agent's own, and only a person
// signed in on the approval page is known to be a person. The package also
// mints and checks the tamper-proof state an MCP client carries between an
// elicitation and its answer (State).
//
// Every decision here is the deployment's policy set's (internal/policy):
// each method builds the Cedar request and evaluates it. Without a policy
// file that set is the one generated from the switches below
// (policy.Default), so the switches keep meaning what they always have,
// and `pml policy print` shows them as the rules they are.
package approval

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/policy"
)

// Policy is a deployment's answer to "who decides". The zero Policy lets
// nobody approve: no approver, no trusted client, and the caller may only
// reject.
type Policy struct {
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
	// Rules is the policy set that decides: an operator's policy file,
	// or the default set generated from the fields above (Compile). Nil
	// generates the default set for each decision (tests that build a
	// Policy literally); a service compiles it once.
	Rules policy.Authorizer
	// Custom says Rules is an operator's policy file, not the default
	// set: messages then name no role the switches would (Deciders).
	Custom bool
}

// Switches are the fields the default policy set is generated from.
func (p Policy) Switches() policy.Switches {
	return policy.Switches{Approvers: p.Approvers, TrustedClients: p.TrustedClients, CallerDecides: p.CallerDecides, SelfApproval: p.SelfApproval}
}

// Compile returns p with Rules set to the default set generated from its
// switches, unless Rules is set already.
func (p Policy) Compile() (Policy, error) {
	if p.Rules != nil {
		return p, nil
	}
	s, err := policy.DefaultSet(p.Switches())
	if err != nil {
		return p, err
	}
	p.Rules = s
	return p, nil
}

// Authorizer is the set that decides: Rules, or the default set
// generated from the switches.
func (p Policy) Authorizer() policy.Authorizer { return p.rules() }

// rules is the set that decides.
func (p Policy) rules() policy.Authorizer {
	if p.Rules != nil {
		return p.Rules
	}
	s, err := policy.DefaultSet(p.Switches())
	if err != nil {
		return denyAll{err}
	}
	return s
}

// denyAll refuses everything: a set that could not be built.
type denyAll struct{ err error }

// Authorize implements policy.Authorizer: every request refused, with why.
func (d denyAll) Authorize(context.Context, policy.Input) (policy.Decision, error) {
	return policy.Decision{}, d.err
}

// Check evaluates one request. A set that cannot answer (Verified
// Permissions unreachable) is a refusal, logged.
func (p Policy) Check(ctx context.Context, in policy.Input) policy.Decision {
	d, err := p.rules().Authorize(ctx, in)
	if err != nil {
		slog.WarnContext(ctx, "policy set could not decide; refused", "action", in.Action.ID, "err", err)
		return policy.Decision{}
	}
	return d
}

// Decider is who makes a decision, and how it reached the service.
type Decider struct {
	Principal string
	Channel   execution.Channel
}

func (d Decider) policy() policy.Decider {
	return policy.Decider{Principal: d.Principal, Channel: string(d.Channel)}
}

// ParseApprovers reads a comma-separated list of principal patterns
// (PML_APPROVERS, PML_TRUSTED_CLIENTS): IAM ARNs
// ("arn:aws:sts::123456789012:assumed-role/pml-approver/*") and JWT
// principals, written "jwt:<iss>#<sub>" or "<iss>#<sub>". Blank entries
// are skipped. Anything else is refused with a message naming it and
// saying why, and so is a pattern whose '*' would let someone other than
// the deployment decide who matches: one in an ARN's partition, service,
// region, account or resource type, or a JWT's issuer (the parts that
// vouch for the rest); an assumed role's pattern without both role and
// session; and one with a '*' in the role and a session that is not '*',
// since the session name is chosen by whoever assumes the role and so
// cannot identify a person (policy.PatternCondition says how a pattern
// matches).
func ParseApprovers(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			continue
		case p == "*" || p == "jwt:*":
			return nil, fault.New(fault.InvalidRequest, "%q would match anyone: name the principals (an IAM ARN, or jwt:<issuer>#<subject>)", p)
		case !strings.HasPrefix(p, "arn:") && !strings.HasPrefix(p, "jwt:") && strings.Contains(p, "#"):
			p = "jwt:" + p
		}
		if why := policy.PatternRefusal(p); why != "" {
			return nil, fault.New(fault.InvalidRequest, "%q: %s", p, why)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// deployment evaluates an action about no one execution.
func (p Policy) deployment(a policy.Action, d Decider) bool {
	return p.Check(context.Background(), policy.DeploymentInput(a, d.policy())).Allowed
}

// IsApprover reports whether principal oversees the deployment (the
// "oversee" action: under the default set, it matches an approver
// pattern): it sees who wrote and published what, reads every draft, and
// is recorded as an approver when it decides.
func (p Policy) IsApprover(principal string) bool {
	return p.deployment(policy.ActionOversee, Decider{Principal: principal})
}

// TrustsClient reports whether a form-mode elicitation answered through
// principal's MCP client counts as its user's decision (trustClient).
func (p Policy) TrustsClient(principal string) bool {
	return p.deployment(policy.ActionTrustClient, Decider{Principal: principal, Channel: execution.ChannelClient})
}

// MayConsent reports whether principal may run calls that need approval
// without asking (allow_destructive), or publish its own capability
// without a draft: consent given up front, with the caller's credentials.
func (p Policy) MayConsent(principal string) bool {
	return p.deployment(policy.ActionConsent, Decider{Principal: principal})
}

// Decide evaluates action (approve, answer, reject, read) by d on an
// execution owner runs, with the policies that decided.
func (p Policy) Decide(ctx context.Context, action policy.Action, d Decider, id, owner string) policy.Decision {
	return p.Check(ctx, policy.ExecutionInput(action, d.policy(), id, owner))
}

func (p Policy) onExecution(a policy.Action, d Decider, owner string) bool {
	return p.Decide(context.Background(), a, d, "", owner).Allowed
}

// MayAccess reports whether principal may read or cancel owner's
// execution (read: under the default set, the owner or an approver).
func (p Policy) MayAccess(principal, owner string) bool {
	return p.onExecution(policy.ActionRead, Decider{Principal: principal}, owner)
}

// MayApprove reports whether d may approve what asker's execution asks (a
// pending call). Under the default set nobody approves their own ask with
// the credentials they asked with, unless the caller decides; their own
// MCP client counts only where the deployment trusts it; on the approval
// page a person approves another's ask as an approver, their own only
// where the deployment allows self-approval.
func (p Policy) MayApprove(d Decider, asker string) bool {
	return p.onExecution(policy.ActionApprove, d, asker)
}

// MayAnswer reports whether d may answer the question a remote MCP server
// asked about a call of asker's execution (its elicitation, parked as the
// call's Pending.Questions). The default set weighs it as an approval
// (MayApprove): the server put it to its client's user, and we cannot
// tell a question that only asks for data ("which branch?") from one that
// guards against the agent ("delete the repository?"). So the answer
// belongs to the same people — a person signed in on the page, an
// approver, the asker's MCP client only where the deployment trusts its
// forms, the caller's own credentials only where the caller decides —
// never to whatever answers for the agent's client.
func (p Policy) MayAnswer(d Decider, asker string) bool {
	return p.onExecution(policy.ActionAnswer, d, asker)
}

// MayGrant reports whether d may grant calls of asker's execution: approve
// a call site for more than one call, or every pending call at once. A
// grant approves calls that have not been made yet, so under the default
// set it belongs to exactly those who may approve one: never to the agent,
// nor to whatever answers for its client unless the deployment trusts it.
func (p Policy) MayGrant(d Decider, asker string) bool {
	return p.onExecution(policy.ActionGrant, d, asker)
}

// MayReject reports whether d may reject what asker's execution asks
// (under the default set: the asker itself, refusing is always safe, or
// an approver).
func (p Policy) MayReject(d Decider, asker string) bool {
	return p.onExecution(policy.ActionReject, d, asker)
}

// MayDecide reports whether d may make these decisions on asker's
// execution: approving needs MayApprove, rejecting MayReject.
func (p Policy) MayDecide(d Decider, asker string, approve bool) bool {
	if approve {
		return p.MayApprove(d, asker)
	}
	return p.MayReject(d, asker)
}

// MayPublish reports whether d may publish a capability version that
// author wrote (a draft author proposed, or d's own save when d is the
// author) into a namespace whose owners are owners (none: a namespace
// nobody has published in). Publishing is a decision that guards against
// the agent, weighed as approvals are. Under the default set:
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
// that subject's character, never a wildcard).
func (p Policy) MayPublish(d Decider, author string, owners []string) bool {
	return p.MayPublishName(d, "", author, owners)
}

// MayPublishName is MayPublish for the capability name
// ("namespace:action"), which a policy may read.
func (p Policy) MayPublishName(d Decider, name, author string, owners []string) bool {
	return p.Check(context.Background(), policy.PublishInput(d.policy(), name, author, owners)).Allowed
}

// customRoles is what messages say of who decides under an operator's
// policy file: its roles are its own.
const customRoles = "whoever this deployment's policy set permits (pml policy print shows it)"

// Deciders says who may approve under p, for messages that tell a caller
// whom to ask. It names roles, never principals: the approvers' identities
// are the deployment's, not the caller's to learn.
func (p Policy) Deciders() string {
	if p.Custom {
		return customRoles
	}
	var who []string
	if p.CallerDecides {
		who = append(who, "the caller")
	}
	if len(p.Approvers) > 0 {
		who = append(who, "an approver")
	}
	if p.SelfApproval {
		who = append(who, "the caller's own person, signed in on the approval page")
	}
	if p.CallerDecides || len(p.TrustedClients) > 0 {
		who = append(who, "the MCP client's user, asked through elicitation")
	}
	return roles(who)
}

func roles(who []string) string {
	switch len(who) {
	case 0:
		return "nobody under this deployment's policy (it names no approver)"
	case 1:
		return who[0]
	}
	return strings.Join(who[:len(who)-1], ", ") + " or " + who[len(who)-1]
}

// Publishers says who may publish author's draft into a namespace owned
// by owners under p, for messages that tell an author whom to ask. Like
// Deciders it names roles, never principals; each role is one MayPublish
// lets through, so the two cannot disagree.
func (p Policy) Publishers(author string, owners []string) string {
	if p.Custom {
		return customRoles
	}
	var who []string
	if len(p.Approvers) > 0 {
		who = append(who, "an approver")
	}
	if p.MayPublish(Decider{author, execution.ChannelCaller}, author, owners) {
		who = append(who, "the caller")
	}
	if p.MayPublish(Decider{author, execution.ChannelPage}, author, owners) {
		who = append(who, "the author's own person, signed in on the approval page")
	}
	if slices.ContainsFunc(owners, func(o string) bool {
		return o != author && p.MayPublish(Decider{o, execution.ChannelPage}, author, owners)
	}) {
		who = append(who, "an owner of the namespace, signed in on the approval page")
	}
	if p.MayPublish(Decider{author, execution.ChannelClient}, author, owners) {
		who = append(who, "the MCP client's user, asked through elicitation")
	}
	return roles(who)
}

// Consenters says who may set allow_destructive under p.
func (p Policy) Consenters() string {
	switch {
	case p.Custom:
		return customRoles
	case p.CallerDecides:
		return "any caller"
	case len(p.Approvers) > 0:
		return "only an approver"
	}
	return "no caller"
}
