package capability_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// fakeLambda answers every Invoke with err.
type fakeLambda struct{ err error }

func (f fakeLambda) Invoke(context.Context, *lambda.InvokeInput, ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	return nil, f.err
}

func TestThrottledInvokeIsRetryableUnavailable(t *testing.T) {
	msg := "Rate Exceeded."
	throttle := &types.TooManyRequestsException{Message: &msg, Reason: types.ThrottleReasonReservedFunctionConcurrentInvocationLimitExceeded}
	// The SDK hands the service error back wrapped in an OperationError
	// once its own retries are spent.
	wrapped := &smithy.OperationError{ServiceID: "Lambda", OperationName: "Invoke", Err: throttle}
	for _, err := range []error{throttle, wrapped} {
		inv := capability.LambdaInvoker{Client: fakeLambda{err: err}, Function: "stack-capability"}
		_, got := inv.Invoke(context.Background(), execution.Invocation{Parent: execution.Parent{Capability: "iso:x"}})
		var fe *fault.Error
		if !errors.As(got, &fe) || fe.Code != fault.Unavailable || !fe.Retryable {
			t.Fatalf("%T: want retryable UNAVAILABLE, got %#v", err, got)
		}
		d, _ := fe.Details.(map[string]any)
		if d["reason"] != "throttled" || d["throttle_reason"] != string(throttle.Reason) {
			t.Fatalf("throttle not named: %#v", fe)
		}
	}
}

// recordingLambda keeps the payload it is invoked with and answers ok.
type recordingLambda struct{ payload []byte }

func (f *recordingLambda) Invoke(_ context.Context, in *lambda.InvokeInput, _ ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	f.payload = in.Payload
	return &lambda.InvokeOutput{Payload: []byte(`{"ok":true,"result":1,"execution_id":"ex_child"}`)}, nil
}

// ctxExecutor keeps the context it is asked to execute under.
type ctxExecutor struct {
	execution.Executor
	ctx context.Context
}

func (e *ctxExecutor) Execute(ctx context.Context, req execution.Request) *execution.Response {
	e.ctx = ctx
	return &execution.Response{OK: true, ExecutionID: "ex_child"}
}

// TestTraceContextCrossesIntoTheCapabilityFunction: the calling span goes
// into the invocation's lineage, and the runner on the other side runs the
// capability under it; without one the lineage carries none.
func TestTraceContextCrossesIntoTheCapabilityFunction(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	reg := capability.NewFileRegistry(t.TempDir() + "/caps.json")
	if _, err := reg.Save(context.Background(), capability.Capability{Name: "iso:x", Code: "return 1"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{parent, ""} {
		fl := &recordingLambda{}
		inv := capability.LambdaInvoker{Client: fl, Function: "stack-capability"}
		ctx := tracectx.Extract(context.Background(), tp, "")
		if _, err := inv.Invoke(ctx, execution.Invocation{Parent: execution.Parent{Capability: "iso:x"}, Version: 1}); err != nil {
			t.Fatal(err)
		}
		got, ferr := execution.DecodeInvocation(fl.payload)
		if ferr != nil || got.Parent.TraceParent != tp {
			t.Fatalf("payload %s: %v", fl.payload, ferr)
		}
		exec := &ctxExecutor{}
		r := &capability.Runner{Registry: reg, Executor: exec}
		if _, err := r.Run(context.Background(), got); err != nil {
			t.Fatal(err)
		}
		if carried, _ := tracectx.Inject(exec.ctx); carried != tp {
			t.Fatalf("the capability ran under %q; want %q", carried, tp)
		}
	}
}
