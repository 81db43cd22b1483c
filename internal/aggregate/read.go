package aggregate

import (
	"context"
	"hash/fnv"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/pml-sandbox/pml/internal/fault"
)

// ShardKey is the partition key of shard s (1, 2...) of the counter
// partition base; shard 0 is base itself.
func ShardKey(base string, s int) string { return base + "#S" + strconv.Itoa(s) }

// shardOf picks one of n shards for counter sk in journal j.
func shardOf(j, sk string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(j))
	h.Write([]byte{0})
	h.Write([]byte(sk))
	return int(h.Sum64() % uint64(n))
}

// Querier is what Read needs of a DynamoDB client.
type Querier interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Read returns the counter items of the partition base from all its
// shards: one Query of base (which holds the "#SHARDS" item when there
// are shards), then one of each other shard, concurrently. The same
// counter (sort key) may come back once per shard: callers sum "count" by
// sort key, or by the label they keep. Items of another key that share a
// shard's partition key (a counter named like a shard) are left out: a
// counter item names its base.
func Read(ctx context.Context, db Querier, table, base string) ([]map[string]types.AttributeValue, error) {
	first, err := queryAll(ctx, db, table, base)
	if err != nil {
		return nil, err
	}
	shards := 1
	var out []map[string]types.AttributeValue
	for _, it := range first {
		if sk, _ := it["sk"].(*types.AttributeValueMemberS); sk != nil && sk.Value == shardsSK {
			if v, _ := it["shards"].(*types.AttributeValueMemberN); v != nil {
				if n, err := strconv.Atoi(v.Value); err == nil && n > 1 {
					shards = n
				}
			}
			continue
		}
		// Counters written before there were shards name no base.
		if b, ok := it["base"].(*types.AttributeValueMemberS); !ok || b.Value == base {
			out = append(out, it)
		}
	}
	rest := make([][]map[string]types.AttributeValue, shards)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for s := 1; s < shards; s++ {
		g.Go(func() error {
			items, err := queryAll(gctx, db, table, ShardKey(base, s))
			rest[s] = items
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, items := range rest {
		for _, it := range items {
			if b, ok := it["base"].(*types.AttributeValueMemberS); ok && b.Value == base {
				out = append(out, it)
			}
		}
	}
	return out, nil
}

func queryAll(ctx context.Context, db Querier, table, pk string) ([]map[string]types.AttributeValue, error) {
	items, err := query(ctx, db, &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
	})
	if err != nil {
		return nil, wrapf(fault.Unavailable, err, "reading counters %s", pk)
	}
	return items, nil
}

// query returns every item in, paging through them.
func query(ctx context.Context, db Querier, in *dynamodb.QueryInput) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	for {
		page, err := db.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// ReadCounter returns the items of one counter (base, sk) on every shard
// base is spread over: one Query of base's "#SHARDS" item, then one keyed
// Query of each shard (base itself the first), concurrently. Callers sum
// "count"; labels may differ between shards (each has the labels of the
// batches that wrote to it).
func ReadCounter(ctx context.Context, db Querier, table, base, sk string) ([]map[string]types.AttributeValue, error) {
	key := func(pk, sk string) *dynamodb.QueryInput {
		return &dynamodb.QueryInput{
			TableName:              aws.String(table),
			KeyConditionExpression: aws.String("pk = :pk AND sk = :sk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": &types.AttributeValueMemberS{Value: pk}, ":sk": &types.AttributeValueMemberS{Value: sk}},
		}
	}
	head, err := query(ctx, db, key(base, shardsSK))
	if err != nil {
		return nil, wrapf(fault.Unavailable, err, "reading the shards of %s", base)
	}
	shards := 1
	for _, it := range head {
		if v, _ := it["shards"].(*types.AttributeValueMemberN); v != nil {
			if n, err := strconv.Atoi(v.Value); err == nil && n > 1 {
				shards = n
			}
		}
	}
	found := make([][]map[string]types.AttributeValue, shards)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for s := range shards {
		pk := base
		if s > 0 {
			pk = ShardKey(base, s)
		}
		g.Go(func() error {
			items, err := query(gctx, db, key(pk, sk))
			found[s] = items
			if err != nil {
				return wrapf(fault.Unavailable, err, "reading counter %s %s", pk, sk)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []map[string]types.AttributeValue
	for _, items := range found {
		for _, it := range items {
			if b, ok := it["base"].(*types.AttributeValueMemberS); !ok || b.Value == base {
				out = append(out, it)
			}
		}
	}
	return out, nil
}
