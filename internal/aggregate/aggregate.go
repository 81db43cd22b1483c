// Package aggregate keeps counters off the hot path. Writers record only
// their own items; a DynamoDB stream on the table feeds Handle (a Lambda
// function behind an event source mapping), which sums the increments a
// batch of stream records stands for and writes one ADD per counter per
// batch. What a record counts is the caller's: an Extractor turns one
// stream record into increments (tool co-occurrence is tracedb's; any
// counter a stream record implies, such as calls per capability, fits).
//
// # Exactly once, however Lambda redelivers
//
// Lambda delivers a shard's records in order, at least once: a failed
// batch is retried whole, or split in two (BisectBatchOnFunctionError),
// and a poller that restarts re-reads from its last checkpoint into a
// batch of another size. A marker keyed on "this batch" would miss every
// retry that is not the same batch. Handle instead keeps a journal per
// batch, keyed on its first record's event id:
//
//  1. Look up the journal or forward keyed on the batch's first record (one
//     GetItem). None: the records are new. Write the journal: which records
//     it covers (their event ids, in order) and the summed increments; then
//     its head, on condition that none exists (a racing or stale attempt
//     loses here and reads the winner's).
//  2. Apply the journal in chunks of at most MaxTransactItems-1 counters,
//     each a TransactWriteItems with a "chunk done" marker conditioned on
//     not existing: a chunk is applied once, whoever applies it.
//  3. A batch that starts at a journaled record finishes that journal (its
//     increments are all in it), skips the records it covers and goes on
//     with the first one it does not. When the journal covers records past
//     the batch's end — a bisected batch, or a shorter re-read — it leaves
//     a forward keyed on the next covered record, so the batch that starts
//     there finds the journal too.
//
// Every place a later batch can start is either a record nobody has
// journaled, the first record of a journal, or a forward: so no record is
// ever counted twice, and none that a journal took is lost (a journal whose
// writer died is finished by the next batch that reaches it).
//
// # Hot partitions
//
// One batch writes each counter once, but all the counters of one
// partition key (TOOL#a's partners) together: a key that takes more than
// CountersPerShard counters from one batch is spread over shards (pk
// "<base>#S1"...), each counter of the batch to one of them, and a
// "#SHARDS" item in the base partition tells readers how many to sum
// (Read).
package aggregate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pml-sandbox/pml/internal/fault"
)

// DynamoAPI is the part of the DynamoDB client the aggregator uses; its
// function's IAM policy grants exactly these (TransactWriteItems is granted
// as the PutItem and UpdateItem it carries).
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Increment adds N to the counter item (PK, SK).
type Increment struct {
	// PK is the counter's partition key before sharding; SK its sort key,
	// which must not start with "#" (the aggregator's own items there).
	PK, SK string
	N      int64
	// Labels are set on the counter item with every ADD, so readers know
	// what it counts without parsing keys (tool, other...). Names must not
	// be pk, sk, count, base or expires_at. Where a batch has several
	// increments of one counter, a later increment's label replaces an
	// earlier one's of the same name (records come in stream order: the
	// newest wins), and labels only one of them has are kept.
	Labels map[string]string
	// Expires, when set (epoch seconds), is the counter item's expires_at
	// (the table's TTL attribute): the latest of a batch's increments is
	// written, so a counter lives as long after its last increment. Zero
	// leaves expires_at alone (co-occurrence counters are kept for good).
	Expires int64
}

// Extractor turns one stream record into the increments it stands for;
// records it does not count yield none. An error marks the record
// malformed: it is logged and skipped, never retried (a record that cannot
// be read will not be readable on the next attempt, and must not stop the
// shard).
type Extractor func(events.DynamoDBEventRecord) ([]Increment, error)

// Extractors is one Extractor counting what each of ex counts, for one
// stream that feeds several kinds of counters (tool co-occurrence, the
// learning loop's). A record one of them cannot read is skipped whole, as
// any malformed record is.
func Extractors(ex ...Extractor) Extractor {
	return func(rec events.DynamoDBEventRecord) ([]Increment, error) {
		var out []Increment
		for _, x := range ex {
			incs, err := x(rec)
			if err != nil {
				return nil, err
			}
			out = append(out, incs...)
		}
		return out, nil
	}
}

// Options configure an Aggregator.
type Options struct {
	DB      DynamoAPI
	Table   string
	Extract Extractor
	Log     *slog.Logger // default slog.Default()
	// MaxTransactItems bounds the actions of one TransactWriteItems: 100 on
	// DynamoDB (the default), 10 on the DynamoDB Local the tests run.
	MaxTransactItems int
	// CountersPerShard is how many counters of one partition key a batch
	// writes before the key is spread over shards: ceil(n/CountersPerShard)
	// of them, at most MaxShards. Defaults 16 and 16.
	CountersPerShard int
	MaxShards        int
	// TTL of the journals, forwards and chunk markers: longer than a
	// stream keeps records (24 hours), so a record redelivered at any time
	// finds its journal. Default 48 hours.
	TTL time.Duration
	// Concurrency bounds the chunk transactions of one batch in flight
	// (default 4).
	Concurrency int
}

// Aggregator handles DynamoDB stream batches. It is safe for concurrent
// use (Lambda runs one batch per shard at a time, the tests more).
type Aggregator struct {
	db      DynamoAPI
	table   string
	extract Extractor
	log     *slog.Logger
	chunk   int // counters per transaction
	perShard,
	maxShards int
	ttl         time.Duration
	concurrency int

	shardsMu sync.Mutex
	shards   map[string]int // partition key → shard count known to be recorded

	stats struct {
		batches, records, covered, skipped, journals, chunks, chunksFound, counters, retries atomic.Int64
	}
}

// Stats counts what an Aggregator did.
type Stats struct {
	Batches int64 // Handle calls
	Records int64 // records handed in
	Covered int64 // records an earlier journal had already taken
	Skipped int64 // malformed records, logged
	// Journals written, chunk transactions applied, chunks found already
	// applied (a retry after a lost answer or a crash), counter writes
	// (ADDs) applied, and write attempts retried.
	Journals, Chunks, ChunksFound, Counters, Retries int64
}

// New checks opts and returns an Aggregator.
func New(opts Options) (*Aggregator, error) {
	if opts.DB == nil || opts.Table == "" || opts.Extract == nil {
		return nil, errors.New("aggregate: DB, Table and Extract are required")
	}
	a := &Aggregator{
		db:          opts.DB,
		table:       opts.Table,
		extract:     opts.Extract,
		log:         cmp.Or(opts.Log, slog.Default()),
		chunk:       cmp.Or(opts.MaxTransactItems, 100) - 1,
		perShard:    cmp.Or(opts.CountersPerShard, 16),
		maxShards:   cmp.Or(opts.MaxShards, 16),
		ttl:         cmp.Or(opts.TTL, 48*time.Hour),
		concurrency: cmp.Or(opts.Concurrency, 4),
		shards:      map[string]int{},
	}
	if a.chunk < 1 || a.perShard < 1 || a.maxShards < 1 || a.concurrency < 1 {
		return nil, fmt.Errorf("aggregate: MaxTransactItems must be at least 2, CountersPerShard, MaxShards and Concurrency at least 1")
	}
	return a, nil
}

// Stats returns the counters.
func (a *Aggregator) Stats() Stats {
	s := &a.stats
	return Stats{Batches: s.batches.Load(), Records: s.records.Load(), Covered: s.covered.Load(), Skipped: s.skipped.Load(),
		Journals: s.journals.Load(), Chunks: s.chunks.Load(), ChunksFound: s.chunksFound.Load(), Counters: s.counters.Load(),
		Retries: s.retries.Load()}
}

// Handle applies one batch of stream records, in the order Lambda gives
// them (one shard's, in sequence order). An error means some of it may not
// be applied: Lambda retries the batch (whole or bisected), and the
// journals make the retry count each record once.
func (a *Aggregator) Handle(ctx context.Context, ev events.DynamoDBEvent) error {
	recs := ev.Records
	a.stats.batches.Add(1)
	a.stats.records.Add(int64(len(recs)))
	for _, r := range recs {
		if r.EventID == "" {
			// Lambda always sets it; without it nothing can be deduplicated.
			return fault.New(fault.InvalidRequest, "aggregate: a stream record without an eventID (sequence number %q)", r.Change.SequenceNumber)
		}
	}
	start := time.Now()
	var wrote *journal
	covered, lost := 0, 0
	for i := 0; i < len(recs); {
		h, err := a.head(ctx, recs[i].EventID)
		if err != nil {
			return err
		}
		if h == nil {
			j := a.build(ctx, recs[i:])
			won, err := a.write(ctx, j)
			if err != nil {
				return err
			}
			if !won {
				// Another attempt journaled this record first: use its
				// journal. A head that exists for the write but not for
				// the read cannot last; do not spin on it.
				if lost++; lost > 3 {
					return fault.New(fault.Unavailable, "aggregate: the journal of record %s is written but cannot be read", recs[i].EventID)
				}
				continue
			}
			if err := a.finish(ctx, j, true); err != nil {
				return err
			}
			wrote = j
			break
		}
		j, err := a.load(ctx, h)
		if err != nil {
			return err
		}
		if err := a.finish(ctx, j, false); err != nil {
			return err
		}
		p := slices.Index(j.IDs, recs[i].EventID)
		if p < 0 {
			return fault.New(fault.Internal, "aggregate: journal %s does not list record %s that leads to it", j.Key, recs[i].EventID)
		}
		n := 0
		for i < len(recs) && p < len(j.IDs) && recs[i].EventID == j.IDs[p] {
			i, p, n = i+1, p+1, n+1
		}
		covered += n
		if i < len(recs) && p < len(j.IDs) {
			// The stream's order and the journal's disagree: counting the
			// rest could count some of it twice. Fail; Lambda retries and,
			// in the end, sends the batch to the failure destination.
			return fault.New(fault.Internal, "aggregate: record %s follows %s in the batch but not in journal %s", recs[i].EventID, recs[i-1].EventID, j.Key)
		}
		if i == len(recs) && p < len(j.IDs) {
			if err := a.forward(ctx, j.IDs[p], j.Key); err != nil {
				return err
			}
		}
	}
	a.stats.covered.Add(int64(covered))
	attrs := []any{"records", len(recs), "covered", covered, "duration_ms", float64(time.Since(start).Microseconds()) / 1000}
	if wrote != nil {
		attrs = append(attrs, "journal", wrote.Key, "counters", len(wrote.Deltas), "chunks", wrote.chunks(a.chunk))
	}
	a.log.InfoContext(ctx, "aggregate_batch", attrs...)
	return nil
}

// delta is one counter's sum in a journal: pk is where it is written (a
// shard of Base or Base itself).
type delta struct {
	PK     string            `json:"pk"`
	SK     string            `json:"sk"`
	Base   string            `json:"base"`
	N      int64             `json:"n"`
	Labels map[string]string `json:"labels,omitempty"`
	// Expires is the latest Increment.Expires of the counter's
	// increments (0: none).
	Expires int64 `json:"expires,omitempty"`
}

// reserved are attribute names the aggregator writes on counters itself.
var reserved = []string{"pk", "sk", "count", "base", "expires_at"}

// build sums the increments of recs into a journal keyed on recs[0].
func (a *Aggregator) build(ctx context.Context, recs []events.DynamoDBEventRecord) *journal {
	j := &journal{Key: recs[0].EventID, IDs: make([]string, len(recs))}
	type key struct{ pk, sk string }
	sums := map[key]*delta{}
	for i, r := range recs {
		j.IDs[i] = r.EventID
		incs, err := a.extract(r)
		if err == nil {
			err = validate(incs)
		}
		if err != nil {
			a.stats.skipped.Add(1)
			a.log.WarnContext(ctx, "aggregate_record_skipped", "event_id", r.EventID, "sequence_number", r.Change.SequenceNumber, "reason", err.Error())
			continue
		}
		for _, inc := range incs {
			if inc.N == 0 {
				continue
			}
			k := key{inc.PK, inc.SK}
			d := sums[k]
			if d == nil {
				d = &delta{PK: inc.PK, SK: inc.SK, Base: inc.PK, Labels: inc.Labels}
				sums[k] = d
			} else if len(inc.Labels) > 0 {
				merged := make(map[string]string, len(d.Labels)+len(inc.Labels))
				maps.Copy(merged, d.Labels)
				maps.Copy(merged, inc.Labels)
				d.Labels = merged
			}
			d.N += inc.N
			d.Expires = max(d.Expires, inc.Expires)
		}
	}
	perBase := map[string]int{}
	for k, d := range sums {
		if d.N == 0 {
			delete(sums, k) // increments that cancelled out
			continue
		}
		perBase[d.Base]++
	}
	for _, d := range sums {
		if n := a.shardsFor(perBase[d.Base]); n > 1 {
			// Each counter of this batch to one shard, spread by the
			// journal and the counter, so the key's counters divide evenly
			// and a retry of this journal picks the same shard.
			if s := shardOf(j.Key, d.SK, n); s > 0 {
				d.PK = ShardKey(d.Base, s)
			}
		}
		j.Deltas = append(j.Deltas, *d)
	}
	slices.SortFunc(j.Deltas, func(x, y delta) int { return cmp.Or(cmp.Compare(x.PK, y.PK), cmp.Compare(x.SK, y.SK)) })
	j.Shards = map[string]int{}
	for base, n := range perBase {
		if s := a.shardsFor(n); s > 1 {
			j.Shards[base] = s
		}
	}
	return j
}

// shardsFor is how many shards a partition key that takes n counters from
// one batch is spread over.
func (a *Aggregator) shardsFor(n int) int {
	return min(a.maxShards, (n+a.perShard-1)/a.perShard)
}

func validate(incs []Increment) error {
	for _, inc := range incs {
		switch {
		case inc.PK == "" || inc.SK == "":
			return errors.New("an increment without a key")
		case inc.SK[0] == '#':
			return fmt.Errorf("sort key %q: keys starting with # are the aggregator's", inc.SK)
		}
		for name, v := range inc.Labels {
			if slices.Contains(reserved, name) || name == "" || v == "" {
				return fmt.Errorf("label %q=%q: want a non-empty name other than %v and a non-empty value", name, v, reserved)
			}
		}
	}
	return nil
}

func (a *Aggregator) expires() string {
	return strconv.FormatInt(time.Now().Add(a.ttl).Unix(), 10)
}
