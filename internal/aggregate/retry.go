package aggregate

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/dynamoretry"
	"github.com/pml-sandbox/pml/internal/fault"
)

// retry runs write until it succeeds, fails for a reason retrying cannot
// fix (a failed condition among them: the callers read that as an
// answer), the attempts fail or ctx ends (dynamoretry.Do: its policy,
// whose attempts the batch's deadline bounds too; what still fails fails
// the batch, which Lambda retries), counting the retries. It returns the
// last error. The writes it retries turn the SDK's own retryer off
// (dynamoretry.NoSDKRetries).
func (a *Aggregator) retry(ctx context.Context, write func() error) error {
	p := dynamoretry.DefaultPolicy
	p.OnRetry = func() { a.stats.retries.Add(1) }
	return dynamoretry.Do(ctx, p, write)
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
