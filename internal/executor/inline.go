package executor

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/elicit"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// Questions answered in line. Where the execution cannot wait for an
// answer (it may not suspend, or it is a capability's run inside
// another) and the service has an answerer — the front end's caller is
// the person at the keyboard, pml run — a remote server's question
// (2026-07-28 input_required) is put to that person at once, and the call
// is sent again with the answers, completed with the form's defaults, and
// the server's requestState, as a resumed one is. A decline or a cancel
// fails the call REJECTED, as it does from a suspension. The answer is
// the caller's own (execution.ChannelCaller): approval.Policy.MayAnswer
// decides whether that is anybody's to give.

// maxInlineRounds bounds the questions one call may ask in a row, each
// answered, before it answers.
const maxInlineRounds = 16

// answersInLine reports whether this execution's questions are put to the
// service's answerer: it cannot park them, and the policy lets its caller
// answer.
func (h *toolHost) answersInLine() bool {
	if h.service.asker == nil {
		return false
	}
	if h.req.Approval == execution.ApprovalSuspend && h.req.Parent == nil {
		// It can wait: the question parks like an approval.
		return false
	}
	caller := approval.Decider{Principal: h.req.Principal, Channel: execution.ChannelCaller}
	return h.service.policy.MayAnswer(caller, h.req.Principal)
}

// answerInLine asks q of the answerer, one request at a time in the
// order of their keys, and sends the call again with the answers, until
// the server answers or stops asking.
func (h *toolHost) answerInLine(ctx context.Context, e entry, c guest.Call, opts execution.CallOptions, q *execution.Question) (json.RawMessage, error) {
	full := c.Server + ":" + c.Tool
	opts.Lineage = h.req.CallLineage(c.ID, true)
	for range maxInlineRounds {
		answers := make(map[string]json.RawMessage, len(q.Requests))
		for _, k := range slices.Sorted(maps.Keys(q.Requests)) {
			r, err := h.service.asker.Answer(ctx, elicit.Question{Server: c.Server, Tool: c.Tool, Params: q.Requests[k]})
			switch {
			case err != nil && ctx.Err() != nil:
				return nil, fault.Wrap(fault.Timeout, context.Cause(ctx), "waiting for an answer to the server's question").WithTool(full)
			case errors.Is(err, elicit.ErrURLMode):
				return nil, fault.Wrap(fault.ToolError, err, "").WithTool(full)
			case err != nil:
				return nil, fault.Wrap(fault.InvalidRequest, err, "").WithTool(full)
			case r.Action == elicit.Decline:
				return nil, fault.New(fault.Rejected, "the server's question was declined").WithTool(full)
			case r.Action == elicit.Cancel:
				return nil, fault.New(fault.Rejected, "the server's question was cancelled").WithTool(full)
			}
			raw, err := json.Marshal(r)
			if err != nil {
				return nil, fault.Wrap(fault.Internal, err, "").WithTool(full)
			}
			answers[k] = raw
		}
		opts.Retry = &execution.Retry{InputResponses: answers, RequestState: q.RequestState}
		out, err := h.send(ctx, e, c, opts)
		next, asked := isQuestion(err)
		if !asked {
			return out, err
		}
		q = next
	}
	return nil, fault.New(fault.ToolError, "%s asked %d questions in a row, each answered, without answering", full, maxInlineRounds).WithTool(full)
}
