package capability

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// SeedDynamo writes caps into an empty table as Save would write each as
// its version 1 (its V# item, its LATEST item, its namespace's item), in
// BatchWriteItem requests: a registry of thousands made in seconds, for
// benchmarks.
func SeedDynamo(ctx context.Context, db *dynamodb.Client, table string, caps []Capability) error {
	now := time.Now().UTC()
	var puts []map[string]types.AttributeValue
	namespaces := map[string]bool{}
	for _, c := range caps {
		if err := Validate(c); err != nil {
			return err
		}
		c.Version, c.ID, c.CreatedAt, c.UpdatedAt = 1, ID(c.Name, 1), now, now
		latest := toItem(c, latestPK)
		latest.LPK, latest.Changed = latestPK, now.Format(changedLayout)
		for _, it := range []item{toItem(c, versionSK(1)), latest} {
			av, err := attributevalue.MarshalMap(it)
			if err != nil {
				return err
			}
			puts = append(puts, av)
		}
		if !namespaces[c.Namespace()] {
			namespaces[c.Namespace()] = true
			puts = append(puts, nsKey(c.Namespace()))
		}
	}
	for len(puts) > 0 {
		n := min(25, len(puts))
		reqs := make([]types.WriteRequest, n)
		for i, p := range puts[:n] {
			reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: p}}
		}
		puts = puts[n:]
		pending := map[string][]types.WriteRequest{table: reqs}
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt > 20 {
				return fmt.Errorf("seeding %s: items left unprocessed", table)
			}
			out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return err
			}
			pending = out.UnprocessedItems
		}
	}
	return nil
}

// PutVersion writes c's version item as Save writes a new one (the same
// conditional put, alone in a transaction): what a rewrite of an existing
// version would have to go through.
func PutVersion(ctx context.Context, r *DynamoRegistry, c Capability) error {
	put, err := r.putVersion(c)
	if err != nil {
		return err
	}
	_, err = r.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: put}}})
	return err
}
