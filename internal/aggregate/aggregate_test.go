package aggregate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/pml-sandbox/pml/internal/aggregate"
	"github.com/pml-sandbox/pml/internal/dynamotable"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"
)

func TestMain(m *testing.M) { os.Exit(dynamolocal.Run(m)) }

// A test record carries its increments in its new image as "pk|sk|n"
// strings; extract reads them back. Anything else is malformed.
func record(id string, incs ...string) events.DynamoDBEventRecord {
	l := make([]events.DynamoDBAttributeValue, len(incs))
	for i, s := range incs {
		l[i] = events.NewStringAttribute(s)
	}
	return events.DynamoDBEventRecord{EventID: id, EventName: "INSERT",
		Change: events.DynamoDBStreamRecord{SequenceNumber: id, NewImage: map[string]events.DynamoDBAttributeValue{"incs": events.NewListAttribute(l)}}}
}

func extract(r events.DynamoDBEventRecord) ([]aggregate.Increment, error) {
	v, ok := r.Change.NewImage["incs"]
	if !ok || v.DataType() != events.DataTypeList {
		return nil, errors.New("no incs")
	}
	var out []aggregate.Increment
	for _, x := range v.List() {
		if x.DataType() != events.DataTypeString {
			return nil, errors.New("not a string")
		}
		parts := strings.Split(x.String(), "|")
		if len(parts) != 3 {
			return nil, fmt.Errorf("increment %q", x.String())
		}
		n, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, aggregate.Increment{PK: parts[0], SK: parts[1], N: n, Labels: map[string]string{"name": parts[1]}})
	}
	return out, nil
}

// direct is the count the records stand for, each counted once: the
// oracle the aggregated counters must equal.
func direct(recs []events.DynamoDBEventRecord) map[string]map[string]int64 {
	want := map[string]map[string]int64{}
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.EventID] {
			continue
		}
		seen[r.EventID] = true
		incs, err := extract(r)
		if err != nil {
			continue
		}
		for _, inc := range incs {
			if want[inc.PK] == nil {
				want[inc.PK] = map[string]int64{}
			}
			want[inc.PK][inc.SK] += inc.N
		}
	}
	return want
}

// env is a table in DynamoDB Local and an API in front of it that can
// fail on command.
type env struct {
	t     *testing.T
	db    *dynamodb.Client
	table string
	api   *faulty
	logs  *syncbuf.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := dynamolocal.Start(t).Client()
	table := dynamolocal.TableName(t)
	if err := dynamotable.Create(context.Background(), db, table, "expires_at"); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, db: db, table: table, api: &faulty{DynamoAPI: db}, logs: &syncbuf.Buffer{}}
}

func (e *env) aggregator(opts aggregate.Options) *aggregate.Aggregator {
	e.t.Helper()
	opts.DB, opts.Table, opts.Extract = e.api, e.table, extract
	if opts.MaxTransactItems == 0 {
		opts.MaxTransactItems = 10 // DynamoDB Local's limit
	}
	opts.Log = slog.New(slog.NewJSONHandler(e.logs, nil))
	a, err := aggregate.New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// counts reads every partition of want back through Read and sums it.
func (e *env) check(want map[string]map[string]int64) {
	e.t.Helper()
	for pk, sks := range want {
		items, err := aggregate.Read(context.Background(), e.db, e.table, pk)
		if err != nil {
			e.t.Fatal(err)
		}
		got := map[string]int64{}
		for _, it := range items {
			sk := it["sk"].(*types.AttributeValueMemberS).Value
			n, _ := strconv.ParseInt(it["count"].(*types.AttributeValueMemberN).Value, 10, 64)
			got[sk] += n
			if it["name"].(*types.AttributeValueMemberS).Value != sk {
				e.t.Errorf("%s/%s: label name %v", pk, sk, it["name"])
			}
		}
		for sk, n := range sks {
			if n != 0 && got[sk] != n {
				e.t.Errorf("%s/%s = %d, want %d", pk, sk, got[sk], n)
			}
			delete(got, sk)
		}
		for sk, n := range got {
			if n != 0 {
				e.t.Errorf("%s/%s = %d, want none", pk, sk, n)
			}
		}
	}
}

// faulty passes calls to DynamoDB Local and fails the ones a rule names:
// before sending (the write did not happen) or after (it did, and the
// answer was lost, as when a process dies or a connection drops).
type faulty struct {
	aggregate.DynamoAPI
	mu    sync.Mutex
	calls map[string]int
	rules []rule
}

type rule struct {
	op    string // GetItem, PutItem, Query, UpdateItem, TransactWriteItems
	nth   int    // the nth call of op, from 1
	lands bool   // the write reaches DynamoDB before the failure
	err   error  // default: a crash (not retryable)
	// wait, when set, holds the call until it is closed, then sends it:
	// a write still in flight from an attempt given up on.
	wait chan struct{}
}

var errCrash = &smithy.GenericAPIError{Code: "InjectedCrash", Message: "the process died"}

func (f *faulty) fail(op string) *rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	for i := range f.rules {
		if f.rules[i].op == op && f.rules[i].nth == f.calls[op] {
			return &f.rules[i]
		}
	}
	return nil
}

func (f *faulty) set(rules ...rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.rules = map[string]int{}, rules
}

func do[I, O any](f *faulty, op string, ctx context.Context, in I, call func(context.Context, I, ...func(*dynamodb.Options)) (O, error), opts []func(*dynamodb.Options)) (O, error) {
	r := f.fail(op)
	if r == nil {
		return call(ctx, in, opts...)
	}
	var zero O
	if r.wait != nil {
		<-r.wait
		return call(ctx, in, opts...)
	}
	if r.lands {
		if _, err := call(ctx, in, opts...); err != nil {
			return zero, err
		}
	}
	if r.err != nil {
		return zero, r.err
	}
	return zero, errCrash
}

func (f *faulty) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return do(f, "GetItem", ctx, in, f.DynamoAPI.GetItem, o)
}
func (f *faulty) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return do(f, "PutItem", ctx, in, f.DynamoAPI.PutItem, o)
}
func (f *faulty) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return do(f, "Query", ctx, in, f.DynamoAPI.Query, o)
}
func (f *faulty) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return do(f, "UpdateItem", ctx, in, f.DynamoAPI.UpdateItem, o)
}
func (f *faulty) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return do(f, "TransactWriteItems", ctx, in, f.DynamoAPI.TransactWriteItems, o)
}

// stream makes n records, each adding to a few of a small set of
// counters, so batches share counters.
func stream(seed uint64, n int) []events.DynamoDBEventRecord {
	rng := rand.New(rand.NewPCG(seed, 1))
	recs := make([]events.DynamoDBEventRecord, n)
	for i := range recs {
		var incs []string
		for range 1 + rng.IntN(4) {
			incs = append(incs, fmt.Sprintf("K#%d|C#%02d|%d", rng.IntN(3), rng.IntN(12), 1+rng.IntN(3)))
		}
		recs[i] = record(fmt.Sprintf("ev-%d-%05d", seed, i), incs...)
	}
	return recs
}

// mapping is Lambda's event source mapping for one shard, as documented:
// batches of up to size records in order; a failed batch is retried
// (split in two first when bisect is on) until it succeeds or retries run
// out; only then does the shard move on. The handler's failures here come
// from injected faults, which stop after a few calls, so every batch
// succeeds in the end.
type mapping struct {
	size    int
	bisect  bool
	retries int
}

func (m mapping) run(t *testing.T, a *aggregate.Aggregator, recs []events.DynamoDBEventRecord) (failures int) {
	t.Helper()
	var deliver func(batch []events.DynamoDBEventRecord, tries int)
	deliver = func(batch []events.DynamoDBEventRecord, tries int) {
		err := a.Handle(context.Background(), events.DynamoDBEvent{Records: batch})
		if err == nil {
			return
		}
		failures++
		if tries >= m.retries {
			t.Fatalf("batch of %d still failing after %d tries: %v", len(batch), tries, err)
		}
		if m.bisect && len(batch) > 1 {
			deliver(batch[:len(batch)/2], tries+1)
			deliver(batch[len(batch)/2:], tries+1)
			return
		}
		deliver(batch, tries+1)
	}
	for start := 0; start < len(recs); start += m.size {
		deliver(recs[start:min(start+m.size, len(recs))], 0)
	}
	return failures
}

func TestCountsEachRecordOnce(t *testing.T) {
	e := newEnv(t)
	a := e.aggregator(aggregate.Options{})
	recs := stream(1, 300)
	mapping{size: 100, retries: 1}.run(t, a, recs)
	e.check(direct(recs))
	// Delivered again, whole: nothing changes.
	mapping{size: 100, retries: 1}.run(t, a, recs)
	e.check(direct(recs))
	st := a.Stats()
	if st.Journals != 3 || st.Covered != 300 || st.Records != 600 || st.Skipped != 0 {
		t.Fatalf("stats %+v: want 3 journals and the second delivery all covered", st)
	}
}

// TestRedeliveryNeverDoubleCounts: a write fails at each point a batch can
// fail — before or after it reached DynamoDB — and Lambda redelivers the
// batch whole or bisected, or its poller re-reads from the checkpoint in
// batches of another size; the counts stay exact.
func TestRedeliveryNeverDoubleCounts(t *testing.T) {
	points := []struct {
		name  string
		rules []rule
	}{
		{"lookup fails", []rule{{op: "GetItem", nth: 1}}},
		{"journal part lost", []rule{{op: "PutItem", nth: 1}}},
		{"journal part written, answer lost", []rule{{op: "PutItem", nth: 1, lands: true}}},
		{"head not written", []rule{{op: "PutItem", nth: 2}}},
		{"head written, answer lost", []rule{{op: "PutItem", nth: 2, lands: true}}},
		{"first chunk lost", []rule{{op: "TransactWriteItems", nth: 1}}},
		{"first chunk applied, answer lost", []rule{{op: "TransactWriteItems", nth: 1, lands: true}}},
		{"third chunk applied, answer lost", []rule{{op: "TransactWriteItems", nth: 3, lands: true}}},
		{"every chunk applied, the last answer lost", []rule{{op: "TransactWriteItems", nth: 4, lands: true}}},
		{"second batch's head written, answer lost", []rule{{op: "PutItem", nth: 4, lands: true}}},
		{"a forward lost", []rule{{op: "TransactWriteItems", nth: 2, lands: true}, {op: "PutItem", nth: 3}}},
		{"lost answers then a retried chunk conflict", []rule{
			{op: "TransactWriteItems", nth: 2, lands: true, err: &smithy.GenericAPIError{Code: "InternalServerError"}},
			{op: "TransactWriteItems", nth: 4, lands: true}}},
	}
	deliveries := []struct {
		name string
		m    mapping
	}{
		{"whole", mapping{size: 40, retries: 3}},
		{"bisected", mapping{size: 40, bisect: true, retries: 8}},
	}
	for _, p := range points {
		for _, d := range deliveries {
			t.Run(p.name+"/"+d.name, func(t *testing.T) {
				e := newEnv(t)
				// One chunk at a time, so "the nth write" is the same
				// write on every run.
				a := e.aggregator(aggregate.Options{Concurrency: 1})
				recs := stream(2, 120)
				e.api.set(p.rules...)
				if failures := d.m.run(t, a, recs); failures == 0 {
					t.Fatal("no batch failed: the fault was not injected")
				}
				e.check(direct(recs))
			})
		}
	}
}

// TestStaleWriteAfterTheRetryFinished: an attempt's chunk transaction is
// still in flight when Lambda, having given up on that attempt, runs the
// batch again and applies everything; the stale write then lands, and
// must not count a second time.
func TestStaleWriteAfterTheRetryFinished(t *testing.T) {
	e := newEnv(t)
	recs := stream(6, 60)
	gate := make(chan struct{})
	e.api.set(rule{op: "TransactWriteItems", nth: 2, wait: gate})
	stale := e.aggregator(aggregate.Options{Concurrency: 1})
	done := make(chan error)
	go func() { done <- stale.Handle(context.Background(), events.DynamoDBEvent{Records: recs}) }()
	// The retry, in another container, once the stale attempt holds its
	// second chunk.
	for {
		e.api.mu.Lock()
		n := e.api.calls["TransactWriteItems"]
		e.api.mu.Unlock()
		if n >= 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	retry := e.aggregator(aggregate.Options{})
	if err := retry.Handle(context.Background(), events.DynamoDBEvent{Records: recs}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.check(direct(recs))
	if st := stale.Stats(); st.ChunksFound == 0 {
		t.Fatalf("stale attempt's stats %+v: its late chunks should have found their markers", st)
	}
}

// TestStaleJournalAfterABisectedRetry: an attempt at 40 records is slow to
// write its journal's head; meanwhile the batch, bisected, is journaled
// and applied from its first 20. The stale head must not replace that
// journal (it would count those 20 again): it loses, and its attempt goes
// on from the first record the winner did not cover.
func TestStaleJournalAfterABisectedRetry(t *testing.T) {
	e := newEnv(t)
	recs := stream(7, 40)
	gate := make(chan struct{})
	e.api.set(rule{op: "PutItem", nth: 2, wait: gate}) // the stale attempt's head
	stale := e.aggregator(aggregate.Options{})
	done := make(chan error)
	go func() { done <- stale.Handle(context.Background(), events.DynamoDBEvent{Records: recs}) }()
	for {
		e.api.mu.Lock()
		n := e.api.calls["PutItem"]
		e.api.mu.Unlock()
		if n >= 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	retry := e.aggregator(aggregate.Options{})
	if err := retry.Handle(context.Background(), events.DynamoDBEvent{Records: recs[:20]}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := retry.Handle(context.Background(), events.DynamoDBEvent{Records: recs[20:]}); err != nil {
		t.Fatal(err)
	}
	e.check(direct(recs))
}

// TestPollerReReadsOtherBatches: after a batch was journaled and applied
// but not acknowledged, the poller re-reads from its checkpoint into
// batches of other sizes — shorter (the journal covers past the batch's
// end: a forward) and longer (the batch runs past the journal's end).
func TestPollerReReadsOtherBatches(t *testing.T) {
	for _, sizes := range [][2]int{{50, 7}, {50, 120}, {7, 50}, {33, 34}} {
		t.Run(fmt.Sprintf("%d then %d", sizes[0], sizes[1]), func(t *testing.T) {
			e := newEnv(t)
			a := e.aggregator(aggregate.Options{})
			recs := stream(3, 150)
			// The first pass applies everything but is never acknowledged.
			mapping{size: sizes[0], retries: 1}.run(t, a, recs)
			mapping{size: sizes[1], bisect: true, retries: 1}.run(t, a, recs)
			e.check(direct(recs))
			if st := a.Stats(); st.Covered != 150 {
				t.Fatalf("stats %+v: the re-read should find all 150 records covered", st)
			}
		})
	}
}

// TestConcurrentAttemptsOnOneBatch: two attempts at the same batch at once
// (a timed-out invocation still writing while its retry runs): one journal
// wins, chunks apply once.
func TestConcurrentAttemptsOnOneBatch(t *testing.T) {
	e := newEnv(t)
	recs := stream(4, 200)
	var wg sync.WaitGroup
	for range 4 {
		a := e.aggregator(aggregate.Options{}) // each its own container
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Conflicts and lost races surface as errors Lambda would
			// retry; retry until the batch goes through.
			for range 10 {
				if a.Handle(context.Background(), events.DynamoDBEvent{Records: recs}) == nil {
					return
				}
			}
			t.Error("the batch never went through")
		}()
	}
	wg.Wait()
	e.check(direct(recs))
}

func TestHotPartitionIsSharded(t *testing.T) {
	e := newEnv(t)
	a := e.aggregator(aggregate.Options{CountersPerShard: 4, MaxShards: 5})
	var recs []events.DynamoDBEventRecord
	for i := range 60 {
		// K#hot takes 20 counters a batch: 5 shards (capped); K#cold 2: one.
		recs = append(recs, record(fmt.Sprintf("ev-%03d", i), fmt.Sprintf("K#hot|C#%02d|1", i%20), fmt.Sprintf("K#cold|C#%d|1", i%2)))
	}
	mapping{size: 60, retries: 1}.run(t, a, recs)
	e.check(direct(recs))
	shardsOf := func(pk string) map[string]bool {
		out := map[string]bool{}
		for s := range 8 {
			key := pk
			if s > 0 {
				key = aggregate.ShardKey(pk, s)
			}
			items, err := e.db.Query(context.Background(), &dynamodb.QueryInput{TableName: aws.String(e.table),
				KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :c)"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: key}, ":c": &types.AttributeValueMemberS{Value: "C#"}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(items.Items) > 0 {
				out[key] = true
			}
		}
		return out
	}
	if got := shardsOf("K#hot"); len(got) < 3 || got[aggregate.ShardKey("K#hot", 5)] {
		t.Errorf("K#hot written to %v: want its 20 counters spread over up to 5 shards (0-4)", got)
	}
	if got := shardsOf("K#cold"); len(got) != 1 || !got["K#cold"] {
		t.Errorf("K#cold written to %v: want the base partition alone", got)
	}
}

// TestReadSumsShardsAndKeepsToItsKey: Read sums a counter over every shard
// the "#SHARDS" item names (and no other), keeps counters written before
// sharding (no base attribute), and leaves out items of another key that
// share a shard's partition key.
func TestReadSumsShardsAndKeepsToItsKey(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	put := func(pk, sk string, attrs ...string) {
		item := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}
		for i := 0; i < len(attrs); i += 2 {
			if attrs[i] == "count" || attrs[i] == "shards" {
				item[attrs[i]] = &types.AttributeValueMemberN{Value: attrs[i+1]}
			} else {
				item[attrs[i]] = &types.AttributeValueMemberS{Value: attrs[i+1]}
			}
		}
		if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	put("T#a", "#SHARDS", "shards", "3")
	put("T#a", "W#b", "count", "5") // from before there were shards
	put("T#a", "W#c", "count", "1", "base", "T#a")
	put(aggregate.ShardKey("T#a", 1), "W#b", "count", "7", "base", "T#a")
	put(aggregate.ShardKey("T#a", 2), "W#b", "count", "11", "base", "T#a")
	put(aggregate.ShardKey("T#a", 2), "W#c", "count", "100", "base", "T#a#S2") // the key "T#a#S2"'s own counter
	put(aggregate.ShardKey("T#a", 3), "W#b", "count", "1000", "base", "T#a")   // past the 3 shards recorded
	items, err := aggregate.Read(ctx, e.db, e.table, "T#a")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, it := range items {
		n, _ := strconv.Atoi(it["count"].(*types.AttributeValueMemberN).Value)
		got[it["sk"].(*types.AttributeValueMemberS).Value] += n
	}
	if want := map[string]int{"W#b": 23, "W#c": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sums %v, want %v", got, want)
	}
	// A key never written reads as nothing, not an error.
	if items, err := aggregate.Read(ctx, e.db, e.table, "T#none"); err != nil || len(items) != 0 {
		t.Fatalf("%v %v", items, err)
	}
}

// TestMalformedRecordsAreSkippedNotRetried: a record the extractor cannot
// read, or whose increments break the rules, is logged and skipped; the
// rest of the batch counts, and the batch succeeds (a poison record must
// not stop the shard). A record without an event id fails the batch: it
// could not be deduplicated.
func TestMalformedRecordsAreSkippedNotRetried(t *testing.T) {
	e := newEnv(t)
	a := e.aggregator(aggregate.Options{})
	good := record("ev-good", "K#x|C#1|2")
	bad := []events.DynamoDBEventRecord{
		{EventID: "ev-noimage"},
		record("ev-notnumber", "K#x|C#1|two"),
		record("ev-reserved-sk", "K#x|#SHARDS|1"),
		{EventID: "ev-wrongtype", Change: events.DynamoDBStreamRecord{NewImage: map[string]events.DynamoDBAttributeValue{"incs": events.NewStringAttribute("K#x|C#1|1")}}},
		{EventID: "ev-nested", Change: events.DynamoDBStreamRecord{NewImage: map[string]events.DynamoDBAttributeValue{"incs": events.NewListAttribute([]events.DynamoDBAttributeValue{events.NewMapAttribute(nil)})}}},
	}
	recs := append([]events.DynamoDBEventRecord{good}, bad...)
	recs = append(recs, record("ev-good2", "K#x|C#1|3"))
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: recs}); err != nil {
		t.Fatal(err)
	}
	e.check(map[string]map[string]int64{"K#x": {"C#1": 5}})
	if st := a.Stats(); st.Skipped != int64(len(bad)) {
		t.Fatalf("stats %+v, want %d skipped", st, len(bad))
	}
	if n := strings.Count(e.logs.String(), `"msg":"aggregate_record_skipped"`); n != len(bad) {
		t.Fatalf("%d skip lines:\n%s", n, e.logs.String())
	}
	err := a.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{record("", "K#x|C#1|1")}})
	if fault.CodeOf(err) != fault.InvalidRequest {
		t.Fatalf("a record without an event id: %v", err)
	}
}

// TestLabelsCannotOverwriteTheCounter: an extractor's label may not name
// the attributes the aggregator owns.
func TestLabelsCannotOverwriteTheCounter(t *testing.T) {
	e := newEnv(t)
	for _, label := range []string{"count", "base", "pk", "sk", "expires_at", ""} {
		bad := func(events.DynamoDBEventRecord) ([]aggregate.Increment, error) {
			return []aggregate.Increment{{PK: "K#x", SK: "C#1", N: 1, Labels: map[string]string{label: "9"}}}, nil
		}
		a, err := aggregate.New(aggregate.Options{DB: e.db, Table: e.table, Extract: bad, MaxTransactItems: 10, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{record("ev-" + label)}}); err != nil {
			t.Fatal(err)
		}
		if st := a.Stats(); st.Skipped != 1 || st.Counters != 0 {
			t.Errorf("label %q: stats %+v, want the record skipped", label, st)
		}
	}
}

// TestJournalThatDisagreesWithTheStreamFailsTheBatch: when the records
// after a journaled one are not the ones the journal lists, counting on
// could count some twice: the batch fails (Lambda retries, then sends it
// to the failure destination) and nothing more is written.
func TestJournalThatDisagreesWithTheStreamFailsTheBatch(t *testing.T) {
	e := newEnv(t)
	a := e.aggregator(aggregate.Options{})
	first := []events.DynamoDBEventRecord{record("ev-a", "K#x|C#1|1"), record("ev-b", "K#x|C#1|1")}
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: first}); err != nil {
		t.Fatal(err)
	}
	other := []events.DynamoDBEventRecord{first[0], record("ev-z", "K#x|C#1|1")}
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: other}); fault.CodeOf(err) != fault.Internal {
		t.Fatalf("want an INTERNAL error, got %v", err)
	}
	e.check(map[string]map[string]int64{"K#x": {"C#1": 2}})
}

// TestLargeJournalSpansParts: a batch whose journal is past one item's
// size is stored in parts and read back whole by a retry.
func TestLargeJournalSpansParts(t *testing.T) {
	e := newEnv(t)
	a := e.aggregator(aggregate.Options{MaxShards: 1})
	rng := rand.New(rand.NewPCG(5, 5))
	var recs []events.DynamoDBEventRecord
	for i := range 10000 {
		// Random event ids compress poorly: ~ 350 KB of journal, two parts.
		id := fmt.Sprintf("ev-%05d-%016x%016x%016x%016x", i, rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64())
		recs = append(recs, record(id, fmt.Sprintf("K#%d|C#%d|1", i%2, i%7)))
	}
	// The first attempt journals and dies before applying anything.
	e.api.set(rule{op: "TransactWriteItems", nth: 1})
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: recs}); err == nil {
		t.Fatal("the injected crash did not fail the batch")
	}
	e.api.set()
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: recs[:5000]}); err != nil {
		t.Fatal(err)
	}
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: recs[5000:]}); err != nil {
		t.Fatal(err)
	}
	e.check(direct(recs))
	h, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "AGG#" + recs[0].EventID}, "sk": &types.AttributeValueMemberS{Value: "HEAD"}}})
	if err != nil || h.Item == nil {
		t.Fatalf("no head: %v", err)
	}
	if parts, _ := strconv.Atoi(h.Item["parts"].(*types.AttributeValueMemberN).Value); parts < 2 {
		t.Fatalf("the journal took %d part(s); the test wants one past an item's size", parts)
	}
	if st := a.Stats(); st.Journals != 1 || st.Covered != 10000 {
		t.Fatalf("stats %+v: want one journal covering every record", st)
	}
}

// TestNewestLabelsAndExpiry: within a batch the later increment's labels
// win, a label only an earlier one has is kept, and the counter takes the
// latest expiry; a later batch's labels replace the stored ones.
func TestNewestLabelsAndExpiry(t *testing.T) {
	e := newEnv(t)
	type inc struct {
		labels  map[string]string
		expires int64
	}
	byID := map[string]inc{
		"ev-1": {map[string]string{"last": "one", "first": "kept"}, 2000000000},
		"ev-2": {map[string]string{"last": "two"}, 2000000100},
		"ev-3": {map[string]string{"last": "three"}, 1900000000},
		"ev-4": {nil, 0},
	}
	x := func(r events.DynamoDBEventRecord) ([]aggregate.Increment, error) {
		i := byID[r.EventID]
		return []aggregate.Increment{{PK: "K#x", SK: "C#1", N: 1, Labels: i.labels, Expires: i.expires}}, nil
	}
	a, err := aggregate.New(aggregate.Options{DB: e.db, Table: e.table, Extract: x, MaxTransactItems: 10, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	read := func() map[string]types.AttributeValue {
		out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "K#x"}, "sk": &types.AttributeValueMemberS{Value: "C#1"}}})
		if err != nil || out.Item == nil {
			t.Fatalf("no counter: %v", err)
		}
		return out.Item
	}
	str := func(it map[string]types.AttributeValue, name string) string {
		switch v := it[name].(type) {
		case *types.AttributeValueMemberS:
			return v.Value
		case *types.AttributeValueMemberN:
			return v.Value
		}
		return ""
	}
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{record("ev-1"), record("ev-2")}}); err != nil {
		t.Fatal(err)
	}
	it := read()
	if str(it, "last") != "two" || str(it, "first") != "kept" || str(it, "expires_at") != "2000000100" || str(it, "count") != "2" {
		t.Errorf("after one batch: %v", it)
	}
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{record("ev-3")}}); err != nil {
		t.Fatal(err)
	}
	if it := read(); str(it, "last") != "three" || str(it, "expires_at") != "1900000000" {
		t.Errorf("after a later batch: %v", it)
	}
	// An increment without labels or expiry leaves them as they are.
	if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{record("ev-4")}}); err != nil {
		t.Fatal(err)
	}
	if it := read(); str(it, "last") != "three" || str(it, "expires_at") != "1900000000" || str(it, "count") != "4" {
		t.Errorf("after a bare increment: %v", it)
	}
}

// TestReadCounterAcrossShards: one counter of a key spread over shards is
// read by key from each shard and sums to the count of every batch.
func TestReadCounterAcrossShards(t *testing.T) {
	e := newEnv(t)
	a := e.aggregator(aggregate.Options{CountersPerShard: 1, MaxShards: 4})
	var recs []events.DynamoDBEventRecord
	for i := range 12 {
		// Each batch writes four counters of K#x: four shards.
		recs = append(recs, record(fmt.Sprintf("ev-%02d", i), "K#x|C#1|1", "K#x|C#2|1", "K#x|C#3|1", "K#x|C#4|1"))
	}
	for i := 0; i < len(recs); i += 3 {
		if err := a.Handle(context.Background(), events.DynamoDBEvent{Records: recs[i : i+3]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sk := range []string{"C#1", "C#2", "C#3", "C#4"} {
		items, err := aggregate.ReadCounter(context.Background(), e.db, e.table, "K#x", sk)
		if err != nil {
			t.Fatal(err)
		}
		sum := int64(0)
		for _, it := range items {
			n, _ := strconv.ParseInt(it["count"].(*types.AttributeValueMemberN).Value, 10, 64)
			sum += n
		}
		if sum != 12 {
			t.Errorf("%s: %d over %d items, want 12", sk, sum, len(items))
		}
	}
	if items, err := aggregate.ReadCounter(context.Background(), e.db, e.table, "K#x", "C#9"); err != nil || len(items) != 0 {
		t.Errorf("a counter never written: %v %v", items, err)
	}
}
