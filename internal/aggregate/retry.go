package aggregate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/cenkalti/backoff/v5"

	"github.com/pml-sandbox/pml/internal/fault"
)

// maxTries bounds the attempts at one write, the first included; the
// batch's deadline bounds them too. What still fails fails the batch,
// which Lambda retries.
const maxTries = 9

// Backoff between attempts: full jitter, from [0, 50 ms) doubling up to
// [0, 2 s), so that aggregators throttled together (or whose transactions
// conflicted on a counter) do not retry together. Variables for the tests.
var (
	retryInitial = 25 * time.Millisecond
	retryMax     = time.Second
)

// noSDKRetries turns the SDK's retryer off for the writes, which retry
// retries: one loop, one backoff, and attempts that are counted.
func noSDKRetries(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }

// retry runs write until it succeeds, fails for a reason retrying cannot
// fix (a failed condition among them: the callers read that as an answer),
// maxTries attempts fail or ctx ends. It returns the last error.
func (a *Aggregator) retry(ctx context.Context, write func() error) error {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     retryInitial,
		RandomizationFactor: 1,
		Multiplier:          2,
		MaxInterval:         retryMax,
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := write()
		if err != nil && !retryable(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	},
		backoff.WithBackOff(b),
		backoff.WithMaxTries(maxTries),
		backoff.WithMaxElapsedTime(0), // ctx bounds the time
		backoff.WithNotify(func(error, time.Duration) { a.stats.retries.Add(1) }),
	)
	return err
}

// retryable reports throttling, transaction conflicts (two aggregators
// adding to one counter at the same moment) and other transient failures.
func retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) {
		for _, r := range canceled.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed", "ValidationError", "ItemCollectionSizeLimitExceeded":
				return false
			}
		}
		return slices.ContainsFunc(canceled.CancellationReasons, func(r types.CancellationReason) bool {
			switch aws.ToString(r.Code) {
			case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
				return true
			}
			return false
		})
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
			"TransactionConflictException", "TransactionInProgressException",
			"InternalServerError", "ServiceUnavailable":
			return true
		}
		return false
	}
	return true // connection failures: DynamoDB may be back after a pause
}

// conditionFailed reports a PutItem or UpdateItem whose condition failed.
func conditionFailed(err error) bool {
	var cf *types.ConditionalCheckFailedException
	return errors.As(err, &cf)
}

// markerExists reports a chunk transaction cancelled because its "done"
// marker (the first item) exists: the chunk was applied already.
func markerExists(err error) bool {
	var canceled *types.TransactionCanceledException
	return errors.As(err, &canceled) && len(canceled.CancellationReasons) > 0 &&
		aws.ToString(canceled.CancellationReasons[0].Code) == "ConditionalCheckFailed"
}

// wrapf is fault.Wrap with a formatted message.
func wrapf(code fault.Code, err error, format string, a ...any) error {
	return fault.Wrap(code, err, fmt.Sprintf(format, a...))
}
