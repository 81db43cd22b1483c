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
	const owner, agent, ops, other = "jwt:https://idp#agent-7", "jwt:https://idp#agent-7", "arn:aws:iam::1:role/ops-alice", "jwt:https://idp#mallory"
	deployed := Policy{Approvers: []string{"arn:aws:iam::1:role/ops-*"}}
	local := Policy{CallerDecides: true}
	tests := []struct {
		name      string
		p         Policy
		principal string
		approve   bool
		decide    bool
		consent   bool
		access    bool
	}{
		{"deployed: the agent may reject its own", deployed, agent, false, true, false, true},
		{"deployed: the agent may not approve its own", deployed, agent, true, false, false, true},
		{"deployed: an approver approves another's", deployed, ops, true, true, true, true},
		{"deployed: a stranger may not even reject", deployed, other, false, false, false, false},
		{"deployed: auth off is nobody", deployed, "", true, false, false, false},
		{"local: the caller approves its own", local, owner, true, true, true, true},
		{"local: a stranger still may not", local, other, true, false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.MayDecide(tc.principal, owner, tc.approve); got != tc.decide {
				t.Errorf("MayDecide = %v", got)
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
