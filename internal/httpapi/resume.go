package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/pml-sandbox/pml/internal/bridge"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// resumeBody is a resume request as callers send it. ExecutionID is a
// pointer to tell "absent" from "empty": the HTTP route takes the id from
// its path and refuses it in the body; a direct invocation and the MCP
// tool name it here.
type resumeBody struct {
	ExecutionID *string                    `json:"execution_id"`
	Decisions   map[string]bridge.Decision `json:"decisions"`
	CallDetail  string                     `json:"call_detail,omitempty"`
}

// DecodeResumeRequest parses and checks a resume request: with pathID
// set, the body of POST /executions/{id}/resume, which holds decisions
// and call_detail only; with pathID "", a direct invocation's "resume"
// object or resume_execution's arguments, which name execution_id too.
// Unknown fields are refused, as DecodeExecuteRequest refuses them. The
// host-only fields (principal, trace header) are not JSON fields at all.
func DecodeResumeRequest(body []byte, pathID string) (bridge.ResumeRequest, *fault.Error) {
	var rb resumeBody
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rb); err != nil {
		return bridge.ResumeRequest{}, fault.Wrap(fault.InvalidRequest, err, "the request body is not a valid resume request")
	}
	if dec.More() {
		return bridge.ResumeRequest{}, fault.New(fault.InvalidRequest, "the request body has data after the JSON object")
	}
	id := pathID
	switch {
	case pathID != "" && rb.ExecutionID != nil:
		return bridge.ResumeRequest{}, fault.New(fault.InvalidRequest, "execution_id is in the path, not the body: send only decisions (and call_detail)")
	case pathID == "":
		if rb.ExecutionID == nil || strings.TrimSpace(*rb.ExecutionID) == "" {
			return bridge.ResumeRequest{}, fault.New(fault.InvalidRequest, "execution_id is missing or empty")
		}
		id = *rb.ExecutionID
	}
	if len(rb.Decisions) == 0 {
		return bridge.ResumeRequest{}, fault.New(fault.InvalidRequest, `decisions is missing or empty: give one per call to decide, e.g. {"2": "approve", "3": {"decision": "reject", "reason": "…"}}`)
	}
	if ferr := bridge.CheckCallDetail(rb.CallDetail); ferr != nil {
		return bridge.ResumeRequest{}, ferr
	}
	return bridge.ResumeRequest{ExecutionID: id, Decisions: rb.Decisions, CallDetail: rb.CallDetail}, nil
}

// RefusalStatus maps a resume that was refused — nothing ran — to an HTTP
// status. Unlike an execution's failure (StatusOf), the code is about the
// request itself: FORBIDDEN is the caller's (another principal suspended
// the execution), not a tool's.
func RefusalStatus(e *fault.Error) int {
	switch e.Code {
	case fault.InvalidRequest:
		return http.StatusBadRequest
	case fault.Forbidden:
		return http.StatusForbidden
	case fault.NotFound:
		return http.StatusNotFound
	case fault.Conflict:
		return http.StatusConflict
	case fault.Expired:
		return http.StatusGone
	case fault.ResumeIncompatible:
		return http.StatusUnprocessableEntity
	case fault.LimitExceeded:
		return http.StatusRequestEntityTooLarge
	case fault.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// refused is the document of a refused resume, as an execution's: the
// streamed result event carries it.
func refused(id string, e *fault.Error) *bridge.Response {
	return &bridge.Response{Error: e, ExecutionID: id, Logs: []guest.LogEntry{}}
}

// resume serves POST /executions/{id}/resume: 200 with the execution's
// document when it ran to its end (failed or not: StatusOf), 202 when it
// suspended again, or the refusal's status (RefusalStatus) with the JSON
// error when nothing ran.
func (a *api) resume(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	rr, ferr := DecodeResumeRequest(body, r.PathValue("id"))
	if ferr != nil {
		writeError(w, http.StatusBadRequest, ferr)
		return
	}
	rr.Principal = PrincipalFrom(r.Context())
	rr.TraceHeader = TraceHeader(r.Context(), r.Header.Get("X-Amzn-Trace-Id"))
	if a.Streaming && wantsEventStream(r) {
		a.stream(w, r, rr.ExecutionID, func(onEvent func(bridge.Event)) (*bridge.Response, int) {
			rr.OnEvent = onEvent
			resp, ferr := a.Service.Resume(r.Context(), rr)
			if ferr != nil {
				return refused(rr.ExecutionID, ferr), RefusalStatus(ferr)
			}
			return resp, StatusOf(resp)
		})
		return
	}
	resp, ferr := a.Service.Resume(r.Context(), rr)
	w.Header().Set("X-Execution-Id", rr.ExecutionID)
	if ferr != nil {
		writeError(w, RefusalStatus(ferr), ferr)
		return
	}
	a.flush(r.Context())
	writeJSON(w, StatusOf(resp), resp)
}
