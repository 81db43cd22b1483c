package suspend

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/pml-sandbox/pml/internal/dynamotable"
)

// DynamoAPI is the part of the DynamoDB client the store uses: exactly the
// actions template.yaml grants on the suspensions table.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// NewDynamo returns a Store keeping executions in one DynamoDB table (key
// pk, sk; TTL on ttl), one partition per execution:
//
//	pk SUSP#<id>  sk meta                   the record's metadata
//	pk SUSP#<id>  sk chunk#<key>#0000…      its suspension, ≤ 350 KiB a chunk
//	pk SUSP#~owners   sk o#<principal>     a principal whose executions wait (Owners)
//	pk SUSP#~waiting#<principal>  sk <expiry>#<id>  a hint that <id> waits (ListOf)
//
// Chunks are binary attributes, written (BatchWriteItem) under a key
// unique to the write before the metadata is made to point at them with a
// PutItem conditioned on the version it replaces; the previous chunks are
// deleted after (best effort: their TTL removes them otherwise). Reads are
// consistent. Every item carries ttl, the record's expiry plus an hour, so
// DynamoDB deletes it eventually; expiry itself is decided from expires_at.
func NewDynamo(db DynamoAPI, table string, opts Options) Store {
	return newCore(&dynamoBackend{db: db, table: table, prefix: suspensionPrefix}, opts)
}

// The partition key prefixes of the kinds of record a table holds: an
// execution may have both of the first two (an asynchronous one that
// suspended); sessions have ids of their own.
const (
	suspensionPrefix = "SUSP#"
	runPrefix        = "RUN#"
	sessionPrefix    = "SESS#"
)

// chunkSize keeps a chunk item (its data plus about 100 bytes of keys and
// ttl) well under DynamoDB's 400 KB item limit; a Query page (1 MB) reads
// about three.
const chunkSize = 350 << 10

type dynamoBackend struct {
	db     DynamoAPI
	table  string
	prefix string // suspensionPrefix, runPrefix or sessionPrefix
}

// metaItem is meta as a DynamoDB item.
type metaItem struct {
	PK string `dynamodbav:"pk"`
	SK string `dynamodbav:"sk"`
	meta
	TTL int64 `dynamodbav:"ttl"`
}

func (d *dynamoBackend) partition(id string) string { return d.prefix + id }

func chunkSK(key string, i int) string { return fmt.Sprintf("chunk#%s#%04d", key, i) }

func (d *dynamoBackend) itemKey(id, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: d.partition(id)},
		"sk": &types.AttributeValueMemberS{Value: sk},
	}
}

func (d *dynamoBackend) get(ctx context.Context, id string) (*meta, error) {
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: d.itemKey(id, "meta"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	if out.Item == nil {
		return nil, nil
	}
	var it metaItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return nil, fmt.Errorf("decoding the record: %w", err)
	}
	return &it.meta, nil
}

func (d *dynamoBackend) put(ctx context.Context, m *meta, prev int) error {
	item, err := attributevalue.MarshalMap(metaItem{PK: d.partition(m.ID), SK: "meta", meta: *m, TTL: m.ExpiresAt.Add(ttlGrace).Unix()})
	if err != nil {
		return fmt.Errorf("encoding the record: %w", err)
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item}
	if prev == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		in.ConditionExpression = aws.String("#v = :v")
		in.ExpressionAttributeNames = map[string]string{"#v": "version"}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: strconv.Itoa(prev)}}
	}
	_, err = d.db.PutItem(ctx, in)
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return errStale
	}
	return err
}

func (d *dynamoBackend) writeBody(ctx context.Context, id string, version int, blob []byte, expires time.Time) (*bodyRef, error) {
	key := bodyKey(version)
	ttl := &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.Add(ttlGrace).Unix(), 10)}
	var reqs []types.WriteRequest
	for i := 0; i*chunkSize < len(blob); i++ {
		item := d.itemKey(id, chunkSK(key, i))
		item["data"] = &types.AttributeValueMemberB{Value: blob[i*chunkSize : min((i+1)*chunkSize, len(blob))]}
		item["ttl"] = ttl
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if err := d.batchWrite(ctx, reqs); err != nil {
		return nil, err
	}
	return &bodyRef{Key: key, Size: len(blob), Chunks: len(reqs)}, nil
}

func (d *dynamoBackend) readBody(ctx context.Context, id string, ref *bodyRef) ([]byte, error) {
	blob := make([]byte, 0, ref.Size)
	n := 0
	var start map[string]types.AttributeValue
	for {
		out, err := d.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(d.table),
			KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :prefix)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk":     &types.AttributeValueMemberS{Value: d.partition(id)},
				":prefix": &types.AttributeValueMemberS{Value: "chunk#" + ref.Key + "#"},
			},
			ConsistentRead:    aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, err
		}
		for _, it := range out.Items {
			sk, _ := it["sk"].(*types.AttributeValueMemberS)
			data, _ := it["data"].(*types.AttributeValueMemberB)
			// The sort key orders the chunks; one missing (deleted under
			// a paging reader) shows as a gap.
			if sk == nil || data == nil || sk.Value != chunkSK(ref.Key, n) {
				return nil, errBodyGone
			}
			blob = append(blob, data.Value...)
			n++
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	if n != ref.Chunks {
		return nil, errBodyGone
	}
	return blob, nil
}

func (d *dynamoBackend) deleteBody(ctx context.Context, id string, ref *bodyRef) error {
	reqs := make([]types.WriteRequest, ref.Chunks)
	for i := range reqs {
		reqs[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: d.itemKey(id, chunkSK(ref.Key, i))}}
	}
	return d.batchWrite(ctx, reqs)
}

// ownersPartition is the partition (after the prefix) of the owners the
// index of what waits holds: one item per owner (sk o#<principal>),
// written with each of its hints, expiring with the latest. An owner's
// hints are in its own partition, ~waiting#<principal>, sorted by their
// keys (waiting.go). '~' is not a character of an id, so no execution's
// partition is named so.
const (
	ownersPartition  = "~owners"
	waitingPartition = "~waiting#"
)

func (d *dynamoBackend) hintKey(h waitHint) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: d.prefix + waitingPartition + h.Owner},
		"sk": &types.AttributeValueMemberS{Value: h.Key},
	}
}

func (d *dynamoBackend) markWaiting(ctx context.Context, h waitHint, expires time.Time) error {
	ttl := &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.Add(ttlGrace).Unix(), 10)}
	hint := d.hintKey(h)
	hint["ttl"] = ttl
	owner := map[string]types.AttributeValue{
		"pk":      &types.AttributeValueMemberS{Value: d.prefix + ownersPartition},
		"sk":      &types.AttributeValueMemberS{Value: "o#" + h.Owner},
		"expires": &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.UnixMilli(), 10)},
		"ttl":     ttl,
	}
	return d.batchWrite(ctx, []types.WriteRequest{{PutRequest: &types.PutRequest{Item: hint}}, {PutRequest: &types.PutRequest{Item: owner}}})
}

func (d *dynamoBackend) unmarkWaiting(ctx context.Context, h waitHint) error {
	return d.batchWrite(ctx, []types.WriteRequest{{DeleteRequest: &types.DeleteRequest{Key: d.hintKey(h)}}})
}

// query reads one page of partition pk's items after sort key after, at
// most limit, and whether more may follow.
func (d *dynamoBackend) query(ctx context.Context, pk, after string, limit int) ([]map[string]types.AttributeValue, bool, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(d.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
		Limit:                     aws.Int32(int32(max(limit, 1))),
		ConsistentRead:            aws.Bool(true),
	}
	if after != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: after}}
	}
	out, err := d.db.Query(ctx, in)
	if err != nil {
		return nil, false, err
	}
	return out.Items, len(out.LastEvaluatedKey) > 0, nil
}

func (d *dynamoBackend) owners(ctx context.Context, after string, limit int) ([]ownerHint, bool, error) {
	items, more, err := d.query(ctx, d.prefix+ownersPartition, after, limit)
	if err != nil {
		return nil, false, err
	}
	var out []ownerHint
	for _, it := range items {
		sk, ok := it["sk"].(*types.AttributeValueMemberS)
		if !ok || !strings.HasPrefix(sk.Value, "o#") {
			continue
		}
		h := ownerHint{Owner: sk.Value[2:], Cursor: sk.Value}
		if x, ok := it["expires"].(*types.AttributeValueMemberN); ok {
			if ms, err := strconv.ParseInt(x.Value, 10, 64); err == nil {
				h.Expires = time.UnixMilli(ms)
			}
		}
		out = append(out, h)
	}
	return out, more, nil
}

func (d *dynamoBackend) waitingOf(ctx context.Context, owner, after string, limit int) ([]waitHint, bool, error) {
	items, more, err := d.query(ctx, d.prefix+waitingPartition+owner, after, limit)
	if err != nil {
		return nil, false, err
	}
	var out []waitHint
	for _, it := range items {
		if sk, ok := it["sk"].(*types.AttributeValueMemberS); ok {
			if h, ok := hintOf(owner, sk.Value); ok {
				out = append(out, h)
			}
		}
	}
	return out, more, nil
}

func (d *dynamoBackend) deleteMeta(ctx context.Context, id string) error {
	return d.batchWrite(ctx, []types.WriteRequest{{DeleteRequest: &types.DeleteRequest{Key: d.itemKey(id, "meta")}}})
}

// maxBatchTries bounds the attempts at one batch whose items DynamoDB
// leaves unprocessed (throttling; the SDK's retryer handles errors).
const maxBatchTries = 8

// batchWrite sends reqs 25 at a time (at most 25 × 350 KiB, within the
// 16 MB a request may carry), retrying unprocessed items with jittered
// exponential backoff.
func (d *dynamoBackend) batchWrite(ctx context.Context, reqs []types.WriteRequest) error {
	for len(reqs) > 0 {
		batch := reqs[:min(25, len(reqs))]
		reqs = reqs[len(batch):]
		for try := 1; ; try++ {
			out, err := d.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{d.table: batch}})
			if err != nil {
				return err
			}
			batch = out.UnprocessedItems[d.table]
			if len(batch) == 0 {
				break
			}
			if try == maxBatchTries {
				return fmt.Errorf("%d items still unprocessed after %d attempts", len(batch), try)
			}
			// Full jitter: a wait drawn from [0, 25 ms × 2^try), at most 2 s.
			t := time.NewTimer(rand.N(min(25*time.Millisecond<<try, 2*time.Second)))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
	}
	return nil
}

// CreateTable creates the suspensions table as template.yaml declares it
// (on demand, pk/sk strings, TTL on ttl); for tests and local setups.
func CreateTable(ctx context.Context, db *dynamodb.Client, table string) error {
	return dynamotable.Create(ctx, db, table, "ttl")
}

// ledgerKey is principal's ledger (quota.go): a partition of its own
// after the prefix ('~' is not a character of an id, so no record is
// named so), so that principals' ledgers spread over the table.
func (d *dynamoBackend) ledgerKey(principal string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: d.prefix + "~quota#" + principal},
		"sk": &types.AttributeValueMemberS{Value: "ledger"},
	}
}

func (d *dynamoBackend) getLedger(ctx context.Context, principal string) (*ledger, error) {
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: d.ledgerKey(principal), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	l := &ledger{}
	if out.Item != nil {
		if err := attributevalue.UnmarshalMap(out.Item, l); err != nil {
			return nil, fmt.Errorf("decoding the quota: %w", err)
		}
	}
	if l.Held == nil {
		l.Held = map[string]holding{}
	}
	return l, nil
}

// putLedger writes l with a PutItem conditioned on the version it
// replaces, as put does a record; ttl lets the table delete a ledger
// nothing counts in any more.
func (d *dynamoBackend) putLedger(ctx context.Context, principal string, l *ledger, prev int, expires time.Time) error {
	item, err := attributevalue.MarshalMap(l)
	if err != nil {
		return fmt.Errorf("encoding the quota: %w", err)
	}
	maps.Copy(item, d.ledgerKey(principal))
	item["ttl"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.Add(ttlGrace).Unix(), 10)}
	in := &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: item}
	if prev == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		in.ConditionExpression = aws.String("#v = :v")
		in.ExpressionAttributeNames = map[string]string{"#v": "version"}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: strconv.Itoa(prev)}}
	}
	_, err = d.db.PutItem(ctx, in)
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return errStale
	}
	return err
}
