package xraysink

import (
	"context"

	"github.com/pml-sandbox/pml/internal/trace"
)

// Multi fans records out to several sinks.
type Multi []trace.Sink

// Record implements trace.Sink.
func (m Multi) Record(ctx context.Context, ex trace.Execution, calls []trace.Call) {
	for _, s := range m {
		s.Record(ctx, ex, calls)
	}
}

// RecordCall implements trace.CallRecorder for the sinks that do.
func (m Multi) RecordCall(ctx context.Context, c trace.Call) {
	for _, s := range m {
		if r, ok := s.(trace.CallRecorder); ok {
			r.RecordCall(ctx, c)
		}
	}
}

// StartExecution implements trace.Spans for the sinks that do.
func (m Multi) StartExecution(ctx context.Context, ex trace.Execution) context.Context {
	for _, s := range m {
		if sp, ok := s.(trace.Spans); ok {
			ctx = sp.StartExecution(ctx, ex)
		}
	}
	return ctx
}

// StartCall implements trace.Spans for the sinks that do.
func (m Multi) StartCall(ctx context.Context, c trace.Call) context.Context {
	for _, s := range m {
		if sp, ok := s.(trace.Spans); ok {
			ctx = sp.StartCall(ctx, c)
		}
	}
	return ctx
}

// Flush implements trace.Sink: every sink is flushed; the first error wins.
func (m Multi) Flush(ctx context.Context) error {
	var first error
	for _, s := range m {
		if err := s.Flush(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
