package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/capapi"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// Publishing through the client's user. A save_capability whose caller
// may not publish becomes a draft; where the policy would take the
// client's user's answer as the decision (approval.Policy.MayPublish
// with execution.ChannelClient: a client the deployment trusts, into a
// namespace that is the caller's or nobody's), the draft is put to that
// user exactly as a pending call is (elicit.go): a 2026-07-28 client
// gets an input_required result, an older one (with a session) an
// elicitation/create request, and the answer comes back with the
// requestState this server sealed, naming the draft and the principal.
// The answer is then weighed again as a decision through the client
// (capability.Guard.PublishDraft): if the policy changed meanwhile, or
// another owner took the namespace, the draft stays a draft.

// mcpSaveCapability serves save_capability: the agent's save, published
// where the policy lets it publish, else a draft; where the client's user
// may publish the draft (a client the deployment trusts, the namespace
// its own or nobody's), the user is asked (askPublish), and the
// retry with the answer publishes or rejects it.
func (s *Server) mcpSaveCapability(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if s.opts.Capabilities == nil {
		return mcp.NewToolResultError("this deployment has no capability registry"), nil
	}
	if r.Params.RequestState != "" || len(r.Params.InputResponses) > 0 {
		return s.answeredDraft(ctx, r), nil
	}
	raw, err := json.Marshal(r.GetArguments())
	if err != nil {
		return mcp.NewToolResultError("arguments are not JSON: " + err.Error()), nil
	}
	c, ferr := capapi.DecodeCapabilitySave(raw)
	if ferr != nil {
		return mcp.NewToolResultError(ferr.Error()), nil
	}
	d := capapi.CallerDecider(ctx)
	out, err := s.opts.Capabilities.Submit(ctx, d, d.Principal, c)
	if err != nil {
		return mcp.NewToolResultError(fault.As(err).Error()), nil
	}
	if form, _ := clientElicitModes(ctx); out.Status == capability.OutcomeDraft && out.Draft != nil && s.opts.StateKey != nil && form {
		client := approval.Decider{Principal: execution.PrincipalFrom(ctx), Channel: execution.ChannelClient}
		if ok, err := s.opts.Capabilities.MayPublishDraft(ctx, client, *out.Draft); err == nil && ok {
			if res := s.askPublish(*out.Draft); res != nil {
				return res, nil
			}
		}
	}
	return structured(out)
}

// publishElicitID names the one question of a draft's input_required.
const publishElicitID = "publish"

// maxQuestionCode bounds the code a question shows. Code is shown whole or
// not at all: a cut would let the agent put what the person reads first
// and what runs after it.
const maxQuestionCode = 8192

// publishSchema is what the user is asked for about a draft.
var publishSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"decision": map[string]any{"type": "string", "title": "Decision", "enum": []string{"publish", "reject"},
			"description": "publish makes this code what every caller of the capability runs; reject closes the draft"},
		"reason": map[string]any{"type": "string", "title": "Reason (optional)", "maxLength": execution.MaxReasonBytes,
			"description": "kept with a rejected draft"},
	},
	"required": []string{"decision"},
}

// askPublish puts draft d to the client's user: an input_required result
// with one elicitation and the sealed state; nil when the state cannot be
// sealed (the draft is answered as it is).
func (s *Server) askPublish(d capability.Draft) *mcp.CallToolResult {
	token, err := s.opts.StateKey.Seal(approval.State{Draft: d.ID, Principal: d.Author, Expires: d.ExpiresAt.Unix()})
	if err != nil {
		s.opts.Logger.Warn("cannot ask the client's user: answering the draft", "draft_id", d.ID, "err", err)
		return nil
	}
	return server.NewInputRequestBuilder("").
		Elicit(publishElicitID, mcp.ElicitationParams{Message: publishQuestion(d), RequestedSchema: publishSchema}).
		RequestState(token).ToolResult()
}

// publishQuestion is what the user is asked about a draft: the code in
// full, since publishing it makes it what every caller of the name runs
// (characters that reorder text on screen escaped), or, past a bound,
// where to read it.
func publishQuestion(d capability.Draft) string {
	code := escapeControls(d.Code)
	if len(code) > maxQuestionCode {
		code = fmt.Sprintf("(%d bytes, too long to show here: reject it unless you have read it, with GET /capabilities/drafts/%s or pml capability drafts %s)", len(d.Code), d.ID, d.ID)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "An agent wants to publish capability %s: once published, every script that calls mcp.%s runs this code with its own tools. Nothing is published yet.\n",
		d.Name, strings.Replace(d.Name, ":", ".", 1))
	if d.Description != "" {
		fmt.Fprintf(&b, "Description: %s\n", escapeControls(d.Description))
	}
	if len(d.Pins) > 0 {
		pins, _ := json.Marshal(d.Pins)
		fmt.Fprintf(&b, "It runs these capability versions: %s\n", pins)
	}
	fmt.Fprintf(&b, "Code (%s):\n%s\n\nPublish it, or reject it. Draft %s; it waits until %s.", d.CodeHash, code, d.ID, d.ExpiresAt.UTC().Format(time.RFC3339))
	return b.String()
}

// answeredDraft handles the retry of a save_capability that asked: it
// checks the sealed state and publishes or rejects the draft as the
// user's decision (execution.ChannelClient), or leaves it a draft when
// the user declined.
func (s *Server) answeredDraft(ctx context.Context, r mcp.CallToolRequest) *mcp.CallToolResult {
	principal := execution.PrincipalFrom(ctx)
	if s.opts.StateKey == nil {
		return draftRefusal(fault.New(fault.InvalidRequest, "this server asks no questions: requestState is not one of its own"))
	}
	st, err := s.opts.StateKey.Open(r.Params.RequestState, time.Now())
	switch {
	case errors.Is(err, approval.ErrStateExpired):
		return draftRefusal(fault.New(fault.Expired, "the draft this answer is about has expired"))
	case err != nil:
		return draftRefusal(fault.New(fault.InvalidRequest, "requestState is not one this server issued, or was changed: %v", err))
	case st.Draft == "":
		return draftRefusal(fault.New(fault.InvalidRequest, "this requestState is about an execution, not a capability draft: answer it through execute_code"))
	case st.Principal != principal:
		return draftRefusal(fault.New(fault.Forbidden, "this requestState was issued to another principal"))
	}
	client := approval.Decider{Principal: principal, Channel: execution.ChannelClient}
	res := server.ElicitationResponse(r.Params.InputResponses, publishElicitID)
	if res == nil {
		// Nothing answered: ask again, if it still waits.
		d, err := s.opts.Capabilities.Draft(ctx, principal, st.Draft)
		if err != nil {
			return draftRefusal(fault.As(err))
		}
		if d.Status != capability.DraftPending {
			return draftRefusal(fault.New(fault.Conflict, "draft %s is %s already", d.ID, d.Status))
		}
		if q := s.askPublish(d); q != nil {
			return q
		}
		out, _ := structured(capability.Outcome{Status: capability.OutcomeDraft, Draft: &d, Message: "the question could not be asked again: the draft waits"})
		return out
	}
	decision, _ := decisionOf(res) // a draft is one decision: no scope
	var form struct {
		Decision string `json:"decision"`
	}
	if raw, err := json.Marshal(res.Content); err == nil {
		_ = json.Unmarshal(raw, &form)
	}
	switch {
	case res.Action == mcp.ElicitationResponseActionAccept && form.Decision == "publish":
		out, err := s.opts.Capabilities.PublishDraft(ctx, client, st.Draft)
		if err != nil {
			return draftRefusal(fault.As(err))
		}
		res, _ := structured(out)
		return res
	case res.Action == mcp.ElicitationResponseActionAccept && form.Decision == "reject":
		d, err := s.opts.Capabilities.RejectDraft(ctx, client, st.Draft, decision.Reason)
		if err != nil {
			return draftRefusal(fault.As(err))
		}
		res, _ := structured(capability.Outcome{Status: capability.OutcomeDraft, Draft: &d,
			Message: fmt.Sprintf("the user rejected draft %s: nothing was published", d.ID)})
		return res
	}
	// Declined, cancelled or unreadable: the draft waits for whoever else
	// may publish it.
	d, err := s.opts.Capabilities.Draft(ctx, principal, st.Draft)
	if err != nil {
		return draftRefusal(fault.As(err))
	}
	res2, _ := structured(capability.Outcome{Status: capability.OutcomeDraft, Draft: &d,
		Message: fmt.Sprintf("the user did not publish draft %s (%s): it stays a draft until it expires or someone who may publishes it", d.ID, decision.Reason)})
	return res2
}

// draftRefusal is a refused answer about a draft, for the model.
func draftRefusal(ferr *fault.Error) *mcp.CallToolResult {
	res := mcp.NewToolResultStructured(map[string]any{"ok": false, "error": ferr}, "refused: "+ferr.Error())
	res.IsError = true
	return res
}
