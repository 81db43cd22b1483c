package tracedb_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pml-sandbox/pml/internal/tracedb"
)

// failingDynamo is a DynamoDB endpoint that answers every request with one
// error and counts the requests of each operation, so a test sees every
// attempt the SDK makes, its own retries included.
type failingDynamo struct {
	status      int
	errType     string
	batchWrites atomic.Int32
	updates     atomic.Int32
}

func (f *failingDynamo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	switch strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.") {
	case "BatchWriteItem":
		f.batchWrites.Add(1)
	case "UpdateItem":
		f.updates.Add(1)
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#`+f.errType+`","message":"no"}`)
}

// TestWritesAreRetriedByOneLoop: a write is attempted MaxWriteTries times
// when the failure is transient and once when it is not, whatever retryer
// the client was built with: the SDK's own (here the standard one with 3
// attempts) does not multiply the attempts.
func TestWritesAreRetriedByOneLoop(t *testing.T) {
	defer tracedb.SetRetryBackoff(time.Millisecond, time.Millisecond)()
	tests := []struct {
		name      string
		status    int
		errType   string
		wantTries int32
	}{
		{"throttled", http.StatusBadRequest, "ProvisionedThroughputExceededException", tracedb.MaxWriteTries},
		{"server error", http.StatusInternalServerError, "InternalServerError", tracedb.MaxWriteTries},
		{"not retryable", http.StatusBadRequest, "ValidationException", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &failingDynamo{status: tt.status, errType: tt.errType}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			db := dynamodb.New(dynamodb.Options{
				Region:           "us-east-1",
				BaseEndpoint:     aws.String(srv.URL),
				Credentials:      credentials.NewStaticCredentialsProvider("id", "secret", ""),
				RetryMaxAttempts: 3,
			})
			s := tracedb.NewDynamo(db, "traces", 0, slog.New(slog.DiscardHandler))
			ex, calls := execution("ex_1", 2, "a:x", "b:y") // 3 items; the counters are the aggregator's
			s.Record(context.Background(), ex, calls)
			if err := s.Flush(context.Background()); err == nil {
				t.Fatal("Flush reported success against a failing DynamoDB")
			}
			if got := fake.batchWrites.Load(); got != tt.wantTries {
				t.Errorf("%d BatchWriteItem requests; want %d", got, tt.wantTries)
			}
			if got := fake.updates.Load(); got != 0 {
				t.Errorf("%d UpdateItem requests; an execution writes no counters", got)
			}
			st := s.Stats()
			if want := int64(3 * (tt.wantTries - 1)); st.Retried != want || st.Failed != 3 || st.Written != 0 {
				t.Errorf("stats %+v; want %d retried, 3 failed", st, want)
			}
		})
	}
}
