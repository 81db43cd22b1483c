package dynamoretry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

func TestRetryable(t *testing.T) {
	api := func(code string) error { return &smithy.GenericAPIError{Code: code} }
	txn := func(codes ...string) error {
		e := &types.TransactionCanceledException{}
		for _, c := range codes {
			e.CancellationReasons = append(e.CancellationReasons, types.CancellationReason{Code: aws.String(c)})
		}
		return e
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"throttled", api("ThrottlingException"), true},
		{"over capacity", api("ProvisionedThroughputExceededException"), true},
		{"a transient server error", api("InternalServerError"), true},
		{"a transaction conflict", api("TransactionConflictException"), true},
		{"a connection failure", errors.New("dial tcp: connection refused"), true},
		{"a failed condition", &types.ConditionalCheckFailedException{}, false},
		{"a validation error", api("ValidationException"), false},
		{"cancelled", context.Canceled, false},
		{"past the deadline", context.DeadlineExceeded, false},
		{"a transaction that conflicted", txn("None", "TransactionConflict"), true},
		{"a transaction whose condition failed", txn("ConditionalCheckFailed", "TransactionConflict"), false},
		{"a transaction cancelled for nothing to retry", txn("None"), false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("%s: Retryable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDo(t *testing.T) {
	fast := Policy{Tries: 4, Initial: time.Microsecond, Max: time.Microsecond}
	throttled := &smithy.GenericAPIError{Code: "ThrottlingException"}
	for _, tc := range []struct {
		name     string
		fails    int   // attempts that fail before one succeeds
		err      error // what they fail with
		attempts int
		ok       bool
	}{
		{"at once", 0, nil, 1, true},
		{"after two throttles", 2, throttled, 3, true},
		{"throttled past the tries", 10, throttled, 4, false},
		{"a failed condition is an answer", 10, &types.ConditionalCheckFailedException{}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempts, retries := 0, 0
			p := fast
			p.OnRetry = func() { retries++ }
			err := Do(context.Background(), p, func() error {
				attempts++
				if attempts <= tc.fails {
					return tc.err
				}
				return nil
			})
			if (err == nil) != tc.ok || attempts != tc.attempts || retries != attempts-1 {
				t.Fatalf("err %v after %d attempts, %d retries counted; want ok=%v after %d", err, attempts, retries, tc.ok, tc.attempts)
			}
			if !tc.ok && !errors.Is(err, tc.err) {
				t.Fatalf("the last error %v is not the write's %v", err, tc.err)
			}
		})
	}
	// The context bounds the attempts too.
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	err := Do(ctx, Policy{Tries: 100, Initial: time.Millisecond, Max: time.Millisecond}, func() error {
		attempts++
		if attempts == 3 {
			cancel()
		}
		return &smithy.GenericAPIError{Code: "ThrottlingException"}
	})
	if err == nil || attempts > 4 {
		t.Fatalf("cancelled: %v after %d attempts", err, attempts)
	}
}
