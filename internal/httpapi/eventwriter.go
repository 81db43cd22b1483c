package httpapi

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"slices"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/trace"
)

// eventWriter writes one stream's server-sent events through one buffer
// it reuses, and writes a long console line, and the result event, as it
// encodes them, in pieces of about eventChunk bytes. A client that stops
// reading then holds what the execution produced (the response's lines
// and calls), not copies of it: an event built whole was about that much
// again, twice over while it was copied, and six times the text for
// lines of control characters (each written as \u00XX).
type eventWriter struct {
	w   io.Writer
	buf bytes.Buffer
	enc *json.Encoder // into buf, as writeJSON encodes

	// piece and pieceEnc escape the pieces of a long string.
	piece    bytes.Buffer
	pieceEnc *json.Encoder
}

// eventChunk is how much of an event is encoded before it is written.
const eventChunk = 32 << 10

// eventKeep is the largest buffer kept between events: one large event
// (a call's) makes a large buffer, which is let go after it.
const eventKeep = 1 << 20

func newEventWriter(w io.Writer) *eventWriter {
	e := &eventWriter{w: w}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false) // as the plain response
	e.pieceEnc = json.NewEncoder(&e.piece)
	e.pieceEnc.SetEscapeHTML(false)
	return e
}

// event writes one event. JSON holds no raw newline, so the data is one
// line. A console line is written as result writes its lines: a long
// one in pieces.
func (e *eventWriter) event(name string, data any) error {
	e.head(name)
	if l, ok := data.(trace.LogEntry); ok {
		if err := e.writeLog(&l); err != nil {
			return err // a write's: a line always encodes
		}
	} else if err := e.encode(data); err != nil {
		e.encodeFailed(name, err)
	}
	e.buf.WriteString("\n\n") // a blank line ends the event
	return e.flush()
}

func (e *eventWriter) head(name string) {
	e.buf.Reset()
	e.buf.WriteString("event: ")
	e.buf.WriteString(name)
	e.buf.WriteString("\ndata: ")
}

// encode appends v's JSON to the buffer, without the newline Encode
// ends it with. On an error it appends nothing.
func (e *eventWriter) encode(v any) error {
	if err := e.enc.Encode(v); err != nil {
		return err
	}
	e.buf.Truncate(e.buf.Len() - 1)
	return nil
}

// encodeFailed puts an error in place of data that could not be encoded.
func (e *eventWriter) encodeFailed(name string, err error) {
	e.head(name)
	_ = e.encode(map[string]string{"error": err.Error()})
}

// flush writes what the buffer holds.
func (e *eventWriter) flush() error {
	_, err := e.w.Write(e.buf.Bytes())
	e.buf.Reset()
	if e.buf.Cap() > eventKeep {
		e.buf = bytes.Buffer{}
	}
	return err
}

// spliceMark names the places in a result's skeleton where its large
// parts go. It is random per process and never sent, so no value an
// execution returns or logs can contain it.
var spliceMark = func() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "pml-splice-" + hex.EncodeToString(b)
}()

// splice is one large part of a result: where its placeholder stands in
// the skeleton, the placeholder's JSON, and how to write the part.
type splice struct {
	at          int
	placeholder []byte
	write       func() error
}

// spliceMin is the smallest result value written on its own rather than
// in the skeleton.
const spliceMin = 4 << 10

// result writes the result event: the same bytes event would write for
// res, but the response's lines, calls and result value are encoded one
// at a time into the stream. The rest of the document (its skeleton,
// with a placeholder standing in each large part) is encoded first;
// then the skeleton is written up to each placeholder, the part in its
// place, and so on.
func (e *eventWriter) result(res StreamResult) error {
	if res.Response == nil {
		return e.event(EventResult, res)
	}
	r := *res.Response
	var parts []splice
	if len(r.Logs) > 0 {
		logs := r.Logs
		r.Logs = []trace.LogEntry{{Level: spliceMark + "-logs"}}
		parts = append(parts, splice{placeholder: e.marshal(r.Logs[0]), write: func() error { return writeEach(e, logs, e.writeLog) }})
	}
	if len(r.Calls) > 0 {
		calls := r.Calls
		r.Calls = []trace.Call{{Server: spliceMark + "-calls"}}
		parts = append(parts, splice{placeholder: e.marshal(r.Calls[0]), write: func() error { return writeEach(e, calls, func(c *trace.Call) error { return e.encode(c) }) }})
	}
	if len(r.Result) >= spliceMin && json.Valid(r.Result) {
		value := r.Result
		r.Result = json.RawMessage(`"` + spliceMark + `-result"`)
		parts = append(parts, splice{placeholder: r.Result, write: func() error { return e.compact(value) }})
	}
	e.head(EventResult)
	if err := e.enc.Encode(StreamResult{Status: res.Status, Response: &r}); err != nil {
		// As event would have: the parts cannot be what failed (lines
		// and calls always encode, the value was checked), so the whole
		// fails the same way.
		e.encodeFailed(EventResult, err)
		e.buf.WriteString("\n\n")
		return e.flush()
	}
	e.buf.WriteByte('\n')
	skeleton := slices.Clone(e.buf.Bytes())
	for i := range parts {
		if parts[i].at = bytes.Index(skeleton, parts[i].placeholder); parts[i].at < 0 {
			return e.event(EventResult, res) // cannot happen: each stands once
		}
	}
	slices.SortFunc(parts, func(a, b splice) int { return cmp.Compare(a.at, b.at) })
	e.buf.Reset()
	done := 0 // of the skeleton, written
	for _, p := range parts {
		e.buf.Write(skeleton[done:p.at])
		done = p.at + len(p.placeholder)
		if err := p.write(); err != nil {
			return err
		}
	}
	e.buf.Write(skeleton[done:])
	return e.flush()
}

// marshal is v's JSON as the event's encoder writes it, without the
// newline Encode adds.
func (e *eventWriter) marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// writeEach encodes items into the buffer with encode, comma-separated,
// writing it out whenever it holds eventChunk bytes.
func writeEach[T any](e *eventWriter, items []T, encode func(*T) error) error {
	for i := range items {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		if err := encode(&items[i]); err != nil {
			return err
		}
		if e.buf.Len() >= eventChunk {
			if err := e.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeLog appends a console line's JSON to the buffer; a long message
// is escaped and written in pieces (its JSON is up to six times its
// bytes). It returns a write's error: a line always encodes.
func (e *eventWriter) writeLog(l *trace.LogEntry) error {
	if len(l.Message) < spliceMin {
		return e.encode(l)
	}
	c := *l
	c.Message = spliceMark + "-message" // no character JSON escapes
	from := e.buf.Len()
	if err := e.encode(&c); err != nil {
		return err
	}
	skeleton := slices.Clone(e.buf.Bytes()[from:])
	at := bytes.Index(skeleton, []byte(c.Message))
	e.buf.Truncate(from)
	e.buf.Write(skeleton[:at])
	if err := e.writeString(l.Message); err != nil {
		return err
	}
	e.buf.Write(skeleton[at+len(c.Message):])
	return nil
}

// stringPiece is how much of a long string is escaped at once: at six
// bytes a byte at most (\u00XX), a piece's JSON fits in eventChunk.
const stringPiece = eventChunk / 6

// writeString appends s's JSON, without its quotes, as the event's
// encoder writes it, escaping it a piece at a time and writing the
// buffer out whenever it holds eventChunk bytes. Pieces end where
// encoding/json's walk over s, rune by rune, passes (never inside a
// valid UTF-8 sequence, which, cut, would come out as two U+FFFD), so
// the pieces' JSON is the whole string's.
func (e *eventWriter) writeString(s string) error {
	for len(s) > 0 {
		n := len(s)
		if n > stringPiece {
			n = stringPiece
			// A byte that is no continuation byte starts a step of the
			// walk; past three continuation bytes in a row, so does any
			// (no valid sequence is longer than four).
			for k := 0; k < utf8.UTFMax-1 && !utf8.RuneStart(s[n]); k++ {
				n--
			}
			if !utf8.RuneStart(s[n]) {
				n = stringPiece
			}
		}
		e.piece.Reset()
		_ = e.pieceEnc.Encode(s[:n]) // a string always encodes
		p := e.piece.Bytes()
		e.buf.Write(p[1 : len(p)-2]) // the quotes, and Encode's newline
		s = s[n:]
		if e.buf.Len() >= eventChunk {
			if err := e.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// compact writes a valid JSON value without the whitespace between its
// tokens, as encoding/json writes a json.RawMessage (without escaping
// HTML), in pieces.
func (e *eventWriter) compact(v []byte) error {
	inString, escaped := false, false
	for len(v) > 0 {
		n := min(len(v), eventChunk)
		start := 0
		for i, c := range v[:n] {
			switch {
			case inString:
				switch {
				case escaped:
					escaped = false
				case c == '\\':
					escaped = true
				case c == '"':
					inString = false
				}
			case c == '"':
				inString = true
			case c == ' ' || c == '\t' || c == '\n' || c == '\r':
				e.buf.Write(v[start:i])
				start = i + 1
			}
		}
		e.buf.Write(v[start:n])
		v = v[n:]
		if err := e.flush(); err != nil {
			return err
		}
	}
	return nil
}
