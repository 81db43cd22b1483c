package guest

import (
	"cmp"
	"encoding/json"
	"errors"
	"reflect"
	"strings"

	"github.com/tetratelabs/wazero/sys"

	"github.com/pml-sandbox/pml/internal/fault"
)

// What a run's failures become: the guest's report of a script failure is
// checked against the errors the host delivered (a script cannot forge a
// host code), a trap is classified, and a guest that breaks the import
// protocol is aborted.

// verifyFailure turns the guest's report of a failure into the error the
// caller sees. A report that names a host error (host_error: the id the
// host delivered it under) keeps that error's code only when every field
// the script could have changed is still what the host delivered;
// otherwise the failure is the script's own, SCRIPT_ERROR. So a script
// cannot dress its failure up as TIMEOUT or a retryable UNAVAILABLE.
// Reports without host_error come from the glue and the prelude's own
// code paths, which only produce SCRIPT_ERROR, the memory and stack
// limits, and the glue's fixed documents.
func (x *execution) verifyFailure(raw json.RawMessage) *fault.Error {
	var report map[string]json.RawMessage
	if err := json.Unmarshal(raw, &report); err != nil {
		return fault.Wrap(fault.SandboxError, err, "the sandbox reported an unreadable failure")
	}
	var stack string
	_ = json.Unmarshal(report["stack"], &stack)
	idRaw, claimed := report["host_error"]
	if !claimed {
		var e fault.Error
		if err := json.Unmarshal(raw, &e); err != nil || e.Code == "" {
			return fault.New(fault.SandboxError, "the sandbox reported a failure without a code")
		}
		return &e
	}
	var id int32
	orig := (*fault.Error)(nil)
	if json.Unmarshal(idRaw, &id) == nil {
		orig = x.delivered[id]
	}
	delete(report, "host_error")
	delete(report, "stack")
	if orig != nil && sameAsDelivered(report, orig) {
		e := *orig
		e.Stack = stack
		return &e
	}
	var msg string
	if json.Unmarshal(report["message"], &msg) != nil {
		msg = "(an error whose message is not a string)"
	}
	return &fault.Error{Code: fault.ScriptError, Message: "Error: " + msg, Stack: stack}
}

// sameAsDelivered reports whether the fields of a host error, as the
// script left them, are exactly what the prelude made of orig (hostError
// in prelude.js: the same defaults, tool and limit only when set).
func sameAsDelivered(report map[string]json.RawMessage, orig *fault.Error) bool {
	want := map[string]any{
		"code":      cmp.Or(string(orig.Code), "INTERNAL"),
		"message":   cmp.Or(orig.Message, string(orig.Code), "tool call failed"),
		"retryable": orig.Retryable,
	}
	if orig.Tool != "" {
		want["tool"] = orig.Tool
	}
	if orig.Limit != "" {
		want["limit"] = orig.Limit
	}
	if orig.Details != nil {
		want["details"] = orig.Details
	}
	return sameJSON(report, want)
}

// sameJSON compares two values by their JSON meaning.
func sameJSON(a, b any) bool {
	norm := func(v any) (any, bool) {
		j, err := json.Marshal(v)
		if err != nil {
			return nil, false
		}
		var out any
		return out, json.Unmarshal(j, &out) == nil
	}
	na, ok1 := norm(a)
	nb, ok2 := norm(b)
	return ok1 && ok2 && reflect.DeepEqual(na, nb)
}

// trapError classifies a failure of the guest itself (not of the script).
func (x *execution) trapError(err error) *fault.Error {
	var exit *sys.ExitError
	msg := err.Error()
	x.trapped = true
	switch {
	case x.stopErr != nil:
		return x.stopErr
	case x.interrupted():
		return x.timeoutError()
	case errors.As(err, &exit):
		return fault.New(fault.SandboxError, "the sandbox exited with code %d", exit.ExitCode())
	case strings.Contains(msg, "stack overflow") || strings.Contains(msg, "call stack exhausted"):
		return fault.Limitf(fault.LimitStack, "the sandbox's native stack was exhausted")
	default:
		return fault.Wrap(fault.SandboxError, err, "the sandbox trapped")
	}
}

// deliver remembers an error handed to the guest under id.
func (x *execution) deliver(id int32, e *fault.Error) {
	if x.delivered == nil {
		x.delivered = map[int32]*fault.Error{}
	}
	x.delivered[id] = e
}

// registerFault keeps an error the prelude raises on the host's behalf
// (pml.fault) and returns the id it is kept under. The document comes from
// the guest, so it is parsed as untrusted input.
func (x *execution) registerFault(doc []byte) int32 {
	x.nextID++
	id := x.nextID
	var e fault.Error
	if err := json.Unmarshal(doc, &e); err != nil || e.Code == "" {
		e = fault.Error{Code: fault.SandboxError, Message: "the sandbox raised an unreadable error"}
	}
	x.deliver(id, &e)
	return id
}

// abort ends the run of a guest that broke the host protocol (a pointer
// out of range, say): the run fails with SANDBOX_ERROR and the instance is
// discarded like any other.
func (x *execution) abort(format string, a ...any) {
	x.stop(fault.New(fault.SandboxError, "the sandbox misbehaved: "+format, a...))
}

// outOfMemory ends a run whose JS heap could not grow by size bytes. It is
// not a JS exception: QuickJS leaves objects half-changed when an
// allocation fails inside a built-in (an array's length past its storage,
// an exception it cannot create: the script got null, or later memory
// accesses went out of bounds), so the run must not
// go on once one has failed. The limit is the script's, like the deadline.
func (x *execution) outOfMemory(size uint32) {
	x.stop(fault.Limitf(fault.LimitMemory, "the script ran out of memory: allocating %d bytes would pass its limit of %d bytes", size, x.limits.MemoryBytes))
}

// stop traps the guest at once, and the run fails with err.
func (x *execution) stop(err *fault.Error) {
	x.stopErr = err
	x.stopping = true
	panic(errStop)
}

func errorJSON(e *fault.Error) []byte {
	b, err := json.Marshal(e)
	if err != nil {
		return []byte(`{"code":"INTERNAL","message":"unencodable error"}`)
	}
	return b
}
