package catalog

import (
	"strings"
	"testing"
)

// TestRefusal: the allow and deny rule every source applies — deny guards,
// so "delete_*" hides "Delete_all"; allow grants, so "get_*" does not
// admit "GET_all".
func TestRefusal(t *testing.T) {
	for _, tc := range []struct {
		name         string
		allow, deny  []string
		tool, wantIn string
	}{
		{name: "no lists", tool: "anything"},
		{name: "denied", deny: []string{"delete_*"}, tool: "delete_all", wantIn: `matches "delete_*" in the server's deny list`},
		{name: "denied in another case", deny: []string{"delete_*"}, tool: "Delete_all", wantIn: "deny list"},
		{name: "deny wins over allow", allow: []string{"*"}, deny: []string{"drop"}, tool: "DROP", wantIn: "deny list"},
		{name: "allowed", allow: []string{"get_*"}, tool: "get_pet"},
		{name: "allow as spelled only", allow: []string{"get_*"}, tool: "GET_pet", wantIn: "not in the server's allow list"},
		{name: "not allowed", allow: []string{"get_*"}, tool: "put_pet", wantIn: "not in the server's allow list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Refusal(tc.allow, tc.deny, tc.tool)
			if (tc.wantIn == "") != (got == "") || (tc.wantIn != "" && !strings.Contains(got, tc.wantIn)) {
				t.Errorf("Refusal(%v, %v, %q) = %q, want %q", tc.allow, tc.deny, tc.tool, got, tc.wantIn)
			}
		})
	}
	if !MatchAnyToolGlob([]string{"x", "delete_*"}, "DELETE_repo") || MatchAnyGlob([]string{"delete_*"}, "DELETE_repo") {
		t.Error("guarding globs must match in any case, granting ones as spelled")
	}
}
