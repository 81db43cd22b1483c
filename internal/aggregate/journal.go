package aggregate

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/pml-sandbox/pml/internal/dynamoretry"
	"github.com/pml-sandbox/pml/internal/fault"
)

// The aggregator's own items, in the table it counts in, under one
// partition per journal:
//
//	pk AGG#<event id>  sk HEAD                  the journal's head, or a forward
//	pk AGG#<event id>  sk PART#<digest>#000     the journal (gzipped JSON), in parts under 400 KB
//	pk AGG#<event id>  sk DONE#<digest>#0000    one per chunk applied
//
// and, in a counter's base partition, sk #SHARDS (how many shards to sum).
const (
	journalPrefix = "AGG#"
	headSK        = "HEAD"
	shardsSK      = "#SHARDS"
	// partBytes keeps each part well under DynamoDB's 400 KB item limit.
	partBytes = 300 << 10
)

// journal is what one batch counts: the records it covers, in stream
// order, and the sums it adds. Written once, before any of it is applied,
// and never changed.
type journal struct {
	Key    string         `json:"-"` // the first record's event id
	Digest string         `json:"-"` // of the encoded journal: names its parts and chunks
	IDs    []string       `json:"ids"`
	Deltas []delta        `json:"deltas"`
	Shards map[string]int `json:"shards,omitempty"` // base keys spread over shards, and over how many
}

func (j *journal) chunks(size int) int { return (len(j.Deltas) + size - 1) / size }

// head is the item found at AGG#<id>/HEAD: a journal's head, or a forward
// to the journal that covers id.
type head struct {
	Key     string
	Digest  string
	Parts   int
	Forward string
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pk), "sk": s(sk)}
}

// head reads the head or forward keyed on event id; nil when there is none.
func (a *Aggregator) head(ctx context.Context, id string) (*head, error) {
	out, err := a.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(a.table), Key: key(journalPrefix+id, headSK), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, wrapf(fault.Unavailable, err, "aggregate: reading journal %s", id)
	}
	if out.Item == nil {
		return nil, nil
	}
	h := &head{Key: id}
	if v, ok := out.Item["forward"].(*types.AttributeValueMemberS); ok {
		h.Forward = v.Value
		return h, nil
	}
	d, _ := out.Item["digest"].(*types.AttributeValueMemberS)
	p, _ := out.Item["parts"].(*types.AttributeValueMemberN)
	if d == nil || p == nil {
		return nil, fault.New(fault.Internal, "aggregate: journal head %s has no digest or parts", id)
	}
	h.Digest = d.Value
	if h.Parts, err = strconv.Atoi(p.Value); err != nil || h.Parts < 1 {
		return nil, fault.New(fault.Internal, "aggregate: journal head %s: parts %q", id, p.Value)
	}
	return h, nil
}

// encode is the journal's stored form, gzipped JSON, and its digest.
func (j *journal) encode() ([]byte, string, error) {
	raw, err := json.Marshal(j)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), hex.EncodeToString(sum[:16]), nil
}

// write stores j: the shard counts it relies on, its parts, then its head
// on condition that no head or forward exists for its first record. It
// reports false when one did: another attempt journaled that record first.
func (a *Aggregator) write(ctx context.Context, j *journal) (bool, error) {
	data, digest, err := j.encode()
	if err != nil {
		return false, wrapf(fault.Internal, err, "aggregate: encoding journal %s", j.Key)
	}
	j.Digest = digest
	if err := a.recordShards(ctx, j.Shards); err != nil {
		return false, err
	}
	pk := journalPrefix + j.Key
	exp := a.expires()
	parts := 0
	for off := 0; off < len(data) || parts == 0; off += partBytes {
		part := data[off:min(off+partBytes, len(data))]
		item := key(pk, partSK(digest, parts))
		item["data"] = &types.AttributeValueMemberB{Value: part}
		item["expires_at"] = n(exp)
		// Unconditional: the parts are named by their content's digest, so
		// a stale attempt can only rewrite the same bytes.
		if err := a.retry(ctx, func() error {
			_, err := a.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(a.table), Item: item}, dynamoretry.NoSDKRetries)
			return err
		}); err != nil {
			return false, wrapf(fault.Unavailable, err, "aggregate: writing journal %s", j.Key)
		}
		parts++
	}
	h := key(pk, headSK)
	h["digest"], h["parts"], h["counters"], h["records"], h["expires_at"] =
		s(digest), n(strconv.Itoa(parts)), n(strconv.Itoa(len(j.Deltas))), n(strconv.Itoa(len(j.IDs))), n(exp)
	err = a.retry(ctx, func() error {
		_, err := a.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(a.table), Item: h, ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}, dynamoretry.NoSDKRetries)
		return err
	})
	switch {
	case conditionFailed(err):
		return false, nil
	case err != nil:
		return false, wrapf(fault.Unavailable, err, "aggregate: writing journal %s", j.Key)
	}
	a.stats.journals.Add(1)
	return true, nil
}

func partSK(digest string, i int) string { return fmt.Sprintf("PART#%s#%03d", digest, i) }
func doneSK(digest string, k int) string { return fmt.Sprintf("DONE#%s#%04d", digest, k) }

// load reads the journal h names (following a forward) back.
func (a *Aggregator) load(ctx context.Context, h *head) (*journal, error) {
	if h.Forward != "" {
		origin, err := a.head(ctx, h.Forward)
		if err != nil {
			return nil, err
		}
		if origin == nil || origin.Forward != "" {
			return nil, fault.New(fault.Internal, "aggregate: forward %s names %s, which is not a journal", h.Key, h.Forward)
		}
		h = origin
	}
	pk := journalPrefix + h.Key
	items, err := a.queryPrefix(ctx, pk, "PART#"+h.Digest+"#")
	if err != nil {
		return nil, err
	}
	if len(items) != h.Parts {
		return nil, fault.New(fault.Internal, "aggregate: journal %s has %d of its %d parts", h.Key, len(items), h.Parts)
	}
	var data []byte
	for _, it := range items { // in sort key order: part order
		b, _ := it["data"].(*types.AttributeValueMemberB)
		if b == nil {
			return nil, fault.New(fault.Internal, "aggregate: journal %s: a part without data", h.Key)
		}
		data = append(data, b.Value...)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, wrapf(fault.Internal, err, "aggregate: journal %s", h.Key)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, wrapf(fault.Internal, err, "aggregate: journal %s", h.Key)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:16]) != h.Digest {
		return nil, fault.New(fault.Internal, "aggregate: journal %s does not match its digest", h.Key)
	}
	j := &journal{Key: h.Key, Digest: h.Digest}
	if err := json.Unmarshal(raw, j); err != nil {
		return nil, wrapf(fault.Internal, err, "aggregate: journal %s", h.Key)
	}
	return j, nil
}

// queryPrefix returns the items of partition pk whose sort key starts with
// prefix, in sort key order, read consistently.
func (a *Aggregator) queryPrefix(ctx context.Context, pk, prefix string) ([]map[string]types.AttributeValue, error) {
	items, err := query(ctx, a.db, &dynamodb.QueryInput{
		TableName:                 aws.String(a.table),
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :prefix)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(pk), ":prefix": s(prefix)},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		return nil, wrapf(fault.Unavailable, err, "aggregate: reading %s", pk)
	}
	return items, nil
}

// forward records that the record id is covered by journal origin, for the
// batch that will start at it.
func (a *Aggregator) forward(ctx context.Context, id, origin string) error {
	item := key(journalPrefix+id, headSK)
	item["forward"], item["expires_at"] = s(origin), n(a.expires())
	err := a.retry(ctx, func() error {
		_, err := a.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(a.table), Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}, dynamoretry.NoSDKRetries)
		return err
	})
	if err != nil && !conditionFailed(err) { // already there: an earlier attempt left it
		return wrapf(fault.Unavailable, err, "aggregate: forwarding %s to journal %s", id, origin)
	}
	return nil
}

// finish applies the chunks of j not applied yet, a few at a time. A
// journal this attempt has just written (fresh) has none applied: only the
// writer of its head applies a new journal.
func (a *Aggregator) finish(ctx context.Context, j *journal, fresh bool) error {
	k := j.chunks(a.chunk)
	if k == 0 {
		return nil
	}
	applied := map[string]bool{}
	if !fresh {
		done, err := a.queryPrefix(ctx, journalPrefix+j.Key, "DONE#"+j.Digest+"#")
		if err != nil {
			return err
		}
		for _, it := range done {
			if v, ok := it["sk"].(*types.AttributeValueMemberS); ok {
				applied[v.Value] = true
			}
		}
		a.stats.chunksFound.Add(int64(len(applied)))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(a.concurrency)
	for c := range k {
		if applied[doneSK(j.Digest, c)] {
			continue
		}
		g.Go(func() error { return a.applyChunk(gctx, j, c) })
	}
	return g.Wait()
}

// applyChunk adds chunk c of j's counters in one transaction with its
// "done" marker, which exists at most once: a chunk is applied once,
// whoever applies it.
func (a *Aggregator) applyChunk(ctx context.Context, j *journal, c int) error {
	deltas := j.Deltas[c*a.chunk : min((c+1)*a.chunk, len(j.Deltas))]
	marker := key(journalPrefix+j.Key, doneSK(j.Digest, c))
	marker["expires_at"] = n(a.expires())
	items := []types.TransactWriteItem{{Put: &types.Put{
		TableName: aws.String(a.table), Item: marker, ConditionExpression: aws.String("attribute_not_exists(pk)"),
	}}}
	for _, d := range deltas {
		items = append(items, types.TransactWriteItem{Update: addUpdate(a.table, d)})
	}
	err := a.retry(ctx, func() error {
		_, err := a.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}, dynamoretry.NoSDKRetries)
		return err
	})
	if markerExists(err) {
		a.stats.chunksFound.Add(1) // applied by an attempt whose answer was lost
		return nil
	}
	if err != nil {
		return wrapf(fault.Unavailable, err, "aggregate: applying chunk %d of journal %s", c, j.Key)
	}
	a.stats.chunks.Add(1)
	a.stats.counters.Add(int64(len(deltas)))
	return nil
}

// addUpdate is d's ADD, setting the counter's base and labels.
func addUpdate(table string, d delta) *types.Update {
	names := map[string]string{"#count": "count", "#base": "base"}
	values := map[string]types.AttributeValue{":n": n(strconv.FormatInt(d.N, 10)), ":base": s(d.Base)}
	set := []string{"#base = :base"}
	labels := make([]string, 0, len(d.Labels))
	for l := range d.Labels {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for i, l := range labels {
		names["#l"+strconv.Itoa(i)] = l
		values[":l"+strconv.Itoa(i)] = s(d.Labels[l])
		set = append(set, fmt.Sprintf("#l%d = :l%d", i, i))
	}
	if d.Expires > 0 {
		names["#exp"] = "expires_at"
		values[":exp"] = n(strconv.FormatInt(d.Expires, 10))
		set = append(set, "#exp = :exp")
	}
	return &types.Update{
		TableName:                 aws.String(table),
		Key:                       key(d.PK, d.SK),
		UpdateExpression:          aws.String("ADD #count :n SET " + strings.Join(set, ", ")),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
}

// recordShards makes sure each base key's "#SHARDS" item says at least the
// shards j writes to, before any of them is written (readers sum what it
// says). It only ever grows, and is written once per key and container.
func (a *Aggregator) recordShards(ctx context.Context, shards map[string]int) error {
	bases := make([]string, 0, len(shards))
	for b := range shards {
		bases = append(bases, b)
	}
	slices.Sort(bases)
	for _, base := range bases {
		want := shards[base]
		a.shardsMu.Lock()
		known := a.shards[base]
		a.shardsMu.Unlock()
		if known >= want {
			continue
		}
		err := a.retry(ctx, func() error {
			_, err := a.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:                 aws.String(a.table),
				Key:                       key(base, shardsSK),
				UpdateExpression:          aws.String("SET #shards = :n"),
				ConditionExpression:       aws.String("attribute_not_exists(#shards) OR #shards < :n"),
				ExpressionAttributeNames:  map[string]string{"#shards": "shards"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":n": n(strconv.Itoa(want))},
			}, dynamoretry.NoSDKRetries)
			return err
		})
		if err != nil && !conditionFailed(err) { // failed condition: it already says as many or more
			return wrapf(fault.Unavailable, err, "aggregate: recording the shards of %s", base)
		}
		a.shardsMu.Lock()
		a.shards[base] = max(a.shards[base], want)
		a.shardsMu.Unlock()
	}
	return nil
}
