package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/delivery"
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

// streams reports whether a request's answer may stream: Options.Streaming,
// or a front that marked it (delivery.WithStreaming).
func (a *api) streams(ctx context.Context) bool {
	return a.Streaming || delivery.Streaming(ctx)
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
	// Recorded as a run where the service keeps runs: should this process
	// die mid-stream, the execution is continued, and its caller, who has
	// its id, finds how it ended (GET /executions/{id}, followed as a
	// stream too).
	req.Durable = true
	a.stream(w, r, req.ExecutionID, func(onEvent func(execution.Event)) (*execution.Response, int) {
		req.OnEvent = onEvent
		resp := a.Service.Execute(r.Context(), req)
		return resp, StatusOf(resp)
	})
}

// stream runs an execution (run, handing it the callback for its events)
// and sends its progress as server-sent events as it happens: log,
// call_start and call_end, then result, which carries the document and
// the status a plain request would have had. Each batch of events is
// flushed on its own. The service's callbacks must not block, so they
// only queue events, and the queue is bounded (streamQueueBytes): past it
// events are dropped, and a dropped event saying how many goes out in
// their place (the result has every log line and call anyway). This
// goroutine writes them; once a write fails (the client left, or stopped
// reading past the client limits' write deadline) it writes nothing more,
// and the request's context, which net/http cancels then, ends the
// execution as a disconnect does.
func (a *api) stream(w http.ResponseWriter, r *http.Request, executionID string, run func(onEvent func(execution.Event)) (*execution.Response, int)) {
	q := newEventQueue(streamQueueBytes)
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
	// The connection is not kept for another request: a client that
	// stopped reading would hold it, and a goroutine, idle for minutes.
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusOK)
	ew := newEventWriter(w)
	broken := false
	fail := func(err error) {
		if err != nil && !broken {
			broken = true
			q.close() // nothing more is kept for a client that cannot take it
			a.Logger.InfoContext(r.Context(), "event stream cut", "execution_id", executionID, "err", err)
		}
	}
	flush := func() {
		if err := flushError(w); !broken && !errors.Is(err, http.ErrNotSupported) {
			fail(err)
		}
	}
	flush()
	heartbeat := time.NewTicker(a.StreamHeartbeat)
	defer heartbeat.Stop()
	send := func() {
		events, dropped := q.take()
		for _, ev := range events {
			if broken {
				return
			}
			fail(ew.event(string(ev.Type), ev.Data()))
		}
		if dropped > 0 && !broken {
			fail(ew.event(EventDropped, Dropped{Dropped: dropped}))
		}
		flush()
		heartbeat.Reset(a.StreamHeartbeat)
	}
	for {
		select {
		case <-heartbeat.C:
			// A comment line: clients skip it, and the connection is not
			// idle for whatever sits between.
			if !broken {
				_, err := io.WriteString(w, ": keep-alive\n\n")
				fail(err)
				flush()
			}
		case <-q.ready:
			send()
		case out := <-done:
			// Every event is queued before the run returns.
			send()
			a.flush(r.Context())
			if !broken {
				fail(ew.result(StreamResult{Status: out.status, Response: out.resp}))
				flush()
			}
			return
		}
	}
}

// followExecution serves GET /executions/{id} asked as an event stream
// (Accept: text/event-stream): for a caller whose stream was cut (its
// connection, or the process that ran it), with or without Last-Event-ID.
// While the execution runs it sends keep-alives; once it has ended, the
// result event with its document (every console line and call is in it),
// and the status a plain GET would have had. An execution that is not
// running is answered at once, as a plain GET.
func (a *api) followExecution(w http.ResponseWriter, r *http.Request, id string) bool {
	principal := execution.PrincipalFrom(r.Context())
	doc, ferr := a.Service.Status(r.Context(), id, principal)
	if ferr != nil || !doc.Running() {
		return false
	}
	a.stream(w, r, id, func(func(execution.Event)) (*execution.Response, int) {
		t := time.NewTicker(followEvery)
		defer t.Stop()
		for {
			select {
			case <-r.Context().Done():
				return doc, http.StatusOK
			case <-t.C:
			}
			next, ferr := a.Service.Status(r.Context(), id, principal)
			if ferr != nil {
				return execution.Failed(id, ferr), RefusalStatus(ferr)
			}
			if doc = next; !doc.Running() {
				return doc, http.StatusOK
			}
		}
	})
	return true
}

// followEvery is how often a followed execution's document is read.
const followEvery = 250 * time.Millisecond

// EventDropped is the event sent in place of the events a client that
// reads slowly missed.
const EventDropped = "dropped"

// Dropped is the data of a dropped event.
type Dropped struct {
	// Dropped is how many events were left out here.
	Dropped int `json:"dropped"`
}

// streamQueueBytes bounds what a stream's queue holds (by eventCost). A
// client that stops reading costs at most twice this in events (the batch
// being written and the queue filling behind it), plus one event larger
// than the bound (a long console line, up to the log limit), and no more.
const streamQueueBytes = 256 << 10

// eventOverhead is what an event costs in the queue besides its strings:
// the struct and its share of the slice.
const eventOverhead = 256

// eventCost is what e holds in memory, roughly.
func eventCost(e execution.Event) int {
	c := &e.Call
	return eventOverhead + len(e.Log.Level) + len(e.Log.Message) +
		len(c.ExecutionID) + len(c.Server) + len(c.Tool) + len(c.ArgsHash) + len(c.ResultHash) + len(c.ChildExecutionID) + len(c.Status) + len(c.ErrorCode)
}

// eventQueue hands events from the service's goroutines to the writer
// without blocking them, up to limit bytes of them. An event that does not
// fit is dropped, and so is every one after it until the writer takes the
// queue, so that the count of dropped events stands exactly between the
// events taken with it and the ones after. An event bigger than the limit
// is kept only in an empty queue.
type eventQueue struct {
	mu      sync.Mutex
	events  []execution.Event
	bytes   int
	limit   int
	dropped int
	closed  bool
	ready   chan struct{} // capacity 1: "there is something to take"
}

func newEventQueue(limit int) *eventQueue {
	return &eventQueue{ready: make(chan struct{}, 1), limit: limit}
}

func (q *eventQueue) push(e execution.Event) {
	q.mu.Lock()
	switch cost := eventCost(e); {
	case q.closed:
		q.mu.Unlock()
		return
	case q.dropped > 0 || (len(q.events) > 0 && q.bytes+cost > q.limit):
		q.dropped++
	default:
		q.events = append(q.events, e)
		q.bytes += cost
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take returns the queued events and how many were dropped after them,
// and empties the queue.
func (q *eventQueue) take() ([]execution.Event, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out, dropped := q.events, q.dropped
	q.events, q.bytes, q.dropped = nil, 0, 0
	return out, dropped
}

// close drops what is queued and everything pushed after.
func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.events, q.bytes, q.dropped = nil, 0, 0
}
