package tracedb

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/trace"
)

// SetMaxLineBytes sets the bound on one line of the file store for a test
// and returns a func that restores it. Tests using it must not run in
// parallel.
func SetMaxLineBytes(n int) (restore func()) {
	old := maxLineBytes
	maxLineBytes = n
	return func() { maxLineBytes = old }
}

// MaxLineBytes is the bound in force.
func MaxLineBytes() int { return maxLineBytes }

// MaxWriteTries is the most attempts at one write.
var MaxWriteTries = int32(retryBackoff.Tries)

// SetRetryBackoff sets the waits between write attempts for a test and
// returns a func that restores them. Tests using it must not run in
// parallel.
func SetRetryBackoff(initial, max time.Duration) (restore func()) {
	old := retryBackoff
	retryBackoff.Initial, retryBackoff.Max = initial, max
	return func() { retryBackoff = old }
}

// ExecutionItem is the execution item Record writes for ex and its calls
// (without the call items), for tests that write many executions fast.
func ExecutionItem(ex trace.Execution, calls []trace.Call, expires time.Time) (map[string]types.AttributeValue, error) {
	return marshalItem(newExecItem(ex, calls, expires.Unix()))
}
