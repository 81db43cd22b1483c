package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pml-sandbox/pml/internal/redact"
)

// errMessageTooLarge is returned by a capped body once a server sends a
// message over the limit. mcp-go reads whole messages into memory (a
// json.Decoder on the body, bufio.ReadString on SSE lines), so the cap has
// to sit under it, in the HTTP layer.
var errMessageTooLarge = errors.New("server sent a message over the size cap")

// maxErrorBody is how much of a non-2xx body mcp-go is given. It quotes
// such bodies whole in its errors, which reach scripts and logs; a refusal
// may echo the request's Authorization header, and a long one says nothing
// more useful than its start. Up to maxErrorRead bytes are read, masked,
// then cut to maxErrorBody (redact.Redactor.Cut): cut first, an echoed
// secret across the cut would leave its start.
const (
	maxErrorBody = 256
	maxErrorRead = 8 << 10
)

// sessionDeleteTimeout bounds the DELETE mcp-go sends when it closes a
// streamable HTTP session: its own bound is 5 s, and a server that never
// answers must not hold up Close that long.
const sessionDeleteTimeout = time.Second

// tripwire records that a capped body hit its limit. A call puts one in its
// context; the RoundTripper finds it there (mcp-go derives every request's
// context from the caller's), so the call learns why its request failed even
// when mcp-go swallows the read error (it does on SSE-typed responses).
type tripwire struct{ tripped atomic.Bool }

type tripwireKey struct{}

func withTripwire(ctx context.Context, tw *tripwire) context.Context {
	return context.WithValue(ctx, tripwireKey{}, tw)
}

// capTransport bounds the size of every message a server sends: a whole
// body for JSON responses, each event for text/event-stream responses
// (an SSE stream lives for the whole connection, so only its events can be
// bounded).
type capTransport struct {
	base  http.RoundTripper
	limit int64
	// red masks a non-2xx body before it is cut: every secret the Set
	// knows, as errors are masked.
	red *redact.Redactor
}

func (t *capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var cancel context.CancelFunc
	if req.Method == http.MethodDelete {
		var ctx context.Context
		ctx, cancel = context.WithTimeout(req.Context(), sessionDeleteTimeout)
		req = req.Clone(ctx)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		if cancel != nil {
			cancel()
		}
		return nil, err
	}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	tw, _ := req.Context().Value(tripwireKey{}).(*tripwire)
	body := resp.Body
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Masked, then cut: mcp-go still parses a short JSON-RPC error
		// answer and quotes the start of anything else.
		body = struct {
			io.Reader
			io.Closer
		}{strings.NewReader(t.errorBody(body)), body}
	}
	resp.Body = &cappedBody{
		rc:       body,
		limit:    t.limit,
		perEvent: mediaType == "text/event-stream",
		tw:       tw,
		cancel:   cancel,
	}
	return resp, nil
}

// errorBody is what mcp-go is given of a non-2xx body: its start, every
// known secret masked (in JSON as a parser reads it), cut to maxErrorBody
// with no start of a secret left at the cut.
func (t *capTransport) errorBody(body io.Reader) string {
	raw, err := io.ReadAll(io.LimitReader(body, maxErrorRead+1))
	more := err != nil || len(raw) > maxErrorRead
	raw = raw[:min(len(raw), maxErrorRead)]
	text := string(t.red.JSON(raw))
	if more {
		return t.red.CutHead(text, maxErrorBody)
	}
	return t.red.Cut(text, maxErrorBody)
}

// cappedBody fails reads once a message passes the limit.
type cappedBody struct {
	rc       io.ReadCloser
	limit    int64
	perEvent bool
	tw       *tripwire
	cancel   context.CancelFunc

	n      int64 // bytes in the current message
	lastNL bool  // the previous significant byte was '\n'
	err    error
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	if !b.perEvent {
		b.n += int64(n)
		if b.n > b.limit {
			return 0, b.trip()
		}
		return n, err
	}
	// An SSE event ends at a blank line; '\r' is ignored so CRLF streams
	// count the same.
	for _, c := range p[:n] {
		switch c {
		case '\r':
		case '\n':
			if b.lastNL {
				b.n = 0
			}
			b.lastNL = true
		default:
			b.lastNL = false
			b.n++
		}
	}
	if b.n > b.limit {
		return 0, b.trip()
	}
	return n, err
}

func (b *cappedBody) trip() error {
	b.err = fmt.Errorf("%w (%d bytes)", errMessageTooLarge, b.limit)
	if b.tw != nil {
		b.tw.tripped.Store(true)
	}
	return b.err
}

func (b *cappedBody) Close() error {
	err := b.rc.Close()
	if b.cancel != nil {
		b.cancel()
	}
	return err
}
