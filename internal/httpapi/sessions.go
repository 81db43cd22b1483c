package httpapi

import (
	"net/http"
	"strconv"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
)

// Sessions (execution/session.go). POST /execute with "session": "new"
// starts one and its answer's "session" names it; "session_id" continues
// it. GET /sessions/{id} describes a session to its owner (its
// executions, the names it keeps, its size and expiry; never its state),
// DELETE /sessions/{id} deletes it and its state. Another principal's
// session is 404, as an unknown id is; an expired one 410. An execution
// refused because the session is busy is 409 with Retry-After.

// getSession serves GET /sessions/{id}.
func (a *api) getSession(w http.ResponseWriter, r *http.Request) {
	info, ferr := a.Service.Session(r.Context(), execution.SessionRequest{SessionID: r.PathValue("id"), Principal: execution.PrincipalFrom(r.Context())})
	if ferr != nil {
		httpjson.WriteError(w, RefusalStatus(ferr), ferr)
		return
	}
	httpjson.Write(w, http.StatusOK, info)
}

// deleteSession serves DELETE /sessions/{id}.
func (a *api) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if ferr := a.Service.EndSession(r.Context(), execution.SessionRequest{SessionID: id, Principal: execution.PrincipalFrom(r.Context())}); ferr != nil {
		httpjson.WriteError(w, RefusalStatus(ferr), ferr)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"session_id": id, "deleted": true})
}

// sessionHeaders add what a refused execution of a session tells its
// caller: when to retry a busy one.
func sessionHeaders(w http.ResponseWriter, resp *execution.Response) {
	if resp.Refused && resp.Error != nil && resp.Error.Code == fault.Conflict && resp.Error.Retryable {
		w.Header().Set("Retry-After", strconv.Itoa(1))
	}
}
