package guest

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// Console output: each line is kept, streamed to OnLog, and charged
// against the run's log limits.

// log keeps one console line and reports whether the guest should keep
// sending. Every line costs its length plus LogEntryOverhead against
// log_bytes, and at most log_entries lines are kept, so neither long lines
// nor a flood of empty ones can grow the output past its bounds: once
// either is spent the rest is dropped, and one marker line names the limit.
func (x *execution) log(level int32, msg string) bool {
	if x.logsTruncated {
		return false
	}
	lv := "log"
	switch level {
	case 1:
		lv = "info"
	case 2:
		lv = "warn"
	case 3:
		lv = "error"
	}
	at := float64(time.Since(x.start).Microseconds()) / 1000
	if len(x.logs) >= x.limits.LogEntries {
		x.truncateLogs(at, fault.LimitLogEntries, x.limits.LogEntries, "lines")
		return false
	}
	if room := x.limits.LogBytes - x.logBytes - LogEntryOverhead; len(msg) > room {
		if room > 0 {
			x.keepLog(trace.LogEntry{Level: lv, Message: truncateUTF8(msg, room), AtMS: at})
		}
		x.truncateLogs(at, fault.LimitLogBytes, x.limits.LogBytes, "bytes")
		return false
	}
	x.logBytes += len(msg) + LogEntryOverhead
	x.keepLog(trace.LogEntry{Level: lv, Message: msg, AtMS: at})
	return true
}

// keepLog adds a line to the output and hands it to OnLog.
func (x *execution) keepLog(e trace.LogEntry) {
	x.logs = append(x.logs, e)
	if x.req.OnLog != nil {
		x.req.OnLog(e)
	}
}

func (x *execution) truncateLogs(at float64, limit string, n int, unit string) {
	x.logBytes = x.limits.LogBytes
	x.logsTruncated = true
	x.keepLog(trace.LogEntry{Level: "warn", AtMS: at,
		Message: fmt.Sprintf("[pml] console output reached the %s limit of %d %s; the rest was dropped", limit, n, unit)})
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (x *execution) takeLogs() ([]trace.LogEntry, bool) {
	if x.logs == nil {
		return []trace.LogEntry{}, x.logsTruncated
	}
	return x.logs, x.logsTruncated
}
