package lambdaevents

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/pml-sandbox/pml/internal/delivery"
	"github.com/pml-sandbox/pml/internal/fault"
)

// restStream serves a REST API (payload 1.0) event through the handler as
// a streamed response: once the handler has written its status and
// headers they go out as the response's prelude, and every write after is
// passed on as it is made (aws-lambda-go posts the response to the Runtime
// API chunk by chunk). The handler runs on after this returns; when it
// ends, the stream and ctx end (cancel).
func (a *adapter) restStream(ctx context.Context, cancel context.CancelFunc, payload json.RawMessage) (any, error) {
	var ev events.APIGatewayProxyRequest
	if err := json.Unmarshal(payload, &ev); err != nil {
		cancel()
		return nil, fault.Wrap(fault.InvalidRequest, err, "bad REST API event")
	}
	sw := newStreamWriter()
	req, ferr := restRequest(delivery.WithStreaming(ctx), ev)
	go func() {
		defer cancel()
		defer sw.close()
		if ferr != nil {
			writeBadRequest(sw, ferr)
			return
		}
		a.HTTP.ServeHTTP(sw, req)
	}()
	head := <-sw.ready
	out := &events.APIGatewayProxyStreamingResponse{StatusCode: head.status, MultiValueHeaders: map[string][]string{}, Body: sw.body}
	for k, vs := range head.header {
		if hopByHop[k] {
			continue
		}
		out.MultiValueHeaders[k] = vs
	}
	return out, nil
}

// hopByHop are headers of one connection, which API Gateway sets itself:
// a streamed response's prelude must not carry them.
var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true, "Content-Length": true}

// streamHead is a response's status and headers, as written.
type streamHead struct {
	status int
	header http.Header
}

// streamWriter is the handler's http.ResponseWriter for a streamed
// response: the status and headers are handed over once (ready), and the
// body goes through a pipe that aws-lambda-go reads as it sends.
type streamWriter struct {
	header http.Header
	once   sync.Once
	ready  chan streamHead
	body   *io.PipeReader
	pipe   *io.PipeWriter
}

func newStreamWriter() *streamWriter {
	r, w := io.Pipe()
	return &streamWriter{header: http.Header{}, ready: make(chan streamHead, 1), body: r, pipe: w}
}

// Header implements http.ResponseWriter.
func (s *streamWriter) Header() http.Header { return s.header }

// WriteHeader implements http.ResponseWriter: the first status wins.
func (s *streamWriter) WriteHeader(status int) {
	s.once.Do(func() { s.ready <- streamHead{status: status, header: s.header.Clone()} })
}

// Write implements http.ResponseWriter; it returns once the bytes were
// taken for sending (or the stream was closed).
func (s *streamWriter) Write(p []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return s.pipe.Write(p)
}

// Flush implements http.Flusher: every Write is sent as it is made.
func (s *streamWriter) Flush() {}

// close ends the body (a handler that wrote nothing answers 200).
func (s *streamWriter) close() {
	s.WriteHeader(http.StatusOK)
	_ = s.pipe.Close()
}
