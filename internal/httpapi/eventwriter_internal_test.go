package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// wholeEvent is a server-sent event as the stream wrote it before it
// encoded results in pieces: the reference the event writer must match.
func wholeEvent(name string, data any) []byte {
	var b bytes.Buffer
	b.WriteString("event: " + name + "\ndata: ")
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(data); err != nil {
		b.Reset()
		b.WriteString("event: " + name + "\ndata: ")
		_ = enc.Encode(map[string]string{"error": err.Error()})
	}
	b.WriteString("\n")
	return b.Bytes()
}

// writes records each Write.
type writes struct {
	all   bytes.Buffer
	sizes []int
}

func (w *writes) Write(p []byte) (int, error) {
	w.all.Write(p)
	w.sizes = append(w.sizes, len(p))
	return len(p), nil
}

func logLines(n int, text string) []trace.LogEntry {
	out := make([]trace.LogEntry, n)
	for i := range out {
		out[i] = trace.LogEntry{Level: "log", Message: fmt.Sprint(i, " ", text), AtMS: float64(i) / 3}
	}
	return out
}

func calls(n int) []trace.Call {
	out := make([]trace.Call, n)
	for i := range out {
		out[i] = trace.Call{ExecutionID: "ex_1", CallID: i + 1, Server: "demo", Tool: "echo", Kind: trace.KindMCP, OK: i%3 != 0,
			StartedAt: time.Date(2026, 11, 27, 4, 0, i, 0, time.UTC), DurationMS: 0.25, ArgsHash: "h", ErrorCode: "X"}
	}
	return out
}

// longLines are console lines longer than a piece of a string, of
// characters JSON escapes (six bytes each), of HTML, of multibyte
// characters standing across every place a piece may end, of invalid
// UTF-8 (a byte alone, a sequence cut short, runs of continuation bytes),
// and of U+2028 and U+2029.
func longLines() []trace.LogEntry {
	lines := []string{
		strings.Repeat("\x01", 3*stringPiece+17),
		strings.Repeat("<a href=\"x\">&amp;</a>", stringPiece/4),
		strings.Repeat("\xff\x80\x80\x80\x80\xe2\x82", stringPiece/3),
		strings.Repeat("\u2028\u2029\\\"", stringPiece/2),
	}
	for pad := range 4 {
		for _, r := range []string{"é", "€", "𝄞"} {
			lines = append(lines, strings.Repeat("a", pad)+strings.Repeat(r, 2*stringPiece/len(r)+1))
		}
		lines = append(lines, strings.Repeat("a", pad+stringPiece-3)+"\xf0\x9d\x84"+strings.Repeat("b", spliceMin))
	}
	// A four-byte character just before a piece's end, then stray
	// continuation bytes: the piece ends after the character.
	lines = append(lines, strings.Repeat("a", stringPiece-4)+"𝄞\x80\x80"+strings.Repeat("b", spliceMin))
	out := make([]trace.LogEntry, len(lines))
	for i, l := range lines {
		out[i] = trace.LogEntry{Level: "log", Message: l, AtMS: float64(i)}
	}
	return out
}

// TestResultEventIsTheWholeEvent: the result event written in pieces is,
// byte for byte, the event encoded whole, whatever the response holds
// (HTML, separators and control characters in lines, whitespace inside
// and between a large value's tokens, no lines, no calls, an empty list
// of calls, an invalid value), and no single write holds much more than
// a piece.
func TestResultEventIsTheWholeEvent(t *testing.T) {
	spaced := `{ "a" : [ 1 , 2 , "x \" y\t z" ] ,` + "\n\t" + `"b" : "` + strings.Repeat("q ", 5000) + `" , "c" : { } }`
	bigArray := "[" + strings.Repeat(`"<&> \u2028 é", `, 20000) + "1]"
	tests := []struct {
		name string
		resp *execution.Response
	}{
		{"nil response", nil},
		{"nothing", &execution.Response{OK: true, Result: json.RawMessage(`2`), ExecutionID: "ex_1"}},
		{"small", &execution.Response{OK: true, Result: json.RawMessage(`{"a": 1}`), Logs: logLines(3, "<b>&"), Calls: []trace.Call{}, ExecutionID: "ex_1"}},
		{"many lines", &execution.Response{OK: true, Result: json.RawMessage(`null`), Logs: logLines(5000, "\x01\x1f\u2028\u2029 \"quoted\" <tag> & é"), ExecutionID: "ex_2", DurationMS: 12.5}},
		{"many calls", &execution.Response{OK: false, Error: fault.New(fault.ScriptError, "boom <x>"), Logs: logLines(10, "y"), Calls: calls(3000), ExecutionID: "ex_3"}},
		{"large value with spaces", &execution.Response{OK: true, Result: json.RawMessage(spaced), Logs: logLines(2, "z"), ExecutionID: "ex_4"}},
		{"large array", &execution.Response{OK: true, Result: json.RawMessage(bigArray), Calls: calls(2), ExecutionID: "ex_5"}},
		{"large invalid value", &execution.Response{OK: true, Result: json.RawMessage(`{"a": ` + strings.Repeat("1", 10000)), Logs: logLines(2, "z")}},
		{"small invalid value", &execution.Response{OK: true, Result: json.RawMessage(`{"a": `), Logs: logLines(2, "z")}},
		{"long lines", &execution.Response{OK: true, Result: json.RawMessage(`1`), Logs: longLines(), ExecutionID: "ex_6"}},
		{"suspended", &execution.Response{Status: execution.StatusSuspended, Pending: []execution.Pending{{CallID: 1, Server: "s", Tool: "t"}},
			ExpiresAt: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), Logs: logLines(100, strings.Repeat("w", 1000)), Calls: calls(5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := StreamResult{Status: 200, Response: tt.resp}
			want := wholeEvent(EventResult, res)
			var w writes
			if err := newEventWriter(&w).result(res); err != nil {
				t.Fatal(err)
			}
			if got := w.all.Bytes(); !bytes.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Fatalf("differs at byte %d of %d/%d:\n got …%.200s\nwant …%.200s", i, len(got), len(want), got[max(0, i-40):], want[max(0, i-40):])
			}
			for _, n := range w.sizes {
				// A piece, the item that crossed it, and the skeleton.
				if n > 2*eventChunk+8<<10 {
					t.Errorf("a write of %d bytes (pieces of %d)", n, eventChunk)
				}
			}
		})
	}
}

// TestEventsMatchTheWholeEvent: other events (lines, calls, dropped) are
// the same bytes as before; a long line is written in pieces; a buffer
// grown by one large event is not kept.
func TestEventsMatchTheWholeEvent(t *testing.T) {
	var w writes
	ew := newEventWriter(&w)
	events := []struct {
		name string
		data any
	}{
		{"log", trace.LogEntry{Level: "warn", Message: "<a> & \x02"}},
		{"call_end", calls(1)[0]},
		{EventDropped, Dropped{Dropped: 7}},
		{"log", trace.LogEntry{Level: "log", Message: strings.Repeat("\x01", 1<<20)}},
		{"log", trace.LogEntry{Level: "log", Message: "after"}},
		{"bad", map[string]any{"f": func() {}}},
		{"call_end", trace.Call{Server: "s", Tool: strings.Repeat("\x01", 1<<20)}},
	}
	for _, l := range longLines() {
		events = append(events, struct {
			name string
			data any
		}{"log", l})
	}
	var want bytes.Buffer
	for _, ev := range events {
		want.Write(wholeEvent(ev.name, ev.data))
		from := len(w.sizes)
		if err := ew.event(ev.name, ev.data); err != nil {
			t.Fatal(err)
		}
		for _, n := range w.sizes[from:] {
			// A line is written in pieces; nothing cuts a call's event.
			if ev.name == "log" && n > 2*eventChunk+8<<10 {
				t.Errorf("a line written in a write of %d bytes (pieces of %d)", n, eventChunk)
			}
		}
		if ew.buf.Cap() > eventKeep {
			t.Errorf("after %s the writer keeps a buffer of %d bytes", ev.name, ew.buf.Cap())
		}
	}
	if !bytes.Equal(w.all.Bytes(), want.Bytes()) {
		t.Error("the events differ from the events encoded whole")
	}

}
