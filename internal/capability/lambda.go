package capability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/tracectx"
)

// LambdaAPI is the part of the Lambda client the invoker uses.
type LambdaAPI interface {
	Invoke(ctx context.Context, in *lambda.InvokeInput, opts ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
}

// LambdaInvoker runs capabilities in the capability function (synchronous
// Invoke), so each one gets its own sandbox in its own function instance.
type LambdaInvoker struct {
	Client   LambdaAPI
	Function string // name or ARN of the capability function
}

// Invoke implements Invoker.
func (l LambdaInvoker) Invoke(ctx context.Context, inv execution.Invocation) (*execution.Response, error) {
	// The call's span crosses into the capability function with it
	// (Runner.Run picks it up there).
	inv.Parent.TraceParent, inv.Parent.TraceState = tracectx.Inject(ctx)
	payload, err := json.Marshal(inv)
	if err != nil {
		return nil, fault.Wrap(fault.Internal, err, "encoding the capability invocation")
	}
	out, err := l.Client.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(l.Function),
		InvocationType: types.InvocationTypeRequestResponse,
		Payload:        payload,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fault.Wrap(fault.Timeout, err, "invoking capability "+inv.Parent.Capability)
		}
		// A throttle is the capability function's reserved concurrency
		// (or the account's) at work, after the SDK's own retries: the
		// caller may well succeed later, so it is named and retryable.
		var throttle *types.TooManyRequestsException
		if errors.As(err, &throttle) {
			return nil, &fault.Error{Code: fault.Unavailable, Retryable: true,
				Message: "capability function throttled (concurrency limit reached) running " + inv.Parent.Capability + ": " + err.Error(),
				Details: map[string]any{"reason": "throttled", "throttle_reason": string(throttle.Reason)}}
		}
		return nil, &fault.Error{Code: fault.Unavailable, Retryable: true, Message: "invoking capability " + inv.Parent.Capability + ": " + err.Error()}
	}
	if out.FunctionError != nil {
		var le struct {
			ErrorMessage string `json:"errorMessage"`
			ErrorType    string `json:"errorType"`
		}
		_ = json.Unmarshal(out.Payload, &le)
		return nil, &fault.Error{Code: fault.Unavailable, Retryable: true,
			Message: fmt.Sprintf("capability function failed (%s): %s %s", aws.ToString(out.FunctionError), le.ErrorType, le.ErrorMessage)}
	}
	var resp execution.Response
	if err := json.Unmarshal(out.Payload, &resp); err != nil {
		return nil, fault.Wrap(fault.Internal, err, "the capability function answered something that is not a response")
	}
	return &resp, nil
}
