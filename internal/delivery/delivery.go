// Package delivery is how PML Sandbox's HTTP front ends — the REST API and
// the MCP server — deliver an execution's answer: live, where the front
// the request came through carries a response as it is written
// (WithStreaming), and only once the execution's traces are written
// (Flush), so that a Lambda frozen right after answering loses nothing.
package delivery

import (
	"context"
	"log/slog"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
)

type streamingKey struct{}

// WithStreaming marks a request as coming through a front that carries a
// response as it is written (API Gateway's REST API in STREAM mode, the
// Lambda's streamed response): its event streams and MCP notifications go
// out live, as pml serve's do (which streams every request without the
// mark), instead of being held until the answer is whole.
func WithStreaming(ctx context.Context) context.Context {
	return context.WithValue(ctx, streamingKey{}, true)
}

// Streaming reports whether WithStreaming marked the request.
func Streaming(ctx context.Context) bool {
	on, _ := ctx.Value(streamingKey{}).(bool)
	return on
}

// DefaultFlushTimeout bounds a flush when the front sets no bound: long
// enough for a batch of trace records, short beside an answer's wait.
const DefaultFlushTimeout = 2 * time.Second

// Flush writes exec's traces before the answer goes out, within timeout
// (DefaultFlushTimeout when it is not positive) even when the request's
// own deadline has passed (the execution may have used it up); a failure
// is logged, never the caller's.
func Flush(ctx context.Context, exec execution.Executor, timeout time.Duration, log *slog.Logger) {
	if timeout <= 0 {
		timeout = DefaultFlushTimeout
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := exec.Flush(fctx); err != nil {
		log.WarnContext(ctx, "trace flush failed", "err", err)
	}
}
