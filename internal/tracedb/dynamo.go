package tracedb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/pml-sandbox/pml/internal/aggregate"
	"github.com/pml-sandbox/pml/internal/dynamoretry"
	"github.com/pml-sandbox/pml/internal/dynamotable"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// DynamoAPI is the part of the DynamoDB client the store uses (the execute
// and capability functions' policies grant exactly these); tests wrap the
// real client to inject throttling.
type DynamoAPI interface {
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Dynamo stores traces in one table (see docs/TRACES.md):
//
//	pk EXEC#<id>               sk META          the execution, with the tools it counts
//	pk EXEC#<id>               sk CALL#000001   one item per call
//	pk TOOL#<server:tool>[#Sn] sk WITH#<other>  co-occurrence counter (shard n)
//
// One partition per execution makes a whole trace one Query. An execution
// writes only its own partition: the co-occurrence counters are the
// aggregator's (the table's stream → CoOccurrence → package aggregate).
// Record only buffers; Flush writes with BatchWriteItem (25 items a
// request), retrying unprocessed items, throttling and transient failures
// with jittered exponential backoff (see retryWrite). What still cannot be
// written is logged as one structured line per item and counted: never
// dropped silently.
type Dynamo struct {
	db    DynamoAPI
	table string
	ttl   time.Duration
	log   *slog.Logger

	mu       sync.Mutex
	items    []map[string]types.AttributeValue
	stream   []map[string]types.AttributeValue // calls recorded one by one, not yet written
	streamed map[string]bool                   // "execution#call" already taken by RecordCall
	bg       sync.WaitGroup                    // background writes of streamed calls
	bgFailed atomic.Int64
	written  atomic.Int64
	retried  atomic.Int64
	failed   atomic.Int64
}

// Stats counts what the store did with the items it was given.
type Stats struct {
	Written, Retried, Failed int64
}

// NewDynamo writes to table; items expire after ttl (default 30 days).
func NewDynamo(db DynamoAPI, table string, ttl time.Duration, log *slog.Logger) *Dynamo {
	if ttl <= 0 {
		ttl = 30 * 24 * time.Hour
	}
	if log == nil {
		log = slog.Default()
	}
	return &Dynamo{db: db, table: table, ttl: ttl, log: log}
}

// Counters is where the aggregator's counters are (the store's client
// and table): readers of counters other than co-occurrence
// (internal/learn) Query them there.
func (d *Dynamo) Counters() (aggregate.Querier, string) { return d.db, d.table }

// Stats returns the counters.
func (d *Dynamo) Stats() Stats {
	return Stats{Written: d.written.Load(), Retried: d.retried.Load(), Failed: d.failed.Load()}
}

// Items are encoded with the records' json tags, so the stored attribute
// names are the documented field names (execution_id, call_id...).
type execItem struct {
	PK string `json:"pk"`
	SK string `json:"sk"`
	trace.Execution
	// Tools are the distinct tools the execution counts for co-occurrence
	// (countedTools): the aggregator reads them from the stream.
	Tools     []string `json:"tools,omitempty"`
	ExpiresAt int64    `json:"expires_at"`
	// Pattern is the execution's trace.Pattern as JSON, for the learning
	// loop's counters (internal/learn.Extract reads it from the stream).
	Pattern string `json:"pattern,omitempty"`
}

// newExecItem is ex's item, with the tools it counts and its pattern.
func newExecItem(ex trace.Execution, calls []trace.Call, expires int64) execItem {
	tools := countedTools(calls)
	if len(tools) < 2 {
		tools = nil // no pair to count, now or after a resume that adds one (newPairs)
	}
	it := execItem{PK: execPK(ex.ID), SK: "META", Execution: ex, Tools: tools, ExpiresAt: expires}
	if p := ex.Pattern; p != nil {
		// The tools the item already lists are named by their index:
		// names are most of a pattern, and an item past 1 KB costs a
		// second write unit.
		if order, ok := indexes(p.Tools, tools); ok {
			c := *p
			c.Tools, c.Order = nil, order
			p = &c
		}
		if b, err := json.Marshal(p); err == nil {
			it.Pattern = string(b)
		}
	}
	return it
}

// indexes are the positions of names in list, when list has them all.
func indexes(names, list []string) ([]int, bool) {
	if len(names) == 0 || len(list) == 0 {
		return nil, false
	}
	out := make([]int, len(names))
	for i, n := range names {
		j := slices.Index(list, n)
		if j < 0 {
			return nil, false
		}
		out[i] = j
	}
	return out, true
}

type callItem struct {
	PK string `json:"pk"`
	SK string `json:"sk"`
	trace.Call
	ExpiresAt int64 `json:"expires_at"`
}

func execPK(id string) string { return "EXEC#" + id }

// marshalItem encodes a record with its json names and leaves out empty
// strings (a built-in call has no server, a run may have no error code):
// DynamoDB Local, and DynamoDB before 2020, reject an empty string
// attribute, and one such item would fail its whole batch.
func marshalItem(v any) (map[string]types.AttributeValue, error) {
	m, err := attributevalue.MarshalMapWithOptions(v, func(o *attributevalue.EncoderOptions) { o.TagKey = "json" })
	if err != nil {
		return nil, err
	}
	for k, a := range m {
		if s, ok := a.(*types.AttributeValueMemberS); ok && s.Value == "" {
			delete(m, k)
		}
	}
	return m, nil
}

func callKey(c trace.Call) string { return fmt.Sprintf("%s#%d", c.ExecutionID, c.CallID) }

// backgroundTimeout bounds a background write of streamed calls, which
// outlives the call that triggered it.
const backgroundTimeout = 10 * time.Second

// RecordCall implements trace.CallRecorder: a call's item is written in the
// background as soon as 25 are pending, while the execution goes on.
func (d *Dynamo) RecordCall(ctx context.Context, c trace.Call) {
	item, err := marshalItem(callItem{PK: execPK(c.ExecutionID), SK: fmt.Sprintf("CALL#%06d", c.CallID), Call: c, ExpiresAt: time.Now().Add(d.ttl).Unix()})
	if err != nil {
		return // Record will write it with the execution
	}
	d.mu.Lock()
	if d.streamed == nil {
		d.streamed = map[string]bool{}
	}
	d.streamed[callKey(c)] = true
	d.stream = append(d.stream, item)
	var batch []map[string]types.AttributeValue
	if len(d.stream) >= 25 {
		batch, d.stream = d.stream[:25:25], d.stream[25:]
	}
	d.mu.Unlock()
	if batch != nil {
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backgroundTimeout)
			defer cancel()
			d.bgFailed.Add(int64(d.writeBatch(bctx, batch)))
		}()
	}
}

// Record implements trace.Sink. It never does I/O.
func (d *Dynamo) Record(ctx context.Context, ex trace.Execution, calls []trace.Call) {
	exp := time.Now().Add(d.ttl).Unix()
	var items []map[string]types.AttributeValue
	add := func(v any) {
		m, err := marshalItem(v)
		if err != nil {
			d.failed.Add(1)
			d.log.ErrorContext(ctx, "trace_write_failed", "reason", "encode", "err", err, "execution_id", ex.ID)
			return
		}
		items = append(items, m)
	}
	add(newExecItem(ex, calls, exp))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range calls {
		if k := callKey(c); d.streamed[k] {
			delete(d.streamed, k) // already on its way
			continue
		}
		add(callItem{PK: execPK(c.ExecutionID), SK: fmt.Sprintf("CALL#%06d", c.CallID), Call: c, ExpiresAt: exp})
	}
	d.items = append(d.items, items...)
}

// Flush implements trace.Sink: it waits for background writes and writes
// everything still buffered, within ctx.
func (d *Dynamo) Flush(ctx context.Context) error {
	waited := make(chan struct{})
	go func() { d.bg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
	}
	d.mu.Lock()
	items := append(d.items, d.stream...)
	d.items, d.stream = nil, nil
	d.mu.Unlock()
	// Batches go out concurrently: a flush costs about one round trip, not
	// one per 25 items.
	var g errgroup.Group
	g.SetLimit(8)
	var failures atomic.Int64
	for start := 0; start < len(items); start += 25 {
		batch := items[start:min(start+25, len(items))]
		g.Go(func() error {
			failures.Add(int64(d.writeBatch(ctx, batch)))
			return nil
		})
	}
	_ = g.Wait()
	if n := failures.Load() + d.bgFailed.Swap(0); n > 0 {
		return fmt.Errorf("tracedb: %d trace items could not be written (logged as trace_write_failed)", n)
	}
	return nil
}

// writeBatch writes up to 25 items, retrying what DynamoDB leaves
// unprocessed; it returns how many items failed for good.
func (d *Dynamo) writeBatch(ctx context.Context, items []map[string]types.AttributeValue) int {
	reqs := make([]types.WriteRequest, len(items))
	for i, it := range items {
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: it}}
	}
	err := d.retryWrite(ctx, func() error {
		out, err := d.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{d.table: reqs}}, dynamoretry.NoSDKRetries)
		if err != nil {
			return err
		}
		left := out.UnprocessedItems[d.table]
		d.written.Add(int64(len(reqs) - len(left)))
		reqs = left
		if len(left) > 0 {
			return errUnprocessed
		}
		return nil
	}, func() { d.retried.Add(int64(len(reqs))) })
	if err != nil {
		return d.giveUp(ctx, reqs, err)
	}
	return 0
}

// giveUp logs the items it could not write as one structured line per
// execution (its partition), so CloudWatch keeps the trace even though
// DynamoDB did not.
func (d *Dynamo) giveUp(ctx context.Context, reqs []types.WriteRequest, err error) int {
	var order []string
	byPK := map[string][]map[string]any{}
	for _, r := range reqs {
		var v map[string]any
		_ = attributevalue.UnmarshalMap(r.PutRequest.Item, &v)
		pk, _ := v["pk"].(string)
		if _, seen := byPK[pk]; !seen {
			order = append(order, pk)
		}
		byPK[pk] = append(byPK[pk], v)
	}
	for _, pk := range order {
		d.log.ErrorContext(ctx, "trace_write_failed", "table", d.table, "err", err.Error(), "partition", pk, "items", byPK[pk])
	}
	d.failed.Add(int64(len(reqs)))
	return len(reqs)
}

// errUnprocessed is the retryable outcome of a batch DynamoDB accepted only
// in part.
var errUnprocessed = errors.New("unprocessed after retries")

// retryBackoff shapes the waits between write attempts
// (dynamoretry.DefaultPolicy's). A variable for the tests.
var retryBackoff = dynamoretry.DefaultPolicy

// retryWrite runs write with the stores' retry policy (dynamoretry.Do);
// retrying is called before each new attempt.
func (d *Dynamo) retryWrite(ctx context.Context, write func() error, retrying func()) error {
	p := retryBackoff
	p.OnRetry = retrying
	return dynamoretry.Do(ctx, p, write)
}

// GetExecution implements Reader with one Query on the execution's
// partition.
func (d *Dynamo) GetExecution(ctx context.Context, id string) (trace.Execution, []trace.Call, error) {
	var ex *trace.Execution
	calls := []trace.Call{}
	var start map[string]types.AttributeValue
	for {
		out, err := d.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(d.table),
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: execPK(id)}},
			ExclusiveStartKey:         start,
			ConsistentRead:            aws.Bool(true),
		})
		if err != nil {
			return trace.Execution{}, nil, fault.Wrap(fault.Unavailable, err, "reading the trace")
		}
		for _, it := range out.Items {
			sk, _ := it["sk"].(*types.AttributeValueMemberS)
			if sk == nil {
				continue
			}
			if sk.Value == "META" {
				var e execItem
				if err := attributevalue.UnmarshalMapWithOptions(it, &e, func(o *attributevalue.DecoderOptions) { o.TagKey = "json" }); err != nil {
					return trace.Execution{}, nil, fault.Wrap(fault.Internal, err, "decoding the execution")
				}
				ex = &e.Execution
				continue
			}
			var c callItem
			if err := attributevalue.UnmarshalMapWithOptions(it, &c, func(o *attributevalue.DecoderOptions) { o.TagKey = "json" }); err != nil {
				return trace.Execution{}, nil, fault.Wrap(fault.Internal, err, "decoding a call")
			}
			calls = append(calls, c.Call)
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	if ex == nil {
		return trace.Execution{}, nil, notFound(id)
	}
	return *ex, calls, nil
}

// RelatedTools implements Reader: the counters of tool's partition,
// summed over its shards (aggregate.Read).
func (d *Dynamo) RelatedTools(ctx context.Context, tool string, limit int) ([]Related, error) {
	items, err := aggregate.Read(ctx, d.db, d.table, toolPK(tool))
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "reading tool co-occurrence")
	}
	counts := map[string]int64{}
	for _, it := range items {
		var v struct {
			Tool  string `dynamodbav:"tool"`
			Other string `dynamodbav:"other"`
			Count int64  `dynamodbav:"count"`
		}
		if attributevalue.UnmarshalMap(it, &v) == nil && v.Tool == tool && v.Other != "" {
			counts[v.Other] += v.Count
		}
	}
	return topRelated(counts, limit), nil
}

// CreateTable creates the traces table (on demand, TTL on expires_at, a
// stream of new and old images for the aggregator) as template.yaml
// declares it; for tests and local setups.
func CreateTable(ctx context.Context, db *dynamodb.Client, table string) error {
	if err := dynamotable.Create(ctx, db, table, "expires_at"); err != nil {
		return err
	}
	_, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
		TableName:           aws.String(table),
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	if err != nil {
		return fmt.Errorf("turning on the stream of %s: %w", table, err)
	}
	return nil
}
