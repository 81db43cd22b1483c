// Package httpjson is JSON over HTTP as PML Sandbox's HTTP front ends —
// the REST API (internal/httpapi) and the MCP server (internal/mcpserver)
// — speak it: a body is read only when declared as JSON and within a
// bound, and every answer, a refusal included, is JSON in one shape, so
// that a client reads a refusal alike whichever front wrote it.
package httpjson

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Write writes v as the answer. HTML characters stay as they are: the
// answers are read by programs, and a script's result must come back as
// it returned it.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// WriteError writes a refusal: {"ok": false, "error": err}, the shape of
// a failed execution's document, so a client has one error to decode.
func WriteError(w http.ResponseWriter, status int, err *fault.Error) {
	Write(w, status, map[string]any{"ok": false, "error": err})
}

// DefaultBodyBytes bounds a body when the front sets no bound: scripts
// and their arguments are far smaller, and a bound per request keeps one
// caller from holding the process's memory.
const DefaultBodyBytes = 1 << 20

// ReadBody reads a request body of at most limit bytes (DefaultBodyBytes
// when limit is not positive); on failure it has answered (413 or 400) and
// ok is false.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, ok bool) {
	if limit <= 0 {
		limit = DefaultBodyBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			WriteError(w, http.StatusRequestEntityTooLarge, fault.New(fault.LimitExceeded, "the request body is over %d bytes", limit))
			return nil, false
		}
		WriteError(w, http.StatusBadRequest, fault.Wrap(fault.InvalidRequest, err, "reading the request body"))
		return nil, false
	}
	return body, true
}

// RequireJSON refuses a body that is not declared as JSON. A web page can
// send text/plain, form and multipart bodies to any origin without a CORS
// preflight, so accepting them would let any site the user visits run code
// here; application/json needs a preflight, which the fronts never grant
// unless the serve guard allows the origin. API clients always send JSON,
// so this holds behind API Gateway too.
func RequireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			WriteError(w, http.StatusUnsupportedMediaType, fault.New(fault.InvalidRequest,
				"the body must be JSON sent with Content-Type: application/json (got %q)", ct))
			return
		}
		next.ServeHTTP(w, r)
	})
}
