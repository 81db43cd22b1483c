package execution

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeResume(t *testing.T) {
	tests := []struct {
		name, body, pathID string
		want               ResumeRequest
		err                string
	}{
		{name: "path id", body: `{"decisions": {"2": "approve", "3": "reject"}}`, pathID: "ex_1",
			want: ResumeRequest{ExecutionID: "ex_1", Decisions: map[string]Decision{"2": {Approve: true}, "3": {}}}},
		{name: "reason and call detail", body: `{"decisions": {"3": {"decision": "reject", "reason": "no"}}, "call_detail": "summary"}`, pathID: "ex_1",
			want: ResumeRequest{ExecutionID: "ex_1", Decisions: map[string]Decision{"3": {Reason: "no"}}, CallDetail: "summary"}},
		{name: "body id", body: `{"execution_id": "ex_2", "decisions": {"2": "approve"}}`,
			want: ResumeRequest{ExecutionID: "ex_2", Decisions: map[string]Decision{"2": {Approve: true}}}},
		{name: "both ids", body: `{"execution_id": "ex_2", "decisions": {"2": "approve"}}`, pathID: "ex_1", err: "in the path"},
		{name: "no id", body: `{"decisions": {"2": "approve"}}`, err: "execution_id is missing"},
		{name: "empty id", body: `{"execution_id": " ", "decisions": {"2": "approve"}}`, err: "execution_id is missing"},
		{name: "empty decisions", body: `{"decisions": {}}`, pathID: "ex_1", err: "decisions is missing"},
		{name: "bad decision word", body: `{"decisions": {"2": "yes"}}`, pathID: "ex_1", err: `"yes"`},
		{name: "bad decision object", body: `{"decisions": {"2": {"decision": "approve", "why": "x"}}}`, pathID: "ex_1", err: "unknown field"},
		{name: "host-only field", body: `{"decisions": {"2": "approve"}, "principal": "arn:aws:iam::1:root"}`, pathID: "ex_1", err: "unknown field"},
		{name: "a field in another case", body: `{"DECISIONS": {"2": "approve"}}`, pathID: "ex_1", err: `field names are exact: "decisions"`},
		{name: "a repeated decision", body: `{"decisions": {"2": "reject", "2": "approve"}}`, pathID: "ex_1", err: "duplicate"},
		{name: "a decision object in another case", body: `{"decisions": {"2": {"DECISION": "approve"}}}`, pathID: "ex_1", err: "unknown field"},
		{name: "a reason too long", body: `{"decisions": {"2": {"decision": "reject", "reason": "` + strings.Repeat("x", MaxReasonBytes+1) + `"}}}`, pathID: "ex_1", err: "at most"},
		{name: "a bad call id", body: `{"decisions": {"two": "approve"}}`, pathID: "ex_1", err: "keyed by call id"},
		{name: "a bad call detail", body: `{"decisions": {"2": "approve"}, "call_detail": "all"}`, pathID: "ex_1", err: "call_detail"},
		{name: "not an object", body: `[]`, pathID: "ex_1", err: "is not a resume request"},
		{name: "a grant", body: `{"decisions": {"2": {"decision": "approve", "scope": "site", "count": 20, "pin": ["owner"]}}}`, pathID: "ex_1",
			want: ResumeRequest{ExecutionID: "ex_1", Decisions: map[string]Decision{"2": {Approve: true, Site: &SiteScope{Count: 20, Pin: []string{"owner"}}}}}},
		{name: "scope call", body: `{"decisions": {"2": {"decision": "approve", "scope": "call"}}}`, pathID: "ex_1",
			want: ResumeRequest{ExecutionID: "ex_1", Decisions: map[string]Decision{"2": {Approve: true}}}},
		{name: "every pending call", body: `{"decisions": {"*": "approve", "3": {"decision": "reject", "reason": "no"}}}`, pathID: "ex_1",
			want: ResumeRequest{ExecutionID: "ex_1", Decisions: map[string]Decision{"*": {Approve: true}, "3": {Reason: "no"}}}},
		{name: "a grant over every call", body: `{"decisions": {"*": {"decision": "approve", "scope": "site", "count": 2}}}`, pathID: "ex_1", err: "grants nothing"},
		{name: "a grant without a count", body: `{"decisions": {"2": {"decision": "approve", "scope": "site"}}}`, pathID: "ex_1", err: "needs \"count\""},
		{name: "a grant of no call", body: `{"decisions": {"2": {"decision": "approve", "scope": "site", "count": 0}}}`, pathID: "ex_1", err: "at least 1"},
		{name: "a rejecting grant", body: `{"decisions": {"2": {"decision": "reject", "scope": "site", "count": 2}}}`, pathID: "ex_1", err: "goes with"},
		{name: "a count without a scope", body: `{"decisions": {"2": {"decision": "approve", "count": 2}}}`, pathID: "ex_1", err: "go with"},
		{name: "scope all in a decision", body: `{"decisions": {"2": {"decision": "approve", "scope": "all"}}}`, pathID: "ex_1", err: `with the key "*"`},
		{name: "too many pins", body: `{"decisions": {"2": {"decision": "approve", "scope": "site", "count": 2, "pin": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}}}`, pathID: "ex_1", err: "at most 16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ferr := DecodeResume([]byte(tc.body), tc.pathID)
			if !decoded(t, ferr, tc.err) {
				return
			}
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(tc.want)
			if string(a) != string(b) {
				t.Fatalf("got %s, want %s", a, b)
			}
		})
	}
}
