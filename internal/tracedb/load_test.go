package tracedb_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"

	"github.com/pml-sandbox/pml/internal/aggregate"
	"github.com/pml-sandbox/pml/internal/testutil/ddbstream"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// The workload of docs/DEPLOY.md's model: 10,000 executions a second, 5
// distinct tools each, one tool in 80 % of them, the others drawn evenly
// from a catalogue. The test replays 10 simulated seconds of it.
const (
	loadExecutions = 100_000
	loadRate       = 10_000 // executions a second, simulated
	loadTools      = 5      // distinct tools an execution uses
	loadHotShare   = 0.8
	loadCatalogue  = 20 // tools in all, the hot one included
	// The event source mapping, simulated: 12 stream shards each batching
	// a 1 s window (or 1,000 records) is 12 batches a second, as 60 shards
	// with the template's 5 s window.
	loadShards    = 12
	loadWindow    = time.Second
	loadBatchSize = 1000
	hotTool       = "hot:search"
)

// TestLoadAggregation replays the stream of 100,000 executions through the
// aggregator against DynamoDB Local and checks that every co-occurrence
// count equals a direct count of the executions, with some batches
// delivered twice and some crashed half way through and redelivered
// bisected. It prints the peak write rate per partition key: before, the
// n·(n-1) ADDs every execution made on its own; after, the aggregator's.
//
// The records are the real ones: the execution items are written to
// DynamoDB Local as the store writes them (its own marshalling; the call
// items, which the mapping's filter drops, are left out) and read back
// from DynamoDB Local's stream. DynamoDB Local keeps one stream shard, so
// the test deals the records into loadShards simulated shards by partition
// key, keeping each shard's stream order, and batches each shard's
// records by simulated time, as the event source mapping would; shards
// run concurrently, each one batch at a time. "Before" is computed from the
// same executions: replaying 2,000,000 UpdateItems on DynamoDB Local would
// take an hour and tell nothing more.
func TestLoadAggregation(t *testing.T) {
	if testing.Short() {
		t.Skip("load test (100,000 executions through DynamoDB Local, about 2 minutes): not under -short")
	}
	ctx := context.Background()
	// An instance of its own, stopped when the test ends: 100,000 items
	// and their stream would otherwise stay in the package's shared JVM,
	// and the tests after this one would meet its garbage collection
	// (a 10 s write deadline was once missed so).
	inst := dynamolocal.Dedicated(t)
	db := inst.Client()
	table := dynamolocal.TableName(t)
	if err := tracedb.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}

	// The executions.
	rng := rand.New(rand.NewPCG(24, 24))
	others := make([]string, loadCatalogue-1)
	for i := range others {
		others[i] = fmt.Sprintf("srv%02d:tool%02d", i/4, i)
	}
	toolsOf := make([][]string, loadExecutions)
	hot := 0
	for i := range toolsOf {
		var ts []string
		if rng.Float64() < loadHotShare {
			ts = append(ts, hotTool)
			hot++
		}
		for _, p := range rng.Perm(len(others))[:loadTools-len(ts)] {
			ts = append(ts, others[p])
		}
		toolsOf[i] = ts
	}
	t.Logf("workload: %d executions, %d distinct tools each, %s in %.1f %% of them, %d tools in all; %d executions/s simulated (%v)",
		loadExecutions, loadTools, hotTool, 100*float64(hot)/loadExecutions, loadCatalogue, loadRate, loadExecutions/loadRate*time.Second)

	start := time.Now()
	writeExecutions(t, db, table, toolsOf)
	wrote := time.Since(start)

	start = time.Now()
	stream, err := ddbstream.Open(ctx, inst, table)
	if err != nil {
		t.Fatal(err)
	}
	var recs []events.DynamoDBEventRecord
	for deadline := time.Now().Add(time.Minute); len(recs) < loadExecutions && time.Now().Before(deadline); {
		more, err := stream.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, more...)
	}
	// Exactly one INSERT per execution and nothing else: a REMOVE would be
	// DynamoDB Local's TTL sweep deleting items it holds expired (the
	// items' expiry must lie ahead of the wall clock, not of the simulated
	// one), a repeated sequence number a shard read twice.
	kinds, seqs := map[string]int{}, map[string]bool{}
	for _, r := range recs {
		kinds[r.EventName]++
		seqs[r.Change.SequenceNumber] = true
	}
	if len(recs) != loadExecutions || kinds["INSERT"] != loadExecutions || len(seqs) != len(recs) {
		t.Fatalf("the stream has %d records (%v, %d distinct sequence numbers), want %d INSERTs", len(recs), kinds, len(seqs), loadExecutions)
	}
	read := time.Since(start)

	// The event source mapping, simulated.
	type batch struct {
		second int
		recs   []events.DynamoDBEventRecord
	}
	perShard := make([][]batch, loadShards)
	for pos, r := range recs {
		pk := r.Change.Keys["pk"].String()
		h := fnv.New32a()
		h.Write([]byte(pk))
		s := int(h.Sum32() % loadShards)
		// A record reaches the stream when it is written: the stream's
		// order, at the simulated rate, is its time.
		second := int(time.Duration(pos) * time.Second / loadRate / loadWindow)
		bs := perShard[s]
		if n := len(bs); n == 0 || bs[n-1].second != second || len(bs[n-1].recs) == loadBatchSize {
			bs = append(bs, batch{second: second})
		}
		bs[len(bs)-1].recs = append(bs[len(bs)-1].recs, r)
		perShard[s] = bs
	}

	api := &meter{DynamoAPI: db}
	agg, err := aggregate.New(aggregate.Options{DB: api, Table: table, Extract: tracedb.CoOccurrence,
		MaxTransactItems: 10, // DynamoDB Local's limit; DynamoDB's is 100
		Log:              slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var batches, replayed, crashed atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for s, bs := range perShard {
		g.Go(func() error {
			for b, bt := range bs {
				bctx := context.WithValue(gctx, secondKey{}, bt.second)
				ev := events.DynamoDBEvent{Records: bt.recs}
				batches.Add(1)
				if (s+b)%15 == 7 {
					// Crash after the third chunk landed; Lambda bisects.
					crashed.Add(1)
					if err := agg.Handle(context.WithValue(bctx, crashKey{}, &crash{at: 3}), ev); err == nil {
						return fmt.Errorf("shard %d batch %d: the crash was not injected", s, b)
					}
					half := len(bt.recs) / 2
					for _, part := range [][]events.DynamoDBEventRecord{bt.recs[:half], bt.recs[half:]} {
						if err := agg.Handle(bctx, events.DynamoDBEvent{Records: part}); err != nil {
							return err
						}
					}
					continue
				}
				if err := agg.Handle(bctx, ev); err != nil {
					return err
				}
				if (s+b)%10 == 3 {
					// Delivered again whole, as after an answer Lambda lost.
					replayed.Add(1)
					if err := agg.Handle(bctx, ev); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	aggregated := time.Since(start)

	// Exact, against a direct count.
	want := map[string]map[string]int64{}
	for _, ts := range toolsOf {
		for _, a := range ts {
			for _, b := range ts {
				if a != b {
					if want[a] == nil {
						want[a] = map[string]int64{}
					}
					want[a][b]++
				}
			}
		}
	}
	reader := tracedb.NewDynamo(db, table, 0, nil)
	counters := 0
	for a, partners := range want {
		rel, err := reader.RelatedTools(ctx, a, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, r := range rel {
			got[r.Tool] = r.Count
		}
		if fmt.Sprint(got) != fmt.Sprint(partners) {
			t.Errorf("%s: related %v\nwant %v", a, got, partners)
		}
		counters += len(partners)
	}
	st := agg.Stats()
	t.Logf("exact: %d counters equal the direct count; %d batches, %d delivered again whole, %d crashed after 3 chunks and redelivered bisected",
		counters, batches.Load(), replayed.Load(), crashed.Load())
	t.Logf("aggregator: %d journals, %d chunk transactions (%d found applied), %d ADDs, %d retries (transaction conflicts, throttling)",
		st.Journals, st.Chunks, st.ChunksFound, st.Counters, st.Retries)

	// Write rates per partition key.
	before := map[int]map[string]int{}
	for i, ts := range toolsOf {
		s := int(time.Duration(i) * time.Second / loadRate / time.Second)
		if before[s] == nil {
			before[s] = map[string]int{}
		}
		for _, a := range ts {
			before[s]["TOOL#"+a] += len(ts) - 1
		}
	}
	bKey, bPeak, bTotal := peak(before)
	_, othersBefore, _ := peakExcept(before, "TOOL#"+hotTool)
	aKey, aPeak, aTotal := peak(api.adds)
	shard := regexp.MustCompile(`#S\d+$`)
	byBase := map[int]map[string]int{}
	for s, keys := range api.adds {
		byBase[s] = map[string]int{}
		for k, n := range keys {
			byBase[s][shard.ReplaceAllString(k, "")] += n
		}
	}
	baseKey, basePeak, _ := peak(byBase)
	wKey, wPeak, wTotal := peak(api.wcu)
	seconds := len(before)
	t.Logf("before: peak %d ADD/s = %d WCU/s on %s; busiest other key %d WCU/s; %d ADDs = %d WCU/s on average",
		bPeak, bPeak, bKey, othersBefore, bTotal, bTotal/seconds)
	t.Logf("after:  peak %d ADD/s = %d WCU/s (transactional: 2 a write) on %s; %s with its shards summed %d ADD/s; %d ADDs",
		aPeak, 2*aPeak, aKey, baseKey, basePeak, aTotal)
	book := 0 // journals, forwards and chunk markers, under AGG#
	for _, keys := range api.wcu {
		for k, n := range keys {
			if strings.HasPrefix(k, "AGG#") {
				book += n
			}
		}
	}
	t.Logf("after, every write of the aggregator: peak %d WCU/s on %s; %d WCU = %d WCU/s on average (counters %d; journals, heads and markers %d = %d a batch, of which the journals' parts %d a batch)",
		wPeak, wKey, wTotal, wTotal/seconds, wTotal-book, book, book/int(batches.Load()), api.journals.Load()/batches.Load())
	t.Logf("took: writing %v, reading the stream %v, aggregating %v", wrote.Round(time.Second), read.Round(time.Second), aggregated.Round(time.Second))
	// What the model says, as properties of this run: the hot key was
	// past DynamoDB's 1,000 WCU/s a partition before, and no key is after.
	if bPeak <= 1000 || wPeak >= 1000 {
		t.Errorf("peak %d WCU/s before, %d after: want past 1,000 before and under it after", bPeak, wPeak)
	}
}

// secondKey and crashKey are context keys: the simulated second a batch
// belongs to, and a crash to inject into its chunk transactions.
type (
	secondKey struct{}
	crashKey  struct{}
)

type crash struct {
	at int64
	n  atomic.Int64
}

// meter counts the writes the aggregator makes that DynamoDB applied, per
// simulated second and partition key: the counter ADDs, and every write in
// write units (1 per KB, twice that in a transaction). It fails a batch's
// nth chunk transaction after it landed when its context asks for a crash.
type meter struct {
	aggregate.DynamoAPI
	mu       sync.Mutex
	adds     map[int]map[string]int
	wcu      map[int]map[string]int
	journals atomic.Int64 // WCU of the journals' parts
}

func (m *meter) count(ctx context.Context, pk string, adds, wcu int) {
	second, _ := ctx.Value(secondKey{}).(int)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rates := range []*map[int]map[string]int{&m.adds, &m.wcu} {
		if *rates == nil {
			*rates = map[int]map[string]int{}
		}
		if (*rates)[second] == nil {
			(*rates)[second] = map[string]int{}
		}
	}
	if adds > 0 {
		m.adds[second][pk] += adds
	}
	m.wcu[second][pk] += wcu
}

func pkOf(key map[string]types.AttributeValue) string {
	return key["pk"].(*types.AttributeValueMemberS).Value
}

// units is an item's write units: 1 per KB or part of one (names and
// values; close enough for the aggregator's items).
func units(item map[string]types.AttributeValue) int {
	size := 0
	for k, v := range item {
		size += len(k)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			size += len(v.Value)
		case *types.AttributeValueMemberB:
			size += len(v.Value)
		default:
			size += 8
		}
	}
	return (size + 1023) / 1024
}

func (m *meter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := m.DynamoAPI.TransactWriteItems(ctx, in, opts...)
	if err == nil {
		for _, it := range in.TransactItems {
			switch {
			case it.Update != nil:
				m.count(ctx, pkOf(it.Update.Key), 1, 2) // counters stay under 1 KB
			case it.Put != nil:
				m.count(ctx, pkOf(it.Put.Item), 0, 2*units(it.Put.Item))
			}
		}
		if c, ok := ctx.Value(crashKey{}).(*crash); ok && c.n.Add(1) == c.at {
			return nil, &smithy.GenericAPIError{Code: "InjectedCrash", Message: "the process died after the write"}
		}
	}
	return out, err
}

func (m *meter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := m.DynamoAPI.PutItem(ctx, in, opts...)
	if err == nil {
		m.count(ctx, pkOf(in.Item), 0, units(in.Item))
		if sk, _ := in.Item["sk"].(*types.AttributeValueMemberS); sk != nil && strings.HasPrefix(sk.Value, "PART#") {
			m.journals.Add(int64(units(in.Item)))
		}
	}
	return out, err
}

func (m *meter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := m.DynamoAPI.UpdateItem(ctx, in, opts...)
	if err == nil {
		m.count(ctx, pkOf(in.Key), 0, 1)
	}
	return out, err
}

// peak is the largest count of one key in one second, that key, and the
// total.
func peak(rates map[int]map[string]int) (key string, n, total int) {
	return peakExcept(rates, "")
}

func peakExcept(rates map[int]map[string]int, except string) (key string, n, total int) {
	seconds := slices.Sorted(func(yield func(int) bool) {
		for s := range rates {
			if !yield(s) {
				return
			}
		}
	})
	for _, s := range seconds {
		for k, c := range rates[s] {
			total += c
			if k != except && (c > n || c == n && k < key) {
				key, n = k, c
			}
		}
	}
	return key, n, total
}

// writeExecutions writes one execution item per entry of toolsOf (a call
// per tool), as the store writes it, 25 a request, 4 requests at a time.
func writeExecutions(t *testing.T, db *dynamodb.Client, table string, toolsOf [][]string) {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for start := 0; start < len(toolsOf); start += 25 {
		g.Go(func() error {
			var reqs []types.WriteRequest
			for i := start; i < min(start+25, len(toolsOf)); i++ {
				id := fmt.Sprintf("ex_%06d", i)
				started := at.Add(time.Duration(i) * time.Second / loadRate)
				ex := trace.Execution{ID: id, CodeHash: "0123456789abcdef", CodeBytes: 120, Status: trace.StatusOK, StartedAt: started,
					DurationMS: 42.5, Source: "load", Calls: len(toolsOf[i])}
				calls := make([]trace.Call, len(toolsOf[i]))
				for j, tool := range toolsOf[i] {
					server, name, _ := strings.Cut(tool, ":")
					calls[j] = trace.Call{ExecutionID: id, CallID: j + 1, Server: server, Tool: name, Kind: trace.KindMCP, StartedAt: started, OK: true}
				}
				// Expiring a day from now, not from the simulated time:
				// DynamoDB Local's TTL sweep deletes items whose expiry has
				// passed, and its REMOVE records would join the stream.
				item, err := tracedb.ExecutionItem(ex, calls, time.Now().Add(24*time.Hour))
				if err != nil {
					return err
				}
				reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
			}
			for len(reqs) > 0 {
				out, err := db.BatchWriteItem(gctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
				if err != nil {
					return err
				}
				reqs = out.UnprocessedItems[table]
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
