package guest

import (
	"encoding/json"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Timers: setTimeout is a host-side sleep collected like a call's answer,
// so timers share the one event loop with tool calls and never fire after
// the run has ended.

// startTimer serves setTimeout: a sleep that is not a tool call.
func (x *execution) startTimer(id int32, args []byte) int32 {
	var a struct {
		MS float64 `json:"ms"`
	}
	x.timers++
	x.timersN++
	if x.timersN > maxTimers {
		// The prelude counts timers and throws before this; a guest that
		// gets here has lost its prelude's count, and its timer is dropped.
		e := fault.Limitf(fault.LimitTimers, "more than %d timers in one execution", maxTimers)
		x.ready = append(x.ready, completion{id: id, timer: true, data: errorJSON(e), fault: e})
		return id
	}
	_ = json.Unmarshal(args, &a)
	x.runTimer(id, time.Duration(a.MS*float64(time.Millisecond)))
	return id
}

// runTimer fires timer id after d, unless the run ends first.
func (x *execution) runTimer(id int32, d time.Duration) {
	if x.timerDue == nil {
		x.timerDue = map[int32]time.Time{}
	}
	x.timerDue[id] = time.Now().Add(d)
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-x.ctx.Done():
			return
		}
		select {
		case x.done <- completion{id: id, ok: true, timer: true, data: []byte("null")}:
		case <-x.ctx.Done():
		}
	}()
}
