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
