package mcp

import (
	"context"
	"errors"
	"log/slog"
)

// sendResponseFailed is what mcp-go's streamable HTTP transport logs when
// posting its answer to a server's request fails.
const sendResponseFailed = "failed to send response to server"

// transportLogger is the log mcp-go's transports write to: log, except
// that an answer to a server's question whose sending was cancelled is not
// an error. mcp-go posts that answer under the context of the call the
// question came in; a server that reads the answer and finishes the call
// before the post's own reply is in ends the call, which cancels the post,
// and mcp-go logs a failure for an answer that arrived (seen in `pml run`
// under load, an ERROR line beside a good result). Where the call itself
// was cancelled, the call's own error says so.
func transportLogger(log *slog.Logger) *slog.Logger {
	return slog.New(quietCancelled{log.Handler()})
}

// quietCancelled logs sendResponseFailed for a cancelled context at Debug.
type quietCancelled struct{ slog.Handler }

// Handle implements slog.Handler.
func (h quietCancelled) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == sendResponseFailed && r.Level > slog.LevelDebug && cancelled(r) {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, r.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h quietCancelled) WithAttrs(as []slog.Attr) slog.Handler {
	return quietCancelled{h.Handler.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h quietCancelled) WithGroup(name string) slog.Handler {
	return quietCancelled{h.Handler.WithGroup(name)}
}

// cancelled reports an "err" attribute that is, or wraps, context.Canceled.
func cancelled(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" && errors.Is(err, context.Canceled) {
			found = true
		}
		return !found
	})
	return found
}
