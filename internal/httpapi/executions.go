package httpapi

import (
	"net/http"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
)

// Fire and poll. POST /execute with "async": true answers 202 at once with
// the execution's id (X-Execution-Id, and Location: executions/<id>,
// relative so that it holds under a stage path); GET /executions/{id}
// serves its document while it runs (status "running", Retry-After: 1),
// when it suspends (the pending calls) and once it ended; DELETE
// /executions/{id} cancels it. Executions that ran synchronously are read
// from their trace, as before.

// pollHeaders tell the caller of an execution that runs on where and when
// to ask again.
func pollHeaders(w http.ResponseWriter, id string) {
	w.Header().Set("Location", "executions/"+id)
	w.Header().Set("Retry-After", "1")
}

// asyncDocument answers GET /executions/{id} with the document of an
// execution the service keeps runs of (Executor.Status), and reports
// whether it did; NOT_FOUND leaves the request to the trace.
func (a *api) asyncDocument(w http.ResponseWriter, r *http.Request, id string) bool {
	doc, ferr := a.Service.Status(r.Context(), id, execution.PrincipalFrom(r.Context()))
	switch {
	case ferr != nil && ferr.Code == fault.NotFound:
		return false
	case ferr != nil:
		httpjson.WriteError(w, RefusalStatus(ferr), ferr)
		return true
	}
	w.Header().Set("X-Execution-Id", id)
	if doc.Running() {
		w.Header().Set("Retry-After", "1")
	}
	httpjson.Write(w, http.StatusOK, doc)
	return true
}

// cancelExecution serves DELETE /executions/{id}: 200 with the document of
// an execution that is cancelled now (it was queued or suspended), 202 with
// status "running" and cancel_requested for one that ends at its next step,
// or the refusal's status: 404 (unknown, or another principal's, told
// alike), 409 (it ended already).
func (a *api) cancelExecution(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	doc, ferr := a.Service.Cancel(r.Context(), execution.CancelRequest{ExecutionID: id, Principal: execution.PrincipalFrom(r.Context())})
	w.Header().Set("X-Execution-Id", id)
	if ferr != nil {
		httpjson.WriteError(w, RefusalStatus(ferr), ferr)
		return
	}
	a.flush(r.Context())
	status := http.StatusOK
	if doc.Running() {
		status = http.StatusAccepted
		w.Header().Set("Retry-After", "1")
	}
	httpjson.Write(w, status, doc)
}
