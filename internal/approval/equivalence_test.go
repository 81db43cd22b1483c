package approval

import (
	"testing"

	"github.com/pml-sandbox/pml/internal/execution"
)

// principals the equivalence tests decide for: every shape, the empty
// principal (auth off), and the hostile near-misses of
// TestPrincipalPatterns.
var testPrincipals = []string{
	"",
	"local:person",
	"arn:approver",
	"arn:aws:sts::123456789012:assumed-role/Approvers/alice",
	"arn:aws:sts::123456789012:assumed-role/ApproversEvil/alice",
	"arn:aws:sts::123456789012:assumed-role/Approvers/x/y",
	"arn:aws:sts::999999999999:assumed-role/Approvers/alice",
	"arn:aws:sts::123456789012:assumed-role/AgentRole/alice@example.com",
	"arn:aws:iam::123456789012:role/ops-alice",
	"arn:aws:iam::123456789012:role/ops-x/evil",
	"arn:aws:iam::123456789012:user/division/bob",
	"jwt:https://idp#agent-7",
	"jwt:https://idp#alice",
	"jwt:https://idp#a#b",
	"jwt:https://idp.evil#alice",
	"jwt:https://idp#*",
}

// testPatterns are approver and trusted-client patterns, good and bad
// (a Policy built in code is not checked by ParseApprovers).
var testPatterns = []string{
	"arn:aws:sts::123456789012:assumed-role/Approvers/*",
	"arn:aws:sts::123456789012:assumed-role/Approvers*",
	"arn:aws:sts::123456789012:assumed-role/*/alice@example.com",
	"arn:aws:sts::123456789012:assumed-role/*/*",
	"arn:aws:sts::*:assumed-role/Approvers/*",
	"arn:aws:iam::123456789012:role/ops-*",
	"arn:aws:iam::123456789012:user/*",
	"arn:aws:iam::123456789012:user/division/*",
	"arn:aws:*:assumed-role/Approvers/*",
	"jwt:https://idp#*",
	"jwt:https://idp#agent-*",
	"jwt:https://idp*#alice",
	"jwt:*#alice",
	"local:person",
	"local:*",
	"arn:approver",
	"*",
	"",
}

// TestPatternsMatchAsBefore: the Cedar condition each pattern generates
// matches exactly the principals the old matcher (part by part) matched.
func TestPatternsMatchAsBefore(t *testing.T) {
	for _, pat := range testPatterns {
		p, err := Policy{Approvers: []string{pat}, TrustedClients: []string{pat}}.Compile()
		if err != nil {
			t.Fatalf("%q: %v", pat, err)
		}
		old := oldPolicy{Approvers: []string{pat}, TrustedClients: []string{pat}}
		for _, pr := range testPrincipals {
			if got, want := p.IsApprover(pr), old.IsApprover(pr); got != want {
				t.Errorf("IsApprover(%q) under %q = %v; the old matcher said %v", pr, pat, got, want)
			}
			if got, want := p.TrustsClient(pr), old.TrustsClient(pr); got != want {
				t.Errorf("TrustsClient(%q) under %q = %v; the old matcher said %v", pr, pat, got, want)
			}
		}
	}
}

// TestDefaultSetIsTheOldPolicy: under every combination of the switches,
// every decision the generated default set makes is the one the Go code
// it replaced made, for every decider, channel, owner and namespace.
func TestDefaultSetIsTheOldPolicy(t *testing.T) {
	approverLists := [][]string{nil, {"arn:aws:sts::123456789012:assumed-role/Approvers/*"},
		{"arn:aws:iam::123456789012:role/ops-*", "jwt:https://idp#alice", "local:person"}}
	trustedLists := [][]string{nil, {"jwt:https://idp#agent-*"}}
	people := []string{"", "local:person", "arn:aws:sts::123456789012:assumed-role/Approvers/alice",
		"arn:aws:iam::123456789012:role/ops-alice", "jwt:https://idp#agent-7", "jwt:https://idp#alice", "jwt:https://idp#mallory"}
	channels := []execution.Channel{execution.ChannelCaller, execution.ChannelClient, execution.ChannelPage}
	ownerSets := [][]string{nil, {"jwt:https://idp#alice"}, {"jwt:https://idp#agent-7", "jwt:https://idp#mallory"}}
	n := 0
	for _, appr := range approverLists {
		for _, trusted := range trustedLists {
			for _, cd := range []bool{false, true} {
				for _, sa := range []bool{false, true} {
					old := oldPolicy{Approvers: appr, TrustedClients: trusted, CallerDecides: cd, SelfApproval: sa}
					p, err := Policy{Approvers: appr, TrustedClients: trusted, CallerDecides: cd, SelfApproval: sa}.Compile()
					if err != nil {
						t.Fatal(err)
					}
					for _, who := range people {
						check := func(what string, got, want bool) {
							n++
							if got != want {
								t.Errorf("%+v: %s = %v; the old policy said %v", old, what, got, want)
							}
						}
						check("IsApprover("+who+")", p.IsApprover(who), old.IsApprover(who))
						check("TrustsClient("+who+")", p.TrustsClient(who), old.TrustsClient(who))
						check("MayConsent("+who+")", p.MayConsent(who), old.MayConsent(who))
						for _, ch := range channels {
							d := Decider{Principal: who, Channel: ch}
							for _, asker := range people {
								at := " by " + who + " via " + string(ch) + " for " + asker
								check("MayApprove"+at, p.MayApprove(d, asker), old.MayApprove(d, asker))
								check("MayAnswer"+at, p.MayAnswer(d, asker), old.MayAnswer(d, asker))
								// A grant was an approval before it was an action of its own.
								check("MayGrant"+at, p.MayGrant(d, asker), old.MayApprove(d, asker))
								check("MayReject"+at, p.MayReject(d, asker), old.MayReject(d, asker))
								check("MayAccess"+at, p.MayAccess(who, asker), old.MayAccess(who, asker))
								for _, owners := range ownerSets {
									check("MayPublish"+at, p.MayPublish(d, asker, owners), old.MayPublish(d, asker, owners))
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d decisions compared", n)
}
