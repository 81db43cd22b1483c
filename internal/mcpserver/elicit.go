package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Approvals that reach a person. When execute_code suspends and the
// client declared the elicitation capability, the pending calls are put to
// the client's user — not to the model that wrote the script — as one
// elicitation each: a 2026-07-28 client gets an input_required result and
// retries with the answers; an older client, where a session can carry the
// answer back to this request (pml serve), gets server-initiated
// elicitation/create requests, which mcp-go sends on the request's stream
// and answers by calling the handler again with the same answers. Either
// way the answers arrive with the requestState this server sealed: the
// execution, the version of its stored state, the principal asked and the
// calls asked about. The retry resumes that version of that execution, in
// whichever process or container receives it, as decisions of the client's
// user (execution.ChannelClient).

// maxQuestionArgs is what the arguments quoted in a question aim at: the
// user needs to recognise the call, not to read a document. Every key is
// shown whatever it takes (argsText), up to maxQuestionText.
const maxQuestionArgs = 600

// maxQuestionText bounds the arguments in a question: past it they are
// not shown, and the question says so.
const maxQuestionText = 8192

// decisionSchema is what an elicitation asks the user for about a call:
// approve or reject, and how far the decision reaches — this call, its
// call site for up to count calls (at most max: the deployment's bound),
// or every pending call.
func decisionSchema(max int) map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"decision": map[string]any{"type": "string", "title": "Decision", "enum": []string{execution.DecisionApprove, execution.DecisionReject},
				"description": "approve runs the call; reject makes it fail in the script with REJECTED"},
			"reason": map[string]any{"type": "string", "title": "Reason (optional)", "maxLength": execution.MaxReasonBytes,
				"description": "told to the script with a rejection, and kept in the trace"},
			"scope": map[string]any{"type": "string", "title": "Scope", "enum": []string{execution.ScopeCall, execution.ScopeSite, execution.ScopeAll},
				"enumNames": []string{"this call", "this call site, up to count calls", "every pending call"}, "default": execution.ScopeCall,
				"description": "call: this call alone; site: approve this call and the next calls made at the same place in the script " +
					"(same tool), up to count calls of this execution; all: the same decision for every call that waits now"},
			"count": map[string]any{"type": "integer", "title": "Calls (with scope site)", "minimum": 1, "maximum": max,
				"description": fmt.Sprintf("how many calls of this call site the approval covers, this one included (at most %d)", max)},
		},
		"required": []string{"decision"},
	}
}

// canAsk reports whether this request's suspended calls can be put to the
// client's user: in a form, where the deployment trusts the client's
// answer, else on the approval page (askMode).
func (s *Server) canAsk(ctx context.Context) bool { return s.askMode(ctx) != askNone }

func elicitID(callID int) string { return "call-" + strconv.Itoa(callID) }

// ask puts resp's pending calls to the client's user: an input_required
// result with one elicitation per call and the sealed state, in a form
// where the deployment trusts the client to show one to a person, else
// pointing them at the approval page (askPage). If the state cannot be
// sealed the document is answered instead, as to a client that cannot be
// asked.
func (s *Server) ask(ctx context.Context, resp *execution.Response, budget int) *mcp.CallToolResult {
	switch s.askMode(ctx) {
	case askPage:
		return s.askPage(ctx, resp, budget)
	case askNone, askDoc:
		return s.executionResult(resp, budget)
	}
	st := approval.State{ExecutionID: resp.ExecutionID, Version: resp.StateVersion, Principal: resp.Owner, Expires: resp.ExpiresAt.Unix()}
	b := server.NewInputRequestBuilder("")
	for _, p := range resp.Pending {
		st.Calls = append(st.Calls, p.CallID)
		if p.Reason == execution.PendingQuestion {
			forwardQuestions(b, p)
			continue
		}
		b.Elicit(elicitID(p.CallID), mcp.ElicitationParams{Message: question(p, resp), RequestedSchema: decisionSchema(maxGrantOf(resp))})
	}
	token, err := s.opts.StateKey.Seal(st)
	if err != nil {
		s.opts.Logger.Warn("cannot ask the client's user: answering the suspended document", "execution_id", resp.ExecutionID, "err", err)
		return s.executionResult(resp, budget)
	}
	return b.RequestState(token).ToolResult()
}

// maxGrantOf is the most calls a grant may cover in resp's execution.
func maxGrantOf(resp *execution.Response) int {
	if resp.Plan != nil && resp.Plan.MaxGrant > 0 {
		return resp.Plan.MaxGrant
	}
	return execution.DefaultMaxGrant
}

// question is what the user is asked about one pending call.
func question(p execution.Pending, resp *execution.Response) string {
	args := argsText(p.Args, maxQuestionArgs)
	if len(args) > maxQuestionText {
		args = briefArgs(p.Args)
	}
	if len(args) > maxQuestionText {
		args = fmt.Sprintf("arguments of %d bytes, too many keys to show here (reject the call unless you have read them in the execution's document)", len(p.Args))
	}
	return fmt.Sprintf("A script wants to call %s.%s with %s. This call needs your approval: nothing has run yet. "+
		"Approve it, or reject it (the script is told, with your reason). Execution %s, call #%d; it waits until %s.",
		p.Server, p.Tool, args, resp.ExecutionID, p.CallID, resp.ExpiresAt.UTC().Format(time.RFC3339))
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// answered handles the retry of a call that asked: it checks the sealed
// state, turns the user's answers into decisions, and resumes the
// execution as the user's decisions. The answer is the execution's
// document, or the next question when it suspends again (or nothing was
// answered), or a refusal when nothing ran.
func (s *Server) answered(ctx context.Context, r mcp.CallToolRequest, callDetail string, budget int) *mcp.CallToolResult {
	principal := execution.PrincipalFrom(ctx)
	if s.opts.StateKey == nil {
		return s.refusal("", fault.New(fault.InvalidRequest, "this server asks no questions: requestState is not one of its own"))
	}
	st, err := s.opts.StateKey.Open(r.Params.RequestState, time.Now())
	switch {
	case errors.Is(err, approval.ErrStateExpired):
		return s.refusal(st.ExecutionID, fault.New(fault.Expired, "the execution this answer is about has expired"))
	case err != nil:
		return s.refusal("", fault.New(fault.InvalidRequest, "requestState is not one this server issued, or was changed: %v", err))
	case st.ExecutionID == "":
		return s.refusal("", fault.New(fault.InvalidRequest, "this requestState is about a capability draft, not an execution: answer it through save_capability"))
	case st.Principal != principal:
		return s.refusal(st.ExecutionID, fault.New(fault.Forbidden, "this requestState was issued to another principal"))
	case st.Page:
		// The person was sent to the approval page: only what was
		// decided there counts, whatever the answers say.
		return s.afterPage(ctx, r, st, budget)
	}
	decisions := map[string]execution.Decision{}
	for _, id := range st.Calls {
		if res := server.ElicitationResponse(r.Params.InputResponses, elicitID(id)); res != nil {
			addAnswer(decisions, id, res)
		} else if d, ok := answersOf(r.Params.InputResponses, id); ok {
			decisions[strconv.Itoa(id)] = d
		}
	}
	if len(decisions) == 0 {
		// Nothing answered: ask again, if it still waits.
		waiting, ferr := s.opts.Service.Waiting(ctx, st.ExecutionID)
		if ferr != nil {
			return s.refusal(st.ExecutionID, ferr)
		}
		return s.ask(ctx, waiting, budget)
	}
	rr := execution.ResumeRequest{ExecutionID: st.ExecutionID, Decisions: decisions, CallDetail: callDetail, Principal: principal,
		TraceHeader: execution.TraceHeader(ctx, ""), Channel: execution.ChannelClient, Version: st.Version}
	if s.streams(ctx) {
		rr.OnEvent = newMCPProgress(ctx, r).event
	}
	resp, ferr := s.opts.Service.Resume(ctx, rr)
	if ferr != nil {
		return s.refusal(st.ExecutionID, ferr)
	}
	s.flush(ctx)
	if resp.Suspended() && s.canAsk(ctx) {
		return s.ask(ctx, resp, budget)
	}
	return s.executionResult(resp, budget)
}

// addAnswer adds to decisions what the answer res about call id decides:
// that call, or (scope all) every pending call no answer names on its own
// — the first such answer stands.
func addAnswer(decisions map[string]execution.Decision, id int, res *mcp.ElicitationResult) {
	d, all := decisionOf(res)
	key := strconv.Itoa(id)
	if all {
		if _, taken := decisions[execution.AllCalls]; taken {
			return
		}
		key = execution.AllCalls
	}
	decisions[key] = d
}

// decisionOf reads one answer: only an accepted form that says approve
// approves; a decision, a cancel, or anything unreadable rejects, and the
// script is told why. all reports that the answer decides every pending
// call (scope all); scope site with a count makes the approval a grant
// over the call's site (the executor bounds the count and asks the policy).
func decisionOf(res *mcp.ElicitationResult) (d execution.Decision, all bool) {
	switch res.Action {
	case mcp.ElicitationResponseActionDecline:
		return execution.Decision{Reason: "declined by the user"}, false
	case mcp.ElicitationResponseActionCancel:
		return execution.Decision{Reason: "the user cancelled the question"}, false
	case mcp.ElicitationResponseActionAccept:
	default:
		return execution.Decision{Reason: "the user's answer could not be read"}, false
	}
	var form struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
		Scope    string `json:"scope"`
		Count    *int   `json:"count"`
	}
	raw, err := json.Marshal(res.Content)
	if err != nil || json.Unmarshal(raw, &form) != nil {
		return execution.Decision{Reason: "the user's answer could not be read"}, false
	}
	reason := truncateUTF8(strings.TrimSpace(form.Reason), execution.MaxReasonBytes)
	all = form.Scope == execution.ScopeAll
	if form.Decision == execution.DecisionApprove {
		d = execution.Decision{Approve: true, Reason: reason}
		if form.Scope == execution.ScopeSite {
			count := 0
			if form.Count != nil {
				count = *form.Count
			}
			d.Site = &execution.SiteScope{Count: count}
		}
		return d, all
	}
	if reason == "" {
		reason = "rejected by the user"
	}
	return execution.Decision{Reason: reason}, all
}

// refusal is a refused resume for the model: nothing ran.
func (s *Server) refusal(id string, ferr *fault.Error) *mcp.CallToolResult {
	res := mcp.NewToolResultStructured(map[string]any{"ok": false, "error": ferr}, refusalText(id, ferr))
	res.IsError = true
	return res
}
