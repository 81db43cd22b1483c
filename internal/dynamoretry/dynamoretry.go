// Package dynamoretry retries DynamoDB writes the way the project's stores
// that must not lose them do (the trace store, the counter aggregator):
// AWS's "full jitter" exponential backoff, a bounded number of attempts, the
// SDK's own retryer turned off for those writes, and one judgement of what
// is worth retrying.
//
// Ours is the one retryer kept because BatchWriteItem's partial success
// (unprocessed items) is no error to the SDK, so a loop of our own is needed
// anyway; stacked, the SDK's three attempts inside each of ours made up to
// 27 requests per write, with two backoffs that knew nothing of each other
// and retry counts that missed most of them. Reads keep the SDK's retryer.
package dynamoretry

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/cenkalti/backoff/v5"
)

// Policy says how a write is retried. The zero Policy is DefaultPolicy's.
type Policy struct {
	// Tries bounds the attempts, the first included (default 9); the
	// context bounds them too.
	Tries int
	// Initial and Max shape the backoff: each wait is drawn from
	// [0, 2×interval), the interval doubling from Initial up to Max
	// (defaults 25 ms and 1 s: [0, 50 ms) up to [0, 2 s)), so that writers
	// throttled together do not retry together.
	Initial, Max time.Duration
	// OnRetry, when set, is called before each new attempt (to count
	// them).
	OnRetry func()
}

// DefaultPolicy: 9 attempts, waits from [0, 50 ms) doubling up to [0, 2 s).
var DefaultPolicy = Policy{Tries: 9, Initial: 25 * time.Millisecond, Max: time.Second}

// NoSDKRetries turns the SDK's retryer off for one call (pass it as the
// call's option): Do retries it.
func NoSDKRetries(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }

// Do runs write until it succeeds, fails for a reason retrying cannot fix
// (see Retryable: a failed condition among them, which callers read as an
// answer), the policy's attempts fail, or ctx ends. It returns the last
// error.
func Do(ctx context.Context, p Policy, write func() error) error {
	p = p.withDefaults()
	b := &backoff.ExponentialBackOff{InitialInterval: p.Initial, RandomizationFactor: 1, Multiplier: 2, MaxInterval: p.Max}
	opts := []backoff.RetryOption{
		backoff.WithBackOff(b),
		backoff.WithMaxTries(uint(p.Tries)),
		backoff.WithMaxElapsedTime(0), // ctx bounds the time
	}
	if p.OnRetry != nil {
		opts = append(opts, backoff.WithNotify(func(error, time.Duration) { p.OnRetry() }))
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := write()
		if err != nil && !Retryable(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, opts...)
	return err
}

func (p Policy) withDefaults() Policy {
	if p.Tries <= 0 {
		p.Tries = DefaultPolicy.Tries
	}
	if p.Initial <= 0 {
		p.Initial = DefaultPolicy.Initial
	}
	if p.Max <= 0 {
		p.Max = DefaultPolicy.Max
	}
	return p
}

// Retryable reports throttling, transaction conflicts (two writers adding
// to one item at the same moment), DynamoDB's transient errors and
// connection failures (DynamoDB may be back after a pause). A cancelled
// context, a failed condition, a validation error and anything else
// DynamoDB answered are final.
func Retryable(err error) bool {
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
	return true
}
