package mcpserver

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/execution"
)

// A remote server's questions, put to our client's user. A call parked on
// the question its remote MCP server asked (execution.PendingQuestion) is
// put to the user as the server asked it: each of its elicitations is
// forwarded with its own schema, under the key "call-N/KEY" (N the call,
// KEY the server's), its message prefixed with who asks, so the user knows
// the question is the remote server's and not this server's. The answers
// come back with the same requestState as approvals do (approval.State
// names the calls), and resume the execution as the answer
// (execution.DecisionAnswer) to the server's question, weighed by
// approval.Policy.MayAnswer; the remote server's own state never leaves the
// suspended execution.

// questionID is the key of one of a remote server's questions about call.
func questionID(callID int, key string) string { return elicitID(callID) + "/" + key }

// forwardQuestions adds p's remote questions to b, unchanged but for who
// asks.
func forwardQuestions(b *server.InputRequestBuilder, p execution.Pending) {
	for _, key := range slices.Sorted(maps.Keys(p.Questions)) {
		var params mcp.ElicitationParams
		var schema struct {
			RequestedSchema json.RawMessage `json:"requestedSchema"`
		}
		if err := json.Unmarshal(p.Questions[key], &params); err != nil || json.Unmarshal(p.Questions[key], &schema) != nil {
			continue // the executor kept only readable questions
		}
		if len(schema.RequestedSchema) > 0 {
			// As the server wrote it: decoded into a map, its fields
			// would reach the person sorted by name.
			params.RequestedSchema = schema.RequestedSchema
		}
		params.Message = "The MCP server " + strconv.Quote(p.Server) + " asks, before it answers a script's call to " +
			p.Server + "." + p.Tool + " (call #" + strconv.Itoa(p.CallID) + "): " + params.Message
		b.Elicit(questionID(p.CallID, key), params)
	}
}

// answersOf reads the user's answers to call's remote questions: an
// answer decision with one elicitation result per question (the executor
// checks they are all there, and rejects the call on a decline or cancel).
func answersOf(responses mcp.InputResponses, callID int) (execution.Decision, bool) {
	prefix := elicitID(callID) + "/"
	answers := map[string]json.RawMessage{}
	for id := range responses {
		key, ok := strings.CutPrefix(id, prefix)
		if !ok {
			continue
		}
		res := server.ElicitationResponse(responses, id)
		if res == nil {
			continue
		}
		raw, err := json.Marshal(res.ElicitationResponse)
		if err != nil {
			continue
		}
		answers[key] = raw
	}
	if len(answers) == 0 {
		return execution.Decision{}, false
	}
	return execution.Decision{Approve: true, Answers: answers}, true
}

// questionsJSON is a call's remote questions as JSON, for a model to read.
func questionsJSON(q map[string]json.RawMessage) string {
	b, err := json.Marshal(q)
	if err != nil {
		return "(unreadable)"
	}
	return string(b)
}
