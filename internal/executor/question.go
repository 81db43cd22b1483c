package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// Remote servers' questions. A remote MCP server may answer a call with a
// question for its client's user (2026-07-28 input_required, elicitation
// requests; the source returns *execution.Question). In an execution that
// may suspend, the call parks as one waiting for approval does
// (guest.Asked): the execution suspends, and its document, the MCP front's
// questions and the approvals notice carry what the server asked
// (Pending.Questions), unchanged. An answer (execution.DecisionAnswer,
// weighed by approval.Policy.MayAnswer) resumes it in any process: the call
// is sent again with the answers and the server's requestState, which is
// kept in the suspension (ParkedCall.Question, stored with the image and,
// like it, never shown) and never reaches the script or the caller. A
// decline or a cancel, or a reject, fails the call with REJECTED.

// questionRecord is what the executor keeps of a question with the parked
// call (guest.ParkedCall.Question).
type questionRecord struct {
	// Requests are the server's elicitation params, by its keys.
	Requests map[string]json.RawMessage `json:"requests"`
	// State is the server's requestState, echoed on the retry.
	State string `json:"state,omitempty"`
}

func readQuestion(raw json.RawMessage) (*questionRecord, error) {
	var q questionRecord
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, fmt.Errorf("reading the parked call's question: %w", err)
	}
	return &q, nil
}

// asked turns a source's question into what the engine parks, when the
// execution can wait for an answer; otherwise into the refusal the script
// sees.
func (h *toolHost) parkQuestion(full string, q *execution.Question) error {
	what := questionText(q.Requests)
	switch {
	case h.req.Approval == execution.ApprovalSuspend && h.req.Parent != nil:
		// As a call needing approval: the run that would suspend is a
		// child of another, maybe in another process.
		return fault.New(fault.Forbidden, "%s asked a question before it would answer (%s), and a question inside a capability cannot be put to anyone: "+
			"call the tool from the script itself", full, what).WithTool(full)
	case h.req.Approval != execution.ApprovalSuspend:
		return fault.New(fault.Forbidden, "%s asked a question before it would answer (%s): "+
			`only an execution that may wait can ask it of a person (approval "suspend")`, full, what).WithTool(full)
	}
	raw, err := json.Marshal(questionRecord{Requests: q.Requests, State: q.RequestState})
	if err != nil {
		return fault.Wrap(fault.Internal, err, "keeping the server's question").WithTool(full)
	}
	return &guest.Asked{Question: raw}
}

// retryOf is the Retry of a call sent again after its question was
// answered (the engine hands back the record and the answers).
func retryOf(c guest.Call) (*execution.Retry, error) {
	if len(c.Question) == 0 {
		return nil, nil
	}
	q, err := readQuestion(c.Question)
	if err != nil {
		return nil, err
	}
	var answers map[string]json.RawMessage
	if err := json.Unmarshal(c.Answer, &answers); err != nil {
		return nil, fmt.Errorf("reading the answers: %w", err)
	}
	return &execution.Retry{InputResponses: answers, RequestState: q.State}, nil
}

// questionText is what the server asked, for messages: its questions'
// messages.
func questionText(requests map[string]json.RawMessage) string {
	var msgs []string
	for _, k := range slices.Sorted(maps.Keys(requests)) {
		var p struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(requests[k], &p)
		msgs = append(msgs, fmt.Sprintf("%q", p.Message))
	}
	return strings.Join(msgs, "; ")
}

// answerResult is one elicitation result in an answer.
type answerResult struct {
	Action  string         `json:"action"`
	Content map[string]any `json:"content,omitempty"`
}

// engineDecisions turns decisions into the engine's: an answer to a
// question carries its answers, completed with the server's defaults
// (SEP-1034: a field the person left out takes the default the question
// named), unless one of them declines or cancels, which rejects the call.
// checkAnswers has vetted them.
func engineDecisions(decisions map[int]execution.Decision, parked []guest.ParkedCall) (map[int]guest.Decision, error) {
	byID := map[int]guest.ParkedCall{}
	for _, p := range parked {
		byID[p.CallID] = p
	}
	out := make(map[int]guest.Decision, len(decisions))
	for cid, d := range decisions {
		if d.Answers == nil {
			out[cid] = guest.Decision{Approve: d.Approve, Reason: d.Reason}
			continue
		}
		q, err := readQuestion(byID[cid].Question)
		if err != nil {
			return nil, err
		}
		answers := map[string]answerResult{}
		reject := ""
		for _, k := range slices.Sorted(maps.Keys(d.Answers)) {
			var a answerResult
			if err := json.Unmarshal(d.Answers[k], &a); err != nil {
				return nil, err
			}
			switch a.Action {
			case "decline":
				reject = "the server's question was declined"
			case "cancel":
				reject = "the server's question was cancelled"
			}
			a.Content = elicit.WithDefaults(a.Content, q.Requests[k])
			answers[k] = a
		}
		if reject != "" {
			out[cid] = guest.Decision{Reason: reject}
			continue
		}
		raw, err := json.Marshal(answers)
		if err != nil {
			return nil, err
		}
		out[cid] = guest.Decision{Approve: true, Answer: raw}
	}
	return out, nil
}

// checkAnswers refuses decisions that do not fit the calls they decide: an
// answer to a call that asked nothing, an approval of one that asked (it
// is answered, or rejected), answers that do not answer each question
// once, with accept, decline or cancel.
func checkAnswers(decisions map[int]execution.Decision, parked []guest.ParkedCall) *fault.Error {
	for _, p := range parked {
		d, ok := decisions[p.CallID]
		if !ok {
			continue
		}
		if len(p.Question) == 0 {
			if d.Answers != nil {
				return fault.New(fault.InvalidRequest, "call %d waits for approval, not for an answer: approve or reject it", p.CallID)
			}
			continue
		}
		if !d.Approve {
			continue
		}
		q, err := readQuestion(p.Question)
		if err != nil {
			return fault.Wrap(fault.Internal, err, "")
		}
		if d.Answers == nil {
			return fault.New(fault.InvalidRequest, "call %d waits for an answer to %s's question (%s), not for approval: "+
				`answer it ({"decision": "answer", "answers": {…}}) or reject it`, p.CallID, p.Server, questionText(q.Requests))
		}
		want := slices.Sorted(maps.Keys(q.Requests))
		if got := slices.Sorted(maps.Keys(d.Answers)); !slices.Equal(got, want) {
			return fault.New(fault.InvalidRequest, "call %d's answers are keyed %s; the server asked %s", p.CallID, strings.Join(got, ", "), strings.Join(want, ", "))
		}
		for _, k := range want {
			var a answerResult
			if err := json.Unmarshal(d.Answers[k], &a); err != nil {
				return fault.New(fault.InvalidRequest, `call %d's answer %q is not {"action": "accept", "content": {…}}: %v`, p.CallID, k, err)
			}
			switch a.Action {
			case "accept", "decline", "cancel":
			default:
				return fault.New(fault.InvalidRequest, `call %d's answer %q: action is "accept", "decline" or "cancel", not %q`, p.CallID, k, a.Action)
			}
		}
	}
	return nil
}

// decisionKinds says what decisions ask of the policy: whether any
// approves a call waiting for approval, answers a question, or rejects.
func decisionKinds(decisions map[int]execution.Decision) (approve, answer, reject bool) {
	for _, d := range decisions {
		switch {
		case d.Answers != nil:
			answer = true
		case d.Approve:
			approve = true
		default:
			reject = true
		}
	}
	return approve, answer, reject
}

// isQuestion reports whether err is a source's question.
func isQuestion(err error) (*execution.Question, bool) {
	var q *execution.Question
	ok := errors.As(err, &q)
	return q, ok
}
