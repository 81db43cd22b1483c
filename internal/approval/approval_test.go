package approval

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/policy"
)

func TestParseApprovers(t *testing.T) {
	got, err := ParseApprovers(" arn:aws:iam::123456789012:role/ops-*, https://idp.example#alice ,, jwt:https://idp.example#bob, arn:aws:iam::123456789012:role/ops-*")
	if err != nil {
		t.Fatal(err)
	}
	want := "arn:aws:iam::123456789012:role/ops-*|jwt:https://idp.example#alice|jwt:https://idp.example#bob"
	if strings.Join(got, "|") != want {
		t.Fatalf("%q", got)
	}
	for _, bad := range []string{"*", "jwt:*", "alice", "jwt:https://idp.example", "arn:aws:iam::1:user/a, bob"} {
		if _, err := ParseApprovers(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestPolicy(t *testing.T) {
	const owner, ops, other = "jwt:https://idp#agent-7", "arn:aws:iam::1:role/ops-alice", "jwt:https://idp#mallory"
	deployed := Policy{Approvers: []string{"arn:aws:iam::1:role/ops-*"}}
	trusting := Policy{Approvers: deployed.Approvers, TrustedClients: []string{"jwt:https://idp#agent-*"}}
	self := Policy{Approvers: deployed.Approvers, SelfApproval: true}
	local := Policy{CallerDecides: true}
	caller, client, page := execution.ChannelCaller, execution.ChannelClient, execution.ChannelPage
	tests := []struct {
		name      string
		p         Policy
		principal string
		channel   execution.Channel
		approve   bool
		reject    bool
		consent   bool
		access    bool
	}{
		{"deployed: the agent rejects its own", deployed, owner, caller, false, true, false, true},
		{"deployed: the agent's own client's answer approves nothing", deployed, owner, client, false, true, false, true},
		{"deployed: the agent signed in as itself approves nothing", deployed, owner, page, false, true, false, true},
		{"deployed: an approver by credentials", deployed, ops, caller, true, true, true, true},
		{"deployed: an approver on the page", deployed, ops, page, true, true, true, true},
		{"deployed: a form answer makes no one an approver", deployed, ops, client, false, true, true, true},
		{"deployed: a stranger may not even reject", deployed, other, caller, false, false, false, false},
		{"deployed: a stranger on the page", deployed, other, page, false, false, false, false},
		{"deployed: auth off is nobody", deployed, "", caller, false, false, false, false},
		{"trusted client: its user approves", trusting, owner, client, true, true, false, true},
		{"trusted client: its credentials still do not", trusting, owner, caller, false, true, false, true},
		{"trusted client: another's session", trusting, other, client, false, false, false, false},
		{"self-approval: the person on the page", self, owner, page, true, true, false, true},
		{"self-approval: not by credentials", self, owner, caller, false, true, false, true},
		{"local: the caller approves its own", local, owner, caller, true, true, true, true},
		{"local: through its client", local, owner, client, true, true, true, true},
		{"local: a stranger still may not", local, other, caller, false, false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decider{Principal: tc.principal, Channel: tc.channel}
			if got := tc.p.MayApprove(d, owner); got != tc.approve {
				t.Errorf("MayApprove = %v", got)
			}
			if got := tc.p.MayReject(d, owner); got != tc.reject {
				t.Errorf("MayReject = %v", got)
			}
			if got := tc.p.MayDecide(d, owner, true); got != tc.approve {
				t.Errorf("MayDecide(approve) = %v", got)
			}
			if got := tc.p.MayConsent(tc.principal); got != tc.consent {
				t.Errorf("MayConsent = %v", got)
			}
			if got := tc.p.MayAccess(tc.principal, owner); got != tc.access {
				t.Errorf("MayAccess = %v", got)
			}
		})
	}
	if Policy.IsApprover(Policy{Approvers: []string{"arn:aws:iam::1:role/ops-*"}}, "arn:aws:iam::1:role/ops") {
		t.Error("a pattern's literal part must match whole")
	}
}

// TestMayPublish: publishing a capability version every agent will run is
// a decision against the agent, weighed as approvals are, with namespace
// ownership on top.
func TestMayPublish(t *testing.T) {
	const agent, alice, ops, bob = "jwt:https://idp#agent-7", "jwt:https://idp#alice", "arn:aws:iam::1:role/ops-1", "jwt:https://idp#bob"
	deployed := Policy{Approvers: []string{"arn:aws:iam::1:role/ops-*"}}
	trusting := Policy{Approvers: deployed.Approvers, TrustedClients: []string{agent}}
	self := Policy{Approvers: deployed.Approvers, SelfApproval: true}
	local := Policy{CallerDecides: true}
	caller, client, page := execution.ChannelCaller, execution.ChannelClient, execution.ChannelPage
	tests := []struct {
		name    string
		p       Policy
		d       Decider
		author  string
		owners  []string
		publish bool
	}{
		{"deployed: an agent saves its own into a new namespace", deployed, Decider{agent, caller}, agent, nil, false},
		{"deployed: an agent overwrites an owned one", deployed, Decider{agent, caller}, agent, []string{alice}, false},
		{"deployed: even an owner's credentials (an agent may hold them)", deployed, Decider{alice, caller}, alice, []string{alice}, false},
		{"deployed: an approver saves directly", deployed, Decider{ops, caller}, ops, []string{alice}, true},
		{"deployed: an approver publishes an agent's draft", deployed, Decider{ops, page}, agent, []string{alice}, true},
		{"deployed: an approver's form answer is not an approver's decision", deployed, Decider{ops, client}, ops, nil, false},
		{"deployed: an untrusted client's user", deployed, Decider{agent, client}, agent, nil, false},
		{"trusted client: its user publishes a new namespace", trusting, Decider{agent, client}, agent, nil, true},
		{"trusted client: not into another's namespace", trusting, Decider{agent, client}, agent, []string{alice}, false},
		{"trusted client: into its own", trusting, Decider{agent, client}, agent, []string{agent}, true},
		{"page: an owner publishes another's draft into its namespace", deployed, Decider{alice, page}, agent, []string{alice}, true},
		{"page: not into a namespace it does not own", deployed, Decider{bob, page}, agent, []string{alice}, false},
		{"page: not a new namespace for another's draft", deployed, Decider{bob, page}, agent, nil, false},
		{"page: its own draft without self-approval", deployed, Decider{alice, page}, alice, nil, false},
		{"page: its own draft with self-approval", self, Decider{alice, page}, alice, nil, true},
		{"local: the caller publishes at once", local, Decider{"", caller}, "", nil, true},
		{"local: over an owned namespace too", local, Decider{"", caller}, "", []string{"jwt:x#y"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.MayPublish(tc.d, tc.author, tc.owners); got != tc.publish {
				t.Errorf("MayPublish = %v", got)
			}
		})
	}
}

func TestDecidersNamesNoPrincipal(t *testing.T) {
	p := Policy{Approvers: []string{"arn:aws:iam::1:role/ops-*"}, TrustedClients: []string{"jwt:https://idp#agent-*"}}
	for _, s := range []string{p.Deciders(), p.Consenters()} {
		if strings.Contains(s, "arn:") || strings.Contains(s, "jwt:") || !strings.Contains(s, "an approver") {
			t.Errorf("%q", s)
		}
	}
	if got := (Policy{}).Deciders(); !strings.Contains(got, "nobody") {
		t.Errorf("no approver: %q", got)
	}
}

func TestState(t *testing.T) {
	k := Key(bytes.Repeat([]byte{7}, KeyBytes))
	now := time.Unix(1_800_000_000, 0)
	s := State{ExecutionID: "ex_1", Version: 3, Principal: "jwt:https://idp#a", Calls: []int{2, 5}, Expires: now.Add(time.Hour).Unix()}
	token, err := k.Seal(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := k.Open(token, now)
	if err != nil || back.ExecutionID != "ex_1" || back.Version != 3 || back.Principal != s.Principal || len(back.Calls) != 2 {
		t.Fatalf("%+v %v", back, err)
	}
	// Any change, any other key, anything else: tampered.
	flip := []byte(token)
	flip[len(stateVersion)+3] ^= 1
	other := Key(bytes.Repeat([]byte{8}, KeyBytes))
	forged, _ := other.Seal(s)
	body := strings.Split(token, ".")[1]
	raised, _ := base64.RawURLEncoding.DecodeString(body)
	raised = bytes.Replace(raised, []byte(`"v":3`), []byte(`"v":4`), 1)
	swapped := stateVersion + "." + base64.RawURLEncoding.EncodeToString(raised) + "." + strings.Split(token, ".")[2]
	for name, bad := range map[string]string{"a flipped byte": string(flip), "another key": forged, "a raised version": swapped,
		"empty": "", "garbage": "s1.x.y", "no signature": strings.Join(strings.Split(token, ".")[:2], ".")} {
		if _, err := k.Open(bad, now); !errors.Is(err, ErrTampered) {
			t.Errorf("%s: %v, want ErrTampered", name, err)
		}
	}
	if _, err := k.Open(token, now.Add(2*time.Hour)); !errors.Is(err, ErrStateExpired) {
		t.Errorf("expired: %v", err)
	}
	if _, err := Key(nil).Seal(s); err == nil {
		t.Error("sealing without a key")
	}
	// A draft's state names the draft and no execution; a state naming
	// both, or neither, is not one this key seals for a question.
	d := State{Draft: "cd_0123", Principal: s.Principal, Expires: s.Expires}
	token, _ = k.Seal(d)
	if back, err := k.Open(token, now); err != nil || back.Draft != "cd_0123" || back.ExecutionID != "" {
		t.Fatalf("draft state %+v %v", back, err)
	}
	for _, bad := range []State{{Principal: "p", Expires: s.Expires}, {ExecutionID: "ex_1", Draft: "cd_0123", Expires: s.Expires}} {
		token, _ := k.Seal(bad)
		if _, err := k.Open(token, now); !errors.Is(err, ErrTampered) {
			t.Errorf("%+v: %v, want ErrTampered", bad, err)
		}
	}
}

func TestLoadKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "approval.key")
	var wg sync.WaitGroup
	keys := make([]Key, 8)
	for i := range keys {
		wg.Go(func() {
			k, err := LoadKeyFile(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if !bytes.Equal(k, keys[0]) || len(k) != KeyBytes {
			t.Fatalf("processes creating the key at once disagree: %x %x", k, keys[0])
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", fi.Mode(), err)
	}
	again, err := LoadKeyFile(path)
	if err != nil || !bytes.Equal(again, keys[0]) {
		t.Fatal("the key must outlive the process")
	}
	if err := os.WriteFile(path, []byte("c2hvcnQ="), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(path); err == nil {
		t.Error("a short key must be refused")
	}
}

// TestMayAnswer: a remote server's question may guard against the agent,
// so it is answered as an approval is: through the asker's own client only
// where the deployment trusts it, on the page by an approver (the asker's
// own person with self-approval), never with an agent's credentials
// alone; approvers answer any.
func TestMayAnswer(t *testing.T) {
	const owner, ops, other = "jwt:https://idp#agent-7", "arn:aws:iam::1:role/ops-alice", "jwt:https://idp#mallory"
	deployed := Policy{Approvers: []string{"arn:aws:iam::1:role/ops-*"}}
	local := Policy{CallerDecides: true}
	caller, client, page := execution.ChannelCaller, execution.ChannelClient, execution.ChannelPage
	tests := []struct {
		name      string
		p         Policy
		principal string
		channel   execution.Channel
		want      bool
	}{
		{"the asker's own client, untrusted", deployed, owner, client, false},
		{"the asker's own client, trusted", Policy{Approvers: deployed.Approvers, TrustedClients: []string{owner}}, owner, client, true},
		{"another's client", deployed, other, client, false},
		{"an approver's client is not the asker's", deployed, ops, client, false},
		{"the asker signed in on the page", deployed, owner, page, false},
		{"the asker signed in on the page, self-approval", Policy{Approvers: deployed.Approvers, SelfApproval: true}, owner, page, true},
		{"an approver on the page", deployed, ops, page, true},
		{"a stranger on the page", deployed, other, page, false},
		{"the agent's credentials alone", deployed, owner, caller, false},
		{"an approver's credentials", deployed, ops, caller, true},
		{"local: the caller is the person", local, owner, caller, true},
		{"auth off is nobody on a deployment", deployed, "", caller, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.MayAnswer(Decider{Principal: tc.principal, Channel: tc.channel}, owner); got != tc.want {
				t.Errorf("MayAnswer = %v; want %v", got, tc.want)
			}
			// A grant approves calls not made yet: it is exactly as
			// much anyone's to give as an approval.
			if got := tc.p.MayGrant(Decider{Principal: tc.principal, Channel: tc.channel}, owner); got != tc.want {
				t.Errorf("MayGrant = %v; want %v", got, tc.want)
			}
		})
	}
}

// TestPublishers: who may publish a draft is named by role, never by
// principal, and only roles MayPublish lets through.
func TestPublishers(t *testing.T) {
	const agent, alice = "jwt:https://idp#agent-7", "jwt:https://idp#alice"
	approvers := []string{"arn:aws:iam::1:role/ops-*"}
	tests := []struct {
		name   string
		p      Policy
		author string
		owners []string
		want   string
	}{
		{"deployed, a new namespace", Policy{Approvers: approvers}, agent, nil, "an approver"},
		{"deployed, another's namespace", Policy{Approvers: approvers}, agent, []string{alice}, "an approver or an owner of the namespace, signed in on the approval page"},
		{"a trusted client, its own namespace", Policy{Approvers: approvers, TrustedClients: []string{agent}}, agent, []string{agent}, "an approver or the MCP client's user, asked through elicitation"},
		{"a trusted client, another's namespace", Policy{Approvers: approvers, TrustedClients: []string{agent}}, agent, []string{alice}, "an approver or an owner of the namespace, signed in on the approval page"},
		{"self-approval", Policy{Approvers: approvers, SelfApproval: true}, agent, nil, "an approver or the author's own person, signed in on the approval page"},
		{"no approver", Policy{}, agent, nil, "nobody under this deployment's policy (it names no approver)"},
		{"local", Policy{CallerDecides: true}, "", nil, "the caller, the author's own person, signed in on the approval page or the MCP client's user, asked through elicitation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.Publishers(tc.author, tc.owners)
			if got != tc.want {
				t.Errorf("Publishers = %q; want %q", got, tc.want)
			}
			if strings.Contains(got, "arn:") || strings.Contains(got, "jwt:") {
				t.Errorf("Publishers names a principal: %q", got)
			}
		})
	}
}

// TestPrincipalPatterns: an approver pattern is matched part by part, so
// that a '*' never crosses from one part of a principal into another and a
// name the caller chooses (an assumed role's session) never stands for one
// the deployment vouches for. hostile marks the cases the old matcher
// (one glob over the whole string) got wrong: each matched.
func TestPrincipalPatterns(t *testing.T) {
	const role = "arn:aws:sts::123456789012:assumed-role/"
	for _, tc := range []struct {
		name, pattern, principal string
		want, hostile            bool
	}{
		// An assumed role's session: the role is the authority, the
		// session the caller's label.
		{"any session of the role", role + "Approvers/*", role + "Approvers/alice", true, false},
		{"a named session of a named role", role + "AWSReservedSSO_Admin_0123/alice@example.com", role + "AWSReservedSSO_Admin_0123/alice@example.com", true, false},
		{"any session of roles named by a prefix", role + "Approvers-*/*", role + "Approvers-eu/bob", true, false},
		{"session-chosen impersonation", role + "*/alice@example.com", role + "AgentRole/alice@example.com", false, true},
		{"session-chosen impersonation, partial role", role + "Approv*/alice*", role + "ApproversEvil/alice", false, true},
		{"a role's '*' does not span into the session", role + "Approvers*", role + "ApproversEvil/x", false, true},
		{"a pattern without a session matches no session", role + "Approvers*", role + "Approvers/x", false, true},
		{"nor does a shorter prefix", role + "Approv*", role + "Approvers/anything", false, true},
		{"a session's '*' does not span a '/'", role + "Approvers-*/*", role + "Approvers-eu/x/bob", false, true},
		{"a wildcard resource type is no session", "arn:aws:sts::123456789012:*/alice", role + "AgentRole/alice", false, true},
		{"a user's name is no session", "arn:aws:iam::123456789012:user/*", role + "AgentRole/alice", false, false},
		{"a role pattern is no federated user", role + "Approvers/*", "arn:aws:sts::123456789012:federated-user/Approvers", false, false},
		// IAM paths: a '*' is one part, not a path.
		{"a role's '*' does not span its path", "arn:aws:iam::123456789012:role/ops-*", "arn:aws:iam::123456789012:role/ops-x/evil", false, true},
		{"a user's '*' does not span its path", "arn:aws:iam::123456789012:user/*", "arn:aws:iam::123456789012:user/division/bob", false, true},
		{"a path named, any user under it", "arn:aws:iam::123456789012:user/division/*", "arn:aws:iam::123456789012:user/division/bob", true, false},
		{"an IAM role prefix", "arn:aws:iam::123456789012:role/ops-*", "arn:aws:iam::123456789012:role/ops-alice", true, false},
		// The account and what comes before it vouch: spelled exactly.
		{"a wildcard account", "arn:aws:sts::*:assumed-role/Approvers/*", "arn:aws:sts::999999999999:assumed-role/Approvers/x", false, true},
		{"a partial account", "arn:aws:sts::12345678901*:assumed-role/Approvers/*", "arn:aws:sts::123456789019:assumed-role/Approvers/x", false, true},
		{"a '*' does not span a ':'", "arn:aws:*:assumed-role/Approvers/*", role + "Approvers/x", false, true},
		// JWT principals: the issuer vouches, spelled exactly.
		{"any subject of the issuer", "jwt:https://issuer#*", "jwt:https://issuer#alice", true, false},
		{"a subject prefix", "jwt:https://idp#agent-*", "jwt:https://idp#agent-7", true, false},
		{"a subject holding a '#'", "jwt:https://idp#*", "jwt:https://idp#a#b", true, false},
		{"an issuer prefix without a subject", "jwt:https://issuer*", "jwt:https://issuer.evil.example#sub", false, true},
		{"an issuer prefix with a subject", "jwt:https://issuer*#sub", "jwt:https://issuer.evil.example#sub", false, true},
		{"any issuer's subject", "jwt:*#alice", "jwt:https://evil.example#alice", false, true},
		{"a JWT pattern is no ARN", "jwt:https://idp#*", role + "Approvers/x", false, false},
		// Case counts, as it always has.
		{"a role in another case", role + "Approvers/*", role + "approvers/x", false, false},
		{"a session in another case", role + "Approvers/Alice", role + "Approvers/alice", false, false},
		{"a subject in another case", "jwt:https://idp#Alice", "jwt:https://idp#alice", false, false},
		// Other shapes match exactly; nothing matches auth off.
		{"the local person", "local:person", "local:person", true, false},
		{"an opaque principal", "arn:approver", "arn:approver", true, false},
		{"a '*' in another shape is a character", "local:*", "local:person", false, true},
		{"'*' alone is nobody", "*", "jwt:https://idp#alice", false, true},
		{"auth off", role + "Approvers/*", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Approvers: []string{tc.pattern}, TrustedClients: []string{tc.pattern}}
			if got := p.IsApprover(tc.principal); got != tc.want {
				t.Errorf("IsApprover(%q) under %q = %v; want %v (hostile: %v)", tc.principal, tc.pattern, got, tc.want, tc.hostile)
			}
			if got := p.TrustsClient(tc.principal); got != tc.want {
				t.Errorf("TrustsClient(%q) under %q = %v; want %v", tc.principal, tc.pattern, got, tc.want)
			}
		})
	}
}

// TestParseApproversRefuses: a pattern whose '*' would let someone other
// than the deployment decide who matches is refused when it is configured,
// with a message saying why. Every one of these was accepted before.
func TestParseApproversRefuses(t *testing.T) {
	const role = "arn:aws:sts::123456789012:assumed-role/"
	for _, tc := range []struct{ pattern, wantIn string }{
		{role + "*/alice@example.com", "session name is chosen by whoever assumes the role"},
		{role + "Approv*/alice", "session name is chosen by whoever assumes the role"},
		{role + "*/alice-*", "session name is chosen by whoever assumes the role"},
		{role + "Approvers*", "assumed-role/<role>/<session>"},
		{role + "Approvers", "assumed-role/<role>/<session>"},
		{role + "Approvers/x/y", "assumed-role/<role>/<session>"},
		{"arn:aws:sts::*:assumed-role/Approvers/*", "account"},
		{"arn:aws:sts::1234*:assumed-role/Approvers/*", "account"},
		{"arn:aws:sts::123456789012:*", "resource type"},
		{"arn:aws:sts::123456789012:*/Approvers/*", "resource type"},
		{"arn:*:sts::123456789012:assumed-role/Approvers/*", "partition"},
		{"arn:aws:*::123456789012:role/ops", "service"},
		{"arn:aws:iam:*:123456789012:role/ops", "region"},
		{"arn:aws:*:assumed-role/Approvers/*", "not an ARN"},
		{"arn:aws:iam::123456789012", "not an ARN"},
		{"arn:aws:iam::123456789012:", "not an ARN"},
		{"jwt:https://issuer*#sub", "issuer"},
		{"https://issuer*#sub", "issuer"},
		{"jwt:*#alice", "issuer"},
		{"jwt:#alice", "jwt:<issuer>#<subject>"},
		{"jwt:https://idp#", "jwt:<issuer>#<subject>"},
	} {
		t.Run(tc.pattern, func(t *testing.T) {
			_, err := ParseApprovers("jwt:https://idp#alice, " + tc.pattern)
			if err == nil || !strings.Contains(err.Error(), tc.wantIn) || !strings.Contains(err.Error(), tc.pattern) {
				t.Errorf("ParseApprovers(%q) = %v; want an error naming it and saying %q", tc.pattern, err, tc.wantIn)
			}
		})
	}
	for _, good := range []string{
		role + "Approvers/*", role + "Approvers-*/*", role + "*/*", role + "Approvers/alice-*",
		role + "AWSReservedSSO_Admin_0123/alice@example.com", "arn:aws:iam::123456789012:user/division/*",
		"arn:aws:iam::123456789012:root", "jwt:https://idp.example#agent-*", "https://idp.example#*",
	} {
		if _, err := ParseApprovers(good); err != nil {
			t.Errorf("ParseApprovers(%q): %v", good, err)
		}
	}
}

// TestOwnersAreNoPatterns: a namespace's owners are the principals that
// published in it, recorded whole; a '*' in one (a subject may hold any
// character) is that principal's character, never a wildcard.
func TestOwnersAreNoPatterns(t *testing.T) {
	p := Policy{Approvers: []string{"arn:aws:iam::1:role/ops-*"}}
	d := Decider{Principal: "jwt:https://idp#bob", Channel: execution.ChannelPage}
	if p.MayPublish(d, "jwt:https://idp#agent-7", []string{"jwt:https://idp#*"}) {
		t.Error("an owner recorded as jwt:https://idp#* made bob an owner")
	}
	if !p.MayPublish(Decider{Principal: "jwt:https://idp#*", Channel: execution.ChannelPage}, "jwt:https://idp#agent-7", []string{"jwt:https://idp#*"}) {
		t.Error("the owner itself")
	}
}

// TestGrantIsItsOwnAction: a deployment may let a person approve one call
// but not a loop of them; the grant is asked of the set apart.
func TestGrantIsItsOwnAction(t *testing.T) {
	const owner, ops = "jwt:https://idp#agent-7", "jwt:https://idp#ops"
	set, err := policy.Parse("one-at-a-time.cedar", []byte(`
@id("ops-approve-one")
permit (principal, action == PML::Action::"approve", resource)
when { principal.kind == "jwt" && principal.subject == "ops" && principal != resource.owner };
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Policy{Rules: set, Custom: true}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	d := Decider{Principal: ops, Channel: execution.ChannelPage}
	if !p.MayApprove(d, owner) {
		t.Fatal("the set permits ops to approve one call; MayApprove said no")
	}
	if p.MayGrant(d, owner) {
		t.Fatal("the set permits no grant; MayGrant said yes")
	}
}
