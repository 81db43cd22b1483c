package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/pml-sandbox/pml/internal/approval"
	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// CapabilitySave is a request to store a capability: POST /capabilities'
// body, save_capability's arguments.
type CapabilitySave = capability.Proposal

// DecodeCapabilitySave reads a capability to save, as strictly as an
// execute request (POST /capabilities, save_capability's arguments).
func DecodeCapabilitySave(data []byte) (CapabilitySave, *fault.Error) {
	var c CapabilitySave
	if ferr := execution.DecodeStrict(data, &c, "a capability"); ferr != nil {
		return CapabilitySave{}, ferr
	}
	return c, nil
}

// Capabilities lists capabilities and publishes them as the deployment's
// policy decides (capability.Guard implements it): a save its caller may not publish is
// kept as a draft, which someone who may publishes later. Every method
// takes who asks (the principal API Gateway or the guard verified, and
// how the decision reached the service).
type Capabilities interface {
	// List is every capability's latest version, as principal may see it.
	List(ctx context.Context, principal string) ([]capability.Capability, error)
	// Submit publishes what author proposes as d decides it, or keeps it
	// as author's draft (the fronts' author is the caller: d.Principal).
	Submit(ctx context.Context, d approval.Decider, author string, c CapabilitySave) (capability.Outcome, error)
	// Drafts are the drafts principal may read (pending ones, or all
	// unexpired ones); Draft is one of them.
	Drafts(ctx context.Context, principal string, all bool) ([]capability.Draft, error)
	Draft(ctx context.Context, principal, id string) (capability.Draft, error)
	// PublishDraft publishes a draft as d decides it; RejectDraft closes
	// it (its author withdraws it, whoever may publish it rejects it).
	PublishDraft(ctx context.Context, d approval.Decider, id string) (capability.Outcome, error)
	RejectDraft(ctx context.Context, d approval.Decider, id, reason string) (capability.Draft, error)
	// MayPublishDraft reports whether d's decision would publish dr now.
	MayPublishDraft(ctx context.Context, d approval.Decider, dr capability.Draft) (bool, error)
}

// callerDecider is who decides a request made with the caller's own
// credentials.
func callerDecider(ctx context.Context) approval.Decider {
	return approval.Decider{Principal: execution.PrincipalFrom(ctx), Channel: execution.ChannelCaller}
}

// noCapabilities answers a capability route where there is no registry.
func (a *api) noCapabilities(w http.ResponseWriter) bool {
	if a.Capabilities == nil {
		writeError(w, http.StatusNotImplemented, fault.New(fault.Unavailable, "this deployment has no capability registry"))
		return true
	}
	return false
}

// capabilityStatus is the status of a refused capability request.
func capabilityStatus(fe *fault.Error) int {
	switch fe.Code {
	case fault.InvalidRequest, fault.InvalidArguments, fault.ScriptError:
		return http.StatusBadRequest
	case fault.LimitExceeded: // code over the size or nesting bounds
		return limitStatus(fe)
	case fault.Forbidden:
		return http.StatusForbidden
	case fault.NotFound:
		return http.StatusNotFound
	case fault.Conflict:
		return http.StatusConflict
	case fault.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// outcomeStatus is the status of a save or a draft's publication: 201
// for a new version, 200 for an equivalent one already published, 202
// for a draft that waits for someone who may publish it.
func outcomeStatus(o capability.Outcome) int {
	switch o.Status {
	case capability.OutcomePublished:
		return http.StatusCreated
	case capability.OutcomeDraft:
		return http.StatusAccepted
	}
	return http.StatusOK
}

func (a *api) listCapabilities(w http.ResponseWriter, r *http.Request) {
	if a.Capabilities == nil {
		writeJSON(w, http.StatusOK, map[string]any{"capabilities": []any{}})
		return
	}
	list, err := a.Capabilities.List(r.Context(), execution.PrincipalFrom(r.Context()))
	if err != nil {
		writeError(w, http.StatusInternalServerError, fault.As(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"capabilities": list})
}

// saveCapability serves POST /capabilities: the caller's save, published
// where the policy lets the caller publish it, else a draft (202).
func (a *api) saveCapability(w http.ResponseWriter, r *http.Request) {
	if a.noCapabilities(w) {
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	c, ferr := DecodeCapabilitySave(body)
	if ferr != nil {
		writeError(w, http.StatusBadRequest, ferr)
		return
	}
	d := callerDecider(r.Context())
	out, err := a.Capabilities.Submit(r.Context(), d, d.Principal, c)
	if err != nil {
		fe := fault.As(err)
		writeError(w, capabilityStatus(fe), fe)
		return
	}
	writeJSON(w, outcomeStatus(out), out)
}

// listDrafts serves GET /capabilities/drafts: the pending drafts the
// caller may read (?all=true: closed ones too, until they expire).
func (a *api) listDrafts(w http.ResponseWriter, r *http.Request) {
	if a.noCapabilities(w) {
		return
	}
	all := false
	switch v := r.URL.Query().Get("all"); v {
	case "", "false":
	case "true":
		all = true
	default:
		writeError(w, http.StatusBadRequest, fault.New(fault.InvalidRequest, "all must be true or false, not %q", v))
		return
	}
	drafts, err := a.Capabilities.Drafts(r.Context(), execution.PrincipalFrom(r.Context()), all)
	if err != nil {
		fe := fault.As(err)
		writeError(w, capabilityStatus(fe), fe)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"drafts": drafts})
}

func (a *api) getDraft(w http.ResponseWriter, r *http.Request) {
	if a.noCapabilities(w) {
		return
	}
	d, err := a.Capabilities.Draft(r.Context(), execution.PrincipalFrom(r.Context()), r.PathValue("id"))
	if err != nil {
		fe := fault.As(err)
		writeError(w, capabilityStatus(fe), fe)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// publishDraft serves POST /capabilities/drafts/{id}/publish (body {}):
// the caller, with its own credentials, publishes the draft if the policy
// lets it (an approver).
func (a *api) publishDraft(w http.ResponseWriter, r *http.Request) {
	if a.noCapabilities(w) {
		return
	}
	if _, ok := a.draftBody(w, r, false); !ok {
		return
	}
	out, err := a.Capabilities.PublishDraft(r.Context(), callerDecider(r.Context()), r.PathValue("id"))
	if err != nil {
		fe := fault.As(err)
		writeError(w, capabilityStatus(fe), fe)
		return
	}
	writeJSON(w, outcomeStatus(out), out)
}

// rejectDraft serves POST /capabilities/drafts/{id}/reject (body {} or
// {"reason": …}).
func (a *api) rejectDraft(w http.ResponseWriter, r *http.Request) {
	if a.noCapabilities(w) {
		return
	}
	reason, ok := a.draftBody(w, r, true)
	if !ok {
		return
	}
	a.closeDraft(w, r, reason)
}

// deleteDraft serves DELETE /capabilities/drafts/{id}: its author
// withdraws it, or whoever may publish it rejects it.
func (a *api) deleteDraft(w http.ResponseWriter, r *http.Request) {
	if a.noCapabilities(w) {
		return
	}
	a.closeDraft(w, r, "")
}

func (a *api) closeDraft(w http.ResponseWriter, r *http.Request, reason string) {
	d, err := a.Capabilities.RejectDraft(r.Context(), callerDecider(r.Context()), r.PathValue("id"), reason)
	if err != nil {
		fe := fault.As(err)
		writeError(w, capabilityStatus(fe), fe)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// draftBody reads the body of a draft's POST: empty or {}, or with
// withReason {"reason": …}.
func (a *api) draftBody(w http.ResponseWriter, r *http.Request, withReason bool) (string, bool) {
	body, ok := a.readBody(w, r)
	if !ok {
		return "", false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return "", true
	}
	var in struct {
		Reason string `json:"reason,omitempty"`
	}
	if ferr := execution.DecodeStrict(body, &in, "a draft decision"); ferr != nil {
		writeError(w, http.StatusBadRequest, ferr)
		return "", false
	}
	if in.Reason != "" && !withReason {
		writeError(w, http.StatusBadRequest, fault.New(fault.InvalidRequest, "publishing takes no reason: send {}"))
		return "", false
	}
	return in.Reason, true
}

// mcpSaveCapability serves save_capability: the agent's save, published
// where the policy lets it publish, else a draft; where the client's user
// may publish the draft (a client the deployment trusts, the namespace
// its own or nobody's), the user is asked (publishDraftQuestion), and the
// retry with the answer publishes or rejects it.
func (a *api) mcpSaveCapability(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if a.Capabilities == nil {
		return mcp.NewToolResultError("this deployment has no capability registry"), nil
	}
	if r.Params.RequestState != "" || len(r.Params.InputResponses) > 0 {
		return a.answeredDraft(ctx, r), nil
	}
	raw, err := json.Marshal(r.GetArguments())
	if err != nil {
		return mcp.NewToolResultError("arguments are not JSON: " + err.Error()), nil
	}
	c, ferr := DecodeCapabilitySave(raw)
	if ferr != nil {
		return mcp.NewToolResultError(ferr.Error()), nil
	}
	d := callerDecider(ctx)
	out, err := a.Capabilities.Submit(ctx, d, d.Principal, c)
	if err != nil {
		return mcp.NewToolResultError(fault.As(err).Error()), nil
	}
	if form, _ := clientElicitModes(ctx); out.Status == capability.OutcomeDraft && out.Draft != nil && a.StateKey != nil && form {
		client := approval.Decider{Principal: execution.PrincipalFrom(ctx), Channel: execution.ChannelClient}
		if ok, err := a.Capabilities.MayPublishDraft(ctx, client, *out.Draft); err == nil && ok {
			if res := a.askPublish(*out.Draft); res != nil {
				return res, nil
			}
		}
	}
	return structured(out)
}
