package mcp

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// TestToolSetLogsEveryDropOnce: every tool a server lists that scripts
// will not see is logged with the reason, once however often the list is
// refreshed; a denied tool stays known, so a call to it is FORBIDDEN.
func TestToolSetLogsEveryDropOnce(t *testing.T) {
	tools := []wireTool{{Name: "ok"}, {Name: "then"}, {Name: "toJSON"}, {Name: "a:b"}, {Name: "ok"}, {Name: "delete_all"}, {Name: "drop_table"}, {Name: "read"}}
	tests := []struct {
		name        string
		cfg         Config
		visible     []string
		denied      []string
		reasons     map[string]string // full name → part of the reason logged
		notReported []string
	}{
		{
			name:    "names",
			cfg:     Config{Config: toolsource.Config{Name: "s"}},
			visible: []string{"delete_all", "drop_table", "ok", "read"},
			reasons: map[string]string{"s:then": "reserved", "s:toJSON": "reserved", "s:a:b": "':'", "s:ok": "twice"},
		},
		{
			name:    "deny list with a partial glob",
			cfg:     Config{Config: toolsource.Config{Name: "s", Deny: []string{"d*_*"}}},
			visible: []string{"ok", "read"},
			denied:  []string{"delete_all", "drop_table"},
			reasons: map[string]string{"s:delete_all": `"d*_*" in the server's deny list`, "s:drop_table": "deny list"},
		},
		{
			name:        "allow list",
			cfg:         Config{Config: toolsource.Config{Name: "s", Allow: []string{"re*", "ok"}}},
			visible:     []string{"ok", "read"},
			denied:      []string{"delete_all", "drop_table"},
			reasons:     map[string]string{"s:delete_all": "not in the server's allow list"},
			notReported: []string{"s:read"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			p := listed(t, tt.cfg, log, tools, 2) // loaded, then refreshed
			visible, _ := visibleTools(t, p)
			if !slices.Equal(visible, tt.visible) {
				t.Errorf("visible %q, want %q", visible, tt.visible)
			}
			for _, d := range tt.denied {
				if _, err := call(t, p, "s", d, `{}`, CallOptions{AllowDestructive: true}); codeOf(err) != fault.Forbidden {
					t.Errorf("%s: want it known and denied, got %v", d, err)
				}
			}
			seen := map[string]int{}
			for line := range strings.Lines(logs.String()) {
				var rec struct{ Msg, Tool, Reason string }
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatal(err)
				}
				seen[rec.Tool]++
				if want, ok := tt.reasons[rec.Tool]; ok && !strings.Contains(rec.Reason, want) {
					t.Errorf("%s dropped for %q; want a reason naming %s", rec.Tool, rec.Reason, want)
				}
			}
			for tool := range tt.reasons {
				if seen[tool] != 1 {
					t.Errorf("%s logged %d times, want once:\n%s", tool, seen[tool], logs.String())
				}
			}
			for _, tool := range tt.notReported {
				if seen[tool] != 0 {
					t.Errorf("%s logged, though it is listed", tool)
				}
			}
		})
	}
}
