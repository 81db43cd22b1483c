package catalog

import (
	"testing"

	"github.com/pml-sandbox/pml/internal/trace"
)

// TestIsDestructiveFollowsTheSpec: MCP's defaults — readOnlyHint false,
// destructiveHint true, meaningful only when readOnlyHint is false — so a
// tool that says nothing is destructive; a capability is a program whose
// calls are each checked in its run, never destructive itself.
func TestIsDestructiveFollowsTheSpec(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name string
		tool Tool
		want bool
	}{
		{"no annotations", Tool{Kind: trace.KindMCP}, true},
		{"read-only", Tool{Annotations: Annotations{ReadOnly: &yes}}, false},
		{"read-only, and destructive said too", Tool{Annotations: Annotations{ReadOnly: &yes, Destructive: &yes}}, false},
		{"not read-only, nothing else said", Tool{Annotations: Annotations{ReadOnly: &no}}, true},
		{"not destructive", Tool{Annotations: Annotations{Destructive: &no}}, false},
		{"not read-only, not destructive", Tool{Annotations: Annotations{ReadOnly: &no, Destructive: &no}}, false},
		{"destructive", Tool{Annotations: Annotations{Destructive: &yes}}, true},
		{"only idempotent said", Tool{Annotations: Annotations{Idempotent: &yes}}, true},
		{"a capability", Tool{Kind: trace.KindCapability}, false},
	}
	for _, tc := range tests {
		if got := tc.tool.IsDestructive(); got != tc.want {
			t.Errorf("%s: IsDestructive() = %v, want %v", tc.name, got, tc.want)
		}
		if got := tc.tool.NeedsApproval(); got != tc.want {
			t.Errorf("%s: NeedsApproval() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMatchToolGlob: a tool glob that guards (require_approval, deny)
// matches without regard to case, so "delete_*" catches "Delete_all";
// MatchGlob, for principals and grants, stays exact.
func TestMatchToolGlob(t *testing.T) {
	tests := []struct {
		glob, name string
		fold       bool
	}{
		{"delete_*", "delete_all", true},
		{"delete_*", "Delete_all", true},
		{"delete_*", "DELETE_ALL", true},
		{"*_ALL", "drop_all", true},
		{"Straße", "STRASSE", false}, // simple folding, not full case mapping
		{"straße", "STRAßE", true},
		{"delete_*", "undelete_all", false},
		{"rm", "RM", true},
	}
	for _, tc := range tests {
		if got := MatchToolGlob(tc.glob, tc.name); got != tc.fold {
			t.Errorf("MatchToolGlob(%q, %q) = %v, want %v", tc.glob, tc.name, got, tc.fold)
		}
		if tc.glob != tc.name && MatchGlob(tc.glob, tc.name) && tc.glob != "delete_*" && tc.glob != "*_ALL" {
			t.Errorf("MatchGlob(%q, %q) matched across case", tc.glob, tc.name)
		}
	}
	if MatchGlob("delete_*", "Delete_all") {
		t.Error("MatchGlob is exact: principals and grants must not match across case")
	}
}
