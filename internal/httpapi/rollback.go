package httpapi

import (
	"mime"
	"net/http"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
)

// rollback serves POST /executions/{id}/rollback: the compensations of the
// execution's applied effects run, newest first, as an execution of the
// caller's own (Executor.Rollback). The body is optional: {"allow_destructive",
// "approval", "dry_run"}. 200 with what became of each effect (also when
// there was nothing to do, or some compensations failed: the answer says
// which), 202 when the rollback waits for a person's decision on a
// compensating call (its execution's approval_url), or the refusal's
// status: 404 (unknown, or another principal's: told alike), 409 (it runs
// or waits for decisions, a rollback of it is under way, or it was rolled
// back already), 503.
func (a *api) rollback(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	if len(body) > 0 {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			httpjson.WriteError(w, http.StatusUnsupportedMediaType, fault.New(fault.InvalidRequest,
				"a rollback's body, when it has one, must be JSON sent with Content-Type: application/json"))
			return
		}
	}
	id := r.PathValue("id")
	rr, ferr := execution.DecodeRollback(body, id)
	if ferr != nil {
		httpjson.WriteError(w, http.StatusBadRequest, ferr)
		return
	}
	rr.Principal = execution.PrincipalFrom(r.Context())
	rr.Source = execution.SourceFrom(r.Context(), execution.SourceHTTP)
	rr.TraceHeader = execution.TraceHeader(r.Context(), r.Header.Get("X-Amzn-Trace-Id"))
	rb, ferr := a.Service.Rollback(r.Context(), rr)
	w.Header().Set("X-Execution-Id", id)
	if ferr != nil {
		httpjson.WriteError(w, RefusalStatus(ferr), ferr)
		return
	}
	a.flush(r.Context())
	status := http.StatusOK
	if rb.Execution != nil && rb.Execution.Suspended() {
		status = http.StatusAccepted
		w.Header().Set("Location", "executions/"+rb.RollbackID)
	}
	httpjson.Write(w, status, rb)
}
