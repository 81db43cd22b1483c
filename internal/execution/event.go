package execution

import "github.com/pml-sandbox/pml/internal/trace"

// EventType names a step of an execution's progress.
type EventType string

// The events Request.OnEvent receives, under the names the event stream of
// POST /execute sends them by.
const (
	EventLog       EventType = "log"        // a console line was kept
	EventCallStart EventType = "call_start" // a tool call started
	EventCallEnd   EventType = "call_end"   // a tool call ended (its record is complete)
)

// Event is one step of an execution's progress.
type Event struct {
	Type EventType
	Log  trace.LogEntry // for EventLog
	Call trace.Call     // for EventCallStart and EventCallEnd
}

// Data is the event's payload as sent on the wire: the log line or the
// call record, in the shapes of the response's logs and calls.
func (e Event) Data() any {
	if e.Type == EventLog {
		return e.Log
	}
	return e.Call
}
