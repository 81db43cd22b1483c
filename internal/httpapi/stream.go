package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/trace"
)

// EventResult is the last event of a streamed execution.
const EventResult = "result"

// StreamResult is the data of the result event: the document the plain
// request answers with, and the HTTP status it would have had (the
// stream's own status is 200, sent before the outcome was known): 202
// for an execution that suspended, and for a resume that was refused the
// refusal's (404, 409, 410…) with the error in the document. Status takes
// the place of the document's own "status" ("suspended" — which 202
// says — or absent), so a client decodes the event into its own type,
// not into execution.Response.
type StreamResult struct {
	Status int `json:"status"`
	*execution.Response
}

// wantsEventStream reports whether the request asks for an event stream:
// its Accept header names text/event-stream (not through a wildcard) with
// a non-zero quality.
func wantsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || mt != "text/event-stream" {
				continue
			}
			if q, err := strconv.ParseFloat(params["q"], 64); err != nil || q > 0 {
				return true
			}
		}
	}
	return false
}

// executeStream runs req and sends its progress as server-sent events as
// it happens (see stream).
func (a *api) executeStream(w http.ResponseWriter, r *http.Request, req execution.Request) {
	req.ExecutionID = trace.NewExecutionID() // the header goes out first
	a.stream(w, r, req.ExecutionID, func(onEvent func(execution.Event)) (*execution.Response, int) {
		req.OnEvent = onEvent
		resp := a.Service.Execute(r.Context(), req)
		return resp, StatusOf(resp)
	})
}

// stream runs an execution (run, handing it the callback for its events)
// and sends its progress as server-sent events as it happens: log,
// call_start and call_end, then result, which carries the document and
// the status a plain request would have had. Each event is flushed on its
// own. The service's callbacks must not block, so they only queue events;
// this goroutine writes them.
func (a *api) stream(w http.ResponseWriter, r *http.Request, executionID string, run func(onEvent func(execution.Event)) (*execution.Response, int)) {
	q := &eventQueue{ready: make(chan struct{}, 1)}
	type outcome struct {
		resp   *execution.Response
		status int
	}
	done := make(chan outcome, 1)
	go func() {
		resp, status := run(q.push)
		done <- outcome{resp, status}
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	h.Set("X-Execution-Id", executionID)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	send := func() {
		for _, ev := range q.take() {
			writeEvent(w, string(ev.Type), ev.Data())
		}
		flush()
	}
	for {
		select {
		case <-q.ready:
			send()
		case out := <-done:
			// Every event is queued before the run returns.
			send()
			a.flush(r.Context())
			writeEvent(w, EventResult, StreamResult{Status: out.status, Response: out.resp})
			flush()
			return
		}
	}
}

// writeEvent writes one server-sent event. JSON holds no raw newline, so
// the data is one line. Write errors mean the client left; the execution
// ends with its context.
func writeEvent(w io.Writer, name string, data any) {
	var b bytes.Buffer
	b.WriteString("event: " + name + "\ndata: ")
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as the plain response
	if err := enc.Encode(data); err != nil {
		b.Reset()
		b.WriteString("event: " + name + "\ndata: ")
		_ = enc.Encode(map[string]string{"error": err.Error()})
	}
	b.WriteString("\n") // Encode ended the data line; a blank line ends the event
	_, _ = w.Write(b.Bytes())
}

// eventQueue hands events from the service's goroutines to the writer
// without blocking them. It is unbounded, but what an execution can emit
// is bounded by its limits (log lines, tool calls).
type eventQueue struct {
	mu     sync.Mutex
	events []execution.Event
	ready  chan struct{} // capacity 1: "there is something to take"
}

func (q *eventQueue) push(e execution.Event) {
	q.mu.Lock()
	q.events = append(q.events, e)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *eventQueue) take() []execution.Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.events
	q.events = nil
	return out
}
