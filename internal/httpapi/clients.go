package httpapi

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/httpjson"
)

// ClientLimits bound how slowly a client may send its request body and
// read its response, so that a client that stops half way holds a
// connection, a goroutine and a partial body for seconds, not for as long
// as it likes. They need the connection itself (read and write deadlines):
// `pml serve` sets them; behind API Gateway the Lambda has no socket.
type ClientLimits struct {
	// BodyIdle is the longest a request body may pause.
	BodyIdle time.Duration
	// BodyMinRate is the average rate, in bytes per second, a body must
	// keep after its first BodyGrace.
	BodyMinRate int64
	BodyGrace   time.Duration
	// WriteIdle is the longest a write of the response may wait for the
	// client to read: an event stream whose reader stopped is cut then.
	WriteIdle time.Duration
}

// DefaultClientLimits are `pml serve`'s: a stalled body is cut within 5 s,
// a trickling one once it falls under 16 KiB/s after 10 s (a 1 MiB body
// may take 74 s), and a response the client stops reading within 10 s.
func DefaultClientLimits() ClientLimits {
	return ClientLimits{BodyIdle: 5 * time.Second, BodyMinRate: 16 << 10, BodyGrace: 10 * time.Second, WriteIdle: 10 * time.Second}
}

// writeChunk is the most written under one write deadline: a large
// response goes out in pieces, each with its own WriteIdle, so the rate it
// demands of the client is writeChunk per WriteIdle (6.4 KiB/s by default),
// not the whole response's size.
const writeChunk = 64 << 10

// guardClients applies l to every request: a body is read under a read
// deadline that each read moves on (BodyIdle, or sooner as the minimum
// rate demands), and every write of the response under a write deadline.
// A body that misses its deadline is answered 408 here, and whatever the
// handler answers after is dropped; the connection is closed after.
func guardClients(l ClientLimits, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gw := &guardedWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: l.WriteIdle}
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			gb := &guardedBody{body: r.Body, w: gw, l: l, start: time.Now(), log: log, r: r}
			// Set now, before the handler reads: a handler that answers
			// without reading leaves net/http to discard the rest of the
			// body, under this deadline too.
			gb.setDeadline(gb.start)
			r.Body = gb
		}
		next.ServeHTTP(gw, r)
	})
}

// guardedBody is a request body read under deadlines.
type guardedBody struct {
	body  io.ReadCloser
	w     *guardedWriter
	l     ClientLimits
	start time.Time
	n     int64 // bytes read
	err   error // the timeout, once it happened
	done  bool  // the body reached its end: no deadline any more
	log   *slog.Logger
	r     *http.Request
}

// setDeadline sets the deadline of the next read: BodyIdle from now, or
// the moment the body falls under its minimum rate if that is sooner.
func (b *guardedBody) setDeadline(now time.Time) {
	d := now.Add(b.l.BodyIdle)
	if b.l.BodyMinRate > 0 {
		due := b.start.Add(b.l.BodyGrace + time.Duration(float64(b.n+1)/float64(b.l.BodyMinRate)*float64(time.Second)))
		if due.Before(d) {
			d = due
		}
	}
	// Where the connection takes no deadline (HTTP/2 over a proxy, a
	// test's recorder), bodies are read as before.
	_ = b.w.rc.SetReadDeadline(d)
}

func (b *guardedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if !b.done {
		b.setDeadline(time.Now())
	}
	if b.n == 0 {
		b.w.extend() // the first read may answer "100 Continue"
	}
	n, err := b.body.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF && !b.done:
		// net/http now reads the connection in the background to notice
		// a client that leaves; that read must not time out.
		b.done = true
		_ = b.w.rc.SetReadDeadline(time.Time{})
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		b.err = b.timeout()
		return n, b.err
	}
	return n, err
}

func (b *guardedBody) Close() error { return b.body.Close() }

// timeout answers the request 408 and returns the error the handler's
// read gets.
func (b *guardedBody) timeout() error {
	elapsed := time.Since(b.start)
	e := fault.New(fault.Timeout, "the request body arrived too slowly (%d bytes in %v): a body may pause at most %v, and after %v must keep to %d bytes per second",
		b.n, elapsed.Round(time.Millisecond), b.l.BodyIdle, b.l.BodyGrace, b.l.BodyMinRate)
	b.log.InfoContext(b.r.Context(), "request body too slow", "method", b.r.Method, "path", b.r.URL.Path, "bytes", b.n, "elapsed_ms", elapsed.Milliseconds())
	b.w.Header().Set("Connection", "close")
	httpjson.WriteError(b.w, http.StatusRequestTimeout, e)
	b.w.answered = true
	return e
}

// guardedWriter writes a response under write deadlines. Once the body
// guard has answered, it drops what the handler writes.
type guardedWriter struct {
	http.ResponseWriter
	rc       *http.ResponseController
	idle     time.Duration
	answered bool
}

func (g *guardedWriter) extend() {
	if g.idle > 0 {
		_ = g.rc.SetWriteDeadline(time.Now().Add(g.idle))
	}
}

func (g *guardedWriter) WriteHeader(code int) {
	if g.answered {
		return
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	if g.answered {
		return len(p), nil
	}
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), writeChunk)]
		g.extend()
		n, err := g.ResponseWriter.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
		p = p[len(chunk):]
	}
	return written, nil
}

// FlushError flushes under a write deadline, and says when the client did
// not take what was flushed (http.ResponseController.Flush returns it).
func (g *guardedWriter) FlushError() error {
	g.extend()
	return flushError(g.ResponseWriter)
}

// Flush implements http.Flusher for handlers that want no error.
func (g *guardedWriter) Flush() { _ = g.FlushError() }

// Unwrap lets http.ResponseController reach the connection.
func (g *guardedWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// flushError flushes w, returning the first writer down its chain that
// reports a flush's error (net/http's own does).
func flushError(w http.ResponseWriter) error {
	for {
		switch t := w.(type) {
		case interface{ FlushError() error }:
			return t.FlushError()
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		case http.Flusher:
			t.Flush()
			return nil
		default:
			return http.ErrNotSupported
		}
	}
}
