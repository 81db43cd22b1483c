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
		})
	}
}
