package lambdaevents

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	jsonv2 "github.com/go-json-experiment/json"

	"github.com/pml-sandbox/pml/internal/fault"
)

// RunEvent is the payload of the asynchronous invocation that runs an
// asynchronous execution: {"run": {"execution_id": "ex_…"}}. It names the
// execution only: the request is in the store of runs, where the front
// that accepted it recorded it.
type RunEvent struct {
	Run RunRef `json:"run"`
}

// RunRef names the execution to run.
type RunRef struct {
	ExecutionID string `json:"execution_id"`
}

// Invoker is the part of the Lambda client InvokeSelf uses.
type Invoker interface {
	Invoke(ctx context.Context, in *lambda.InvokeInput, opts ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
}

// InvokeSelf returns the deployment's launcher of asynchronous executions
// (a runs.Launcher): an asynchronous invocation (InvocationType Event) of
// function — the execute function itself — with the execution's RunEvent.
// Lambda queues it, retries it when it fails, and may deliver it twice;
// the run's claim makes every delivery after the first a no-op.
func InvokeSelf(client Invoker, function string) func(ctx context.Context, id string) error {
	return func(ctx context.Context, id string) error {
		payload, err := json.Marshal(RunEvent{Run: RunRef{ExecutionID: id}})
		if err != nil {
			return err
		}
		_, err = client.Invoke(ctx, &lambda.InvokeInput{FunctionName: aws.String(function), InvocationType: types.InvocationTypeEvent, Payload: payload})
		if err != nil {
			return fmt.Errorf("invoking %s to run %s: %w", function, id, err)
		}
		return nil
	}
}

// run runs an asynchronous execution from its RunEvent. An error is worth
// a retry (nothing ran: the store could not be read), and Lambda retries
// an asynchronous invocation that fails.
func (a *adapter) run(ctx context.Context, payload []byte) (any, error) {
	var ev RunEvent
	// A malformed event is answered, not failed: retrying it would not
	// make it better.
	if err := jsonv2.Unmarshal(payload, &ev, jsonv2.RejectUnknownMembers(true)); err != nil || ev.Run.ExecutionID == "" {
		a.Logger.WarnContext(ctx, "bad run event", "err", err)
		return map[string]any{"error": fault.New(fault.InvalidRequest, `a run invocation is {"run": {"execution_id": …}} and nothing else`)}, nil
	}
	if a.Runner == nil {
		a.Logger.WarnContext(ctx, "run event without a runner", "execution_id", ev.Run.ExecutionID)
		return map[string]any{"error": fault.New(fault.InvalidRequest, "this function runs no asynchronous executions")}, nil
	}
	err := a.Runner.Run(ctx, ev.Run.ExecutionID)
	a.flush(ctx)
	if err != nil {
		a.Logger.ErrorContext(ctx, "run failed to start", "execution_id", ev.Run.ExecutionID, "err", err)
		return nil, err
	}
	return ev.Run, nil
}

// SweepEvent is the payload of the deployment's schedule that continues
// runs whose runner died: {"sweep": {}}.
type SweepEvent struct {
	Sweep struct{} `json:"sweep"`
}

// sweep launches the runs whose runner died to be taken over. An error
// (the store could not be read) fails the invocation; the next minute's
// sweeps again.
func (a *adapter) sweep(ctx context.Context, payload []byte) (any, error) {
	var ev SweepEvent
	if err := jsonv2.Unmarshal(payload, &ev, jsonv2.RejectUnknownMembers(true)); err != nil {
		a.Logger.WarnContext(ctx, "bad sweep event", "err", err)
		return map[string]any{"error": fault.New(fault.InvalidRequest, `a sweep invocation is {"sweep": {}} and nothing else`)}, nil
	}
	if a.Runner == nil {
		return map[string]any{"swept": 0}, nil
	}
	n, err := a.Runner.Sweep(ctx)
	if err != nil {
		a.Logger.ErrorContext(ctx, "sweep failed", "err", err)
		return nil, err
	}
	if n > 0 {
		a.Logger.InfoContext(ctx, "runs whose runner died launched to be continued", "runs", n)
	}
	return map[string]any{"swept": n}, nil
}
