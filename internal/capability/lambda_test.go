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
