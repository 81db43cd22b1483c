package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/execution"
)

// TestForwardedQuestionKeepsTheServersOrder: a remote server's question
// reaches our client's user with its fields in the order the server wrote
// them (a form reads top to bottom), not sorted by name.
func TestForwardedQuestionKeepsTheServersOrder(t *testing.T) {
	q := `{"message": "Who are you?", "requestedSchema": {"type": "object", "properties": ` +
		`{"zeta": {"type": "string", "title": "Name"}, "alpha": {"type": "string", "format": "email"}, "mid": {"type": "integer"}}, "required": ["zeta"]}}`
	p := execution.Pending{CallID: 3, Server: "crm", Tool: "signup", Questions: map[string]json.RawMessage{"who": json.RawMessage(q)}}
	b := server.NewInputRequestBuilder("")
	forwardQuestions(b, p)
	raw, err := json.Marshal(b.ToolResult())
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	z, a, m := strings.Index(s, `"zeta"`), strings.Index(s, `"alpha"`), strings.Index(s, `"mid"`)
	if z < 0 || !(z < a && a < m) {
		t.Fatalf("fields out of the server's order (zeta, alpha, mid): %s", s)
	}
	if !strings.Contains(s, `The MCP server \"crm\" asks`) {
		t.Fatalf("the message does not say who asks: %s", s)
	}
}
