package lambdaevents

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
)

// CapabilityRunner runs one capability invocation (capability.Runner).
type CapabilityRunner interface {
	Run(ctx context.Context, inv execution.Invocation) (*execution.Response, error)
}

// capabilityFlushTimeout bounds writing the child's traces before
// answering.
const capabilityFlushTimeout = 2 * time.Second

// CapabilityHandler is the capability function's handler: the execute
// function (or this one, for a nested capability) invokes it synchronously
// with an execution.Invocation; it answers the run's document. A payload
// that is not an invocation, or a capability that does not exist, is a
// document whose error says so, never a function error: the caller's call
// fails with that error, and Lambda does not retry it.
func CapabilityHandler(run CapabilityRunner, exec execution.Executor, log *slog.Logger) func(ctx context.Context, payload json.RawMessage) (*execution.Response, error) {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, payload json.RawMessage) (*execution.Response, error) {
		inv, ferr := execution.DecodeInvocation(payload)
		if ferr != nil {
			return &execution.Response{Error: ferr}, nil
		}
		resp, err := run.Run(ctx, inv)
		if err != nil {
			return &execution.Response{Error: fault.As(err)}, nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), capabilityFlushTimeout)
		defer cancel()
		if err := exec.Flush(fctx); err != nil {
			log.WarnContext(ctx, "trace flush failed", "err", err)
		}
		return resp, nil
	}
}
