package httpapi

import (
	"net/http"
	"strings"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/capapi"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
)

// noCapabilities answers a capability route where there is no registry.
func (a *api) noCapabilities(w http.ResponseWriter) bool {
	if a.Capabilities == nil {
		httpjson.WriteError(w, http.StatusNotImplemented, fault.New(fault.Unavailable, "this deployment has no capability registry"))
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
		httpjson.Write(w, http.StatusOK, map[string]any{"capabilities": []any{}})
		return
	}
	list, err := a.Capabilities.List(r.Context(), execution.PrincipalFrom(r.Context()))
	if err != nil {
		httpjson.WriteError(w, http.StatusInternalServerError, fault.As(err))
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"capabilities": list})
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
	c, ferr := capapi.DecodeCapabilitySave(body)
	if ferr != nil {
		httpjson.WriteError(w, http.StatusBadRequest, ferr)
		return
	}
	d := capapi.CallerDecider(r.Context())
	out, err := a.Capabilities.Submit(r.Context(), d, d.Principal, c)
	if err != nil {
		fe := fault.As(err)
		httpjson.WriteError(w, capabilityStatus(fe), fe)
		return
	}
	httpjson.Write(w, outcomeStatus(out), out)
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
		httpjson.WriteError(w, http.StatusBadRequest, fault.New(fault.InvalidRequest, "all must be true or false, not %q", v))
		return
	}
	drafts, err := a.Capabilities.Drafts(r.Context(), execution.PrincipalFrom(r.Context()), all)
	if err != nil {
		fe := fault.As(err)
		httpjson.WriteError(w, capabilityStatus(fe), fe)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"drafts": drafts})
}

func (a *api) getDraft(w http.ResponseWriter, r *http.Request) {
	if a.noCapabilities(w) {
		return
	}
	d, err := a.Capabilities.Draft(r.Context(), execution.PrincipalFrom(r.Context()), r.PathValue("id"))
	if err != nil {
		fe := fault.As(err)
		httpjson.WriteError(w, capabilityStatus(fe), fe)
		return
	}
	httpjson.Write(w, http.StatusOK, d)
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
	out, err := a.Capabilities.PublishDraft(r.Context(), capapi.CallerDecider(r.Context()), r.PathValue("id"))
	if err != nil {
		fe := fault.As(err)
		httpjson.WriteError(w, capabilityStatus(fe), fe)
		return
	}
	httpjson.Write(w, outcomeStatus(out), out)
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
	d, err := a.Capabilities.RejectDraft(r.Context(), capapi.CallerDecider(r.Context()), r.PathValue("id"), reason)
	if err != nil {
		fe := fault.As(err)
		httpjson.WriteError(w, capabilityStatus(fe), fe)
		return
	}
	httpjson.Write(w, http.StatusOK, d)
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
		httpjson.WriteError(w, http.StatusBadRequest, ferr)
		return "", false
	}
	if in.Reason != "" && !withReason {
		httpjson.WriteError(w, http.StatusBadRequest, fault.New(fault.InvalidRequest, "publishing takes no reason: send {}"))
		return "", false
	}
	return in.Reason, true
}
