package tracedb_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/pml-sandbox/pml/internal/aggregate"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/testutil/ddbstream"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

func TestMain(m *testing.M) { os.Exit(dynamolocal.Run(m)) }

// execution makes an execution with n calls over the given tools.
func execution(id string, n int, tools ...string) (trace.Execution, []trace.Call) {
	ex := trace.Execution{ID: id, CodeHash: "h", CodeBytes: 10, Status: "ok", StartedAt: time.Now().UTC(), DurationMS: 1.5, Source: "test", Calls: n}
	calls := make([]trace.Call, n)
	for i := range calls {
		server, tool, _ := strings.Cut(tools[i%len(tools)], ":")
		calls[i] = trace.Call{ExecutionID: id, CallID: i + 1, Server: server, Tool: tool, Kind: trace.KindMCP,
			StartedAt: time.Now().UTC(), DurationMS: 0.5, OK: i%7 != 0, ArgsBytes: 10, ResultBytes: 20}
		if !calls[i].OK {
			calls[i].ErrorCode = fault.ToolError
		}
	}
	return ex, calls
}

func dynamoStore(t testing.TB, wrap func(tracedb.DynamoAPI) tracedb.DynamoAPI, log *slog.Logger) (*tracedb.Dynamo, *dynamodb.Client) {
	t.Helper()
	db := dynamolocal.Start(t).Client()
	table := dynamolocal.TableName(t)
	if err := tracedb.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	var api tracedb.DynamoAPI = db
	if wrap != nil {
		api = wrap(db)
	}
	return tracedb.NewDynamo(api, table, 0, log), db
}

// aggregated is the DynamoDB store as deployed: its co-occurrence counters
// are the aggregator's, fed the table's real stream records. RelatedTools
// first hands the aggregator every record the stream has not given it yet,
// in batches of 100.
type aggregated struct {
	*tracedb.Dynamo
	stream *ddbstream.Reader
	agg    *aggregate.Aggregator
}

func aggregatedStore(t testing.TB, opts aggregate.Options) *aggregated {
	t.Helper()
	inst := dynamolocal.Start(t)
	db := inst.Client()
	table := dynamolocal.TableName(t)
	ctx := context.Background()
	if err := tracedb.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	r, err := ddbstream.Open(ctx, inst, table)
	if err != nil {
		t.Fatal(err)
	}
	opts.DB, opts.Table, opts.Extract, opts.MaxTransactItems = db, table, tracedb.CoOccurrence, 10 // DynamoDB Local's limit
	opts.Log = slog.New(slog.DiscardHandler)
	agg, err := aggregate.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &aggregated{Dynamo: tracedb.NewDynamo(db, table, 0, nil), stream: r, agg: agg}
}

func (a *aggregated) RelatedTools(ctx context.Context, tool string, limit int) ([]tracedb.Related, error) {
	recs, err := a.stream.Next(ctx)
	if err != nil {
		return nil, err
	}
	for start := 0; start < len(recs); start += 100 {
		if err := a.agg.Handle(ctx, events.DynamoDBEvent{Records: recs[start:min(start+100, len(recs))]}); err != nil {
			return nil, err
		}
	}
	return a.Dynamo.RelatedTools(ctx, tool, limit)
}

func stores(t *testing.T, f func(t *testing.T, s tracedb.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, tracedb.NewMemory(0)) })
	t.Run("file", func(t *testing.T) { f(t, tracedb.NewFile(filepath.Join(t.TempDir(), "traces.jsonl"), 0)) })
	t.Run("dynamodb", func(t *testing.T) { f(t, aggregatedStore(t, aggregate.Options{})) })
}

func TestWriteAndReadBack1000CallsAcross50Executions(t *testing.T) {
	stores(t, func(t *testing.T, s tracedb.Store) {
		ctx := context.Background()
		for i := range 50 {
			ex, calls := execution(fmt.Sprintf("ex_%02d", i), 20, "a:x", "b:y", "c:z")
			s.Record(ctx, ex, calls)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		total := 0
		for i := range 50 {
			id := fmt.Sprintf("ex_%02d", i)
			ex, calls, err := s.GetExecution(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if ex.ID != id || ex.Status != "ok" || len(calls) != 20 {
				t.Fatalf("%s: %+v with %d calls", id, ex, len(calls))
			}
			for j, c := range calls {
				if c.CallID != j+1 || c.ExecutionID != id || c.ArgsBytes != 10 {
					t.Fatalf("%s call %d: %+v", id, j, c)
				}
			}
			total += len(calls)
		}
		if total != 1000 {
			t.Fatalf("read back %d calls", total)
		}
		if _, _, err := s.GetExecution(ctx, "ex_missing"); fault.CodeOf(err) != fault.NotFound {
			t.Fatalf("missing execution: %v", err)
		}
		rel, err := s.RelatedTools(ctx, "a:x", 10)
		if err != nil || len(rel) != 2 || rel[0].Count != 50 {
			t.Fatalf("related %+v %v", rel, err)
		}
	})
}

func TestFileStoreIsSharedAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "traces.jsonl")
	ctx := context.Background()
	w := tracedb.NewFile(path, 0)
	ex, calls := execution("ex_shared", 3, "a:x")
	w.Record(ctx, ex, calls)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A second store on the same file stands in for another pml command.
	got, gotCalls, err := tracedb.NewFile(path, 0).GetExecution(ctx, "ex_shared")
	if err != nil || got.ID != "ex_shared" || len(gotCalls) != 3 {
		t.Fatalf("%+v %v %v", got, gotCalls, err)
	}
}

// flaky wraps the client: the first calls are throttled and every batch
// comes back with some items unprocessed. It also counts requests.
type flaky struct {
	tracedb.DynamoAPI
	throttle  atomic.Int32
	batches   atomic.Int32
	unprocess atomic.Bool
}

func (f *flaky) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	f.batches.Add(1)
	if f.throttle.Add(-1) >= 0 {
		return nil, &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "slow down"}
	}
	if f.unprocess.Load() {
		for table, reqs := range in.RequestItems {
			if len(reqs) > 1 {
				half := len(reqs) / 2
				out, err := f.DynamoAPI.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs[:half]}}, opts...)
				if err != nil {
					return nil, err
				}
				out.UnprocessedItems = map[string][]types.WriteRequest{table: reqs[half:]}
				return out, nil
			}
		}
	}
	return f.DynamoAPI.BatchWriteItem(ctx, in, opts...)
}

func TestThrottlingAndUnprocessedItemsLoseNothing(t *testing.T) {
	var fl *flaky
	s, _ := dynamoStore(t, func(api tracedb.DynamoAPI) tracedb.DynamoAPI {
		fl = &flaky{DynamoAPI: api}
		fl.throttle.Store(3)
		fl.unprocess.Store(true)
		return fl
	}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	for i := range 10 {
		ex, calls := execution(fmt.Sprintf("ex_%d", i), 24, "a:x")
		s.Record(ctx, ex, calls)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Written != 250 || st.Failed != 0 || st.Retried == 0 {
		t.Fatalf("stats %+v", st)
	}
	for i := range 10 {
		if _, calls, err := s.GetExecution(ctx, fmt.Sprintf("ex_%d", i)); err != nil || len(calls) != 24 {
			t.Fatalf("ex_%d: %d calls, %v", i, len(calls), err)
		}
	}
}

func TestAtMostOneWriteRequestPer25Items(t *testing.T) {
	var fl *flaky
	s, _ := dynamoStore(t, func(api tracedb.DynamoAPI) tracedb.DynamoAPI { fl = &flaky{DynamoAPI: api}; return fl }, nil)
	ctx := context.Background()
	ex, calls := execution("ex_100", 99, "a:x") // 100 items with the execution
	s.Record(ctx, ex, calls)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := fl.batches.Load(); n != 4 {
		t.Fatalf("%d BatchWriteItem requests for 100 items; want 4", n)
	}
}

func TestDynamoDBDownTracesGoToTheLog(t *testing.T) {
	inst := dynamolocal.Dedicated(t)
	db := inst.Client()
	table := dynamolocal.TableName(t)
	if err := tracedb.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	s := tracedb.NewDynamo(db, table, 0, slog.New(slog.NewJSONHandler(&logs, nil)))
	inst.Stop()
	ex, calls := execution("ex_lost", 5, "a:x", "b:y")
	s.Record(context.Background(), ex, calls)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Flush(ctx); err == nil {
		t.Fatal("Flush reported success with DynamoDB down")
	}
	// Bounded by its 3 s context; the margin is for a loaded machine.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Flush took %v", d)
	}
	out := logs.String()
	// One line for the execution's partition (its 6 items); the
	// execution writes no counters.
	if n := strings.Count(out, `"msg":"trace_write_failed"`); n != 1 || strings.Count(out, `"partition":"EXEC#ex_lost"`) != 1 || strings.Count(out, `"call_id"`) != 5 {
		t.Fatalf("%d trace_write_failed lines:\n%s", n, out)
	}
	if s.Stats().Failed < 6 {
		t.Fatalf("stats %+v", s.Stats())
	}
}

// TestCoOccurrenceExactUnderConcurrentWriters: writers in several
// processes, counters aggregated from the stream and spread over shards
// (one counter a shard, for the test), read back as one number each.
func TestCoOccurrenceExactUnderConcurrentWriters(t *testing.T) {
	s := aggregatedStore(t, aggregate.Options{CountersPerShard: 1, MaxShards: 3})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each writer its own store, as concurrent Lambda instances.
			ctx := context.Background()
			for i := range 5 {
				ex, calls := execution(fmt.Sprintf("ex_%d_%d", w, i), 3, "a:x", "b:y", "c:z")
				s.Record(ctx, ex, calls)
				if err := s.Flush(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	rel, err := s.RelatedTools(context.Background(), "b:y", 5)
	if err != nil || len(rel) != 2 || rel[0].Count != 40 || rel[1].Count != 40 {
		t.Fatalf("related %+v %v", rel, err)
	}
	if st := s.agg.Stats(); st.Counters <= 6 {
		t.Fatalf("aggregator stats %+v: the counters were not spread over shards", st)
	}
}

func TestCallsStreamedDuringTheExecutionAreWrittenOnce(t *testing.T) {
	var fl *flaky
	s, _ := dynamoStore(t, func(api tracedb.DynamoAPI) tracedb.DynamoAPI { fl = &flaky{DynamoAPI: api}; return fl }, nil)
	ctx := context.Background()
	ex, calls := execution("ex_stream", 60, "a:x", "b:y")
	for _, c := range calls {
		s.RecordCall(ctx, c)
	}
	// Two full batches went out in the background before the execution
	// ended; Record and Flush add the execution and the last 10 calls.
	s.Record(ctx, ex, calls)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, gotCalls, err := s.GetExecution(ctx, "ex_stream")
	if err != nil || got.ID != "ex_stream" || len(gotCalls) != 60 {
		t.Fatalf("%+v with %d calls: %v", got, len(gotCalls), err)
	}
	if n := fl.batches.Load(); n != 3 {
		t.Fatalf("%d BatchWriteItem requests for 61 items; want 3", n)
	}
	if st := s.Stats(); st.Written != 61 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBuiltinCallsWithEmptyFieldsDoNotFailTheirBatch(t *testing.T) {
	s, _ := dynamoStore(t, nil, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	ex, calls := execution("ex_builtin", 3, "a:x")
	ex.CodeHash = ""
	calls[1].Server, calls[1].Tool, calls[1].Kind = "", "tools.search", trace.KindBuiltin
	s.Record(ctx, ex, calls)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, got, err := s.GetExecution(ctx, "ex_builtin")
	if err != nil || len(got) != 3 || got[1].Tool != "tools.search" || got[1].Server != "" {
		t.Fatalf("%+v %v", got, err)
	}
}

// TestDurableExecutionIsOneRecordAcrossItsSuspensions: a durable execution
// is recorded again under its id after each run; a reader gets the latest
// record, with the events of every suspension and resumption (an empty
// principal, as where auth is off, included) and the parked call's status.
func TestDurableExecutionIsOneRecordAcrossItsSuspensions(t *testing.T) {
	stores(t, func(t *testing.T, s tracedb.Store) {
		ctx := context.Background()
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		ex, calls := execution("ex_durable", 2, "kv:kv_get", "kv:kv_delete")
		calls[0].OK, calls[0].ErrorCode = true, ""
		calls[1].OK, calls[1].Status = false, trace.StatusParked
		ex.Status = trace.StatusSuspended
		ex.Events = []trace.Event{{Type: trace.EventSuspend, At: at, Pending: []int{2}}}
		s.Record(ctx, ex, calls)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, gotCalls, err := s.GetExecution(ctx, "ex_durable")
		if err != nil || got.Status != trace.StatusSuspended || len(got.Events) != 1 || gotCalls[1].Status != trace.StatusParked {
			t.Fatalf("while suspended: %+v %+v %v", got, gotCalls, err)
		}

		ex.Status = trace.StatusOK
		ex.Events = append(ex.Events,
			trace.Event{Type: trace.EventResume, At: at.Add(time.Minute), Principal: "arn:aws:iam::123456789012:user/alice",
				Decisions: []trace.Decision{{CallID: 2, Decision: "reject", Reason: "not today"}}},
			trace.Event{Type: trace.EventResume, At: at.Add(2 * time.Minute), Decisions: []trace.Decision{{CallID: 3, Decision: "approve"}}})
		calls[1].Status, calls[1].ErrorCode = "", fault.Rejected
		s.Record(ctx, ex, calls)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got, gotCalls, err = s.GetExecution(ctx, "ex_durable")
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != trace.StatusOK || len(gotCalls) != 2 || gotCalls[1].Status != "" || gotCalls[1].ErrorCode != fault.Rejected {
			t.Fatalf("after resuming: %+v %+v", got, gotCalls)
		}
		if fmt.Sprint(got.Events) != fmt.Sprint(ex.Events) {
			t.Fatalf("events:\n got %+v\nwant %+v", got.Events, ex.Events)
		}
		// Recorded twice, and a third time with a tool more: it counts
		// each pair of its tools once.
		_, more := execution("ex_durable", 3, "kv:kv_get", "kv:kv_delete", "kv:kv_set")
		s.Record(ctx, ex, more)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		rel, err := s.RelatedTools(ctx, "kv:kv_get", 0)
		if err != nil || fmt.Sprint(rel) != "[{kv:kv_delete 1} {kv:kv_set 1}]" {
			t.Fatalf("related to kv:kv_get: %v %v", rel, err)
		}
	})
}
