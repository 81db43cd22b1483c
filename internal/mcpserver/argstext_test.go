package mcpserver

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/execution"
)

// routineNote is the decoy of the hostile review: a reassuring value long
// enough to push what follows it out of a question cut as one string.
var routineNote = "Routine cleanup of stale cache entries. Dry-run verified. No user data is touched." + strings.Repeat(" ", 520)

// TestQuestionsShowEveryKey: whatever comes first in a call's arguments, a
// text that asks about the call — the elicitation's question, the
// suspended document's text for a model — shows every key, each value cut
// on its own and saying how much was cut, or says plainly that it shows no
// arguments; never a prefix that hides a key.
func TestQuestionsShowEveryKey(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	many := map[string]any{}
	for i := range 30 {
		many[fmt.Sprintf("k%02d", i)] = long(200)
	}
	manyArgs, _ := json.Marshal(many)
	var manyKeys []string
	for k := range many {
		manyKeys = append(manyKeys, `"`+k+`"`)
	}
	tests := []struct {
		name string
		args string
		keys []string // each visible in every text about the call
		cut  string   // the question's marker of what was cut
	}{
		{"a long note before the key", mustJSON(t, map[string]any{"note": routineNote, "key": "production_customers"}),
			[]string{`"note"`, `"key"`, `"production_customers"`}, fmt.Sprintf("of %d bytes cut]", len(routineNote))},
		{"the key in a nested object", `{"opts":{"why":"` + long(3000) + `","table":"customers"},"dry_run":false}`,
			[]string{`"opts"`, `"table"`, `"customers"`, `"dry_run":false`}, "of 3000 bytes cut]"},
		{"an array whose first element is long", `{"keys":["` + long(2000) + `","production_customers"]}`,
			[]string{`"keys"`, `"production_customers"`}, "of 2000 bytes cut]"},
		{"a long key", `{"` + long(1000) + `":1,"key":"production_customers"}`, []string{`"key"`, `"production_customers"`}, "of 1000 bytes cut]"},
		{"thirty long values", string(manyArgs), manyKeys, "of 200 bytes cut]"},
		{"a long scalar", `"` + long(5000) + `"`, nil, "of 5000 bytes cut]"},
		{"small", `{"key":"k"}`, []string{`{"key":"k"}`}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := execution.Pending{CallID: 2, Server: "demo", Tool: "kv_delete", Args: json.RawMessage(tc.args), Reason: execution.PendingApproval}
			resp := &execution.Response{ExecutionID: "ex_1", Status: execution.StatusSuspended, Pending: []execution.Pending{p},
				ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
			q := question(p, resp)
			for _, w := range append(tc.keys, tc.cut) {
				if !strings.Contains(q, w) {
					t.Errorf("the question lacks %s:\n%.1500s", w, q)
				}
			}
			if !utf8.ValidString(q) {
				t.Errorf("the question splits a character")
			}
			for _, budget := range []int{0, 3000, DefaultTextBytes} {
				text := modelText(resp, budget, false)
				if strings.Contains(text, "(no arguments shown") || strings.Contains(text, "bytes of the pending calls cut") {
					continue // said plainly
				}
				for _, w := range tc.keys {
					if !strings.Contains(text, w) {
						t.Errorf("budget %d: the model's text lacks %s and does not say it shows no arguments:\n%.1500s", budget, w, text)
					}
				}
			}
			if text := modelText(resp, DefaultTextBytes, false); strings.Contains(text, "(no arguments shown") {
				t.Errorf("at the default budget the model's text shows no arguments:\n%.1500s", text)
			}
		})
	}
}

// TestQuestionsEscapeDirectionControls: a value cannot reorder what the
// person reads (a right-to-left override turning "kv_delete" around, or
// hiding the key behind the value).
func TestQuestionsEscapeDirectionControls(t *testing.T) {
	p := execution.Pending{CallID: 2, Server: "demo", Tool: "kv_delete", Reason: execution.PendingApproval,
		Args: json.RawMessage("{\"note\":\"ok \u202e sremotsuc \u2066x\u2069\",\"key\":\"k\"}")}
	q := question(p, &execution.Response{ExecutionID: "ex_1"})
	if strings.ContainsAny(q, "\u202e\u2066\u2069") || !strings.Contains(q, `\u202e`) {
		t.Fatalf("direction controls reach the person: %q", q)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
