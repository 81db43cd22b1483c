package httpapi

import (
	"net/http"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
	"github.com/pml-sandbox/pml/internal/trace"
)

// RefusalStatus maps a resume that was refused — nothing ran — to an HTTP
// status. Unlike an execution's failure (StatusOf), the code is about the
// request itself: FORBIDDEN is the caller's (the policy does not let it
// approve), not a tool's. Another principal's execution is NOT_FOUND, as
// an unknown one.
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
func refused(id string, e *fault.Error) *execution.Response {
	return &execution.Response{Error: e, ExecutionID: id, Logs: []trace.LogEntry{}}
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
	rr, ferr := execution.DecodeResume(body, r.PathValue("id"))
	if ferr != nil {
		httpjson.WriteError(w, http.StatusBadRequest, ferr)
		return
	}
	rr.Principal = execution.PrincipalFrom(r.Context())
	rr.TraceHeader = execution.TraceHeader(r.Context(), r.Header.Get("X-Amzn-Trace-Id"))
	if a.streams(r.Context()) && wantsEventStream(r) {
		a.stream(w, r, rr.ExecutionID, func(onEvent func(execution.Event)) (*execution.Response, int) {
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
		httpjson.WriteError(w, RefusalStatus(ferr), ferr)
		return
	}
	a.flush(r.Context())
	httpjson.Write(w, StatusOf(resp), resp)
}
