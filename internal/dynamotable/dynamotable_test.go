package dynamotable_test

import (
	"context"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/dynamotable"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

func TestMain(m *testing.M) { os.Exit(dynamolocal.Run(m)) }

func TestCreate(t *testing.T) {
	tests := []struct {
		name, ttl string
		wantTTL   types.TimeToLiveStatus
	}{
		{"with TTL", "expires_at", types.TimeToLiveStatusEnabled},
		{"without TTL", "", types.TimeToLiveStatusDisabled},
	}
	db := dynamolocal.Start(t).Client()
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := dynamolocal.TableName(t)
			if err := dynamotable.Create(ctx, db, table, tt.ttl); err != nil {
				t.Fatal(err)
			}
			d, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			if err != nil {
				t.Fatal(err)
			}
			keys := map[string]types.KeyType{}
			for _, k := range d.Table.KeySchema {
				keys[aws.ToString(k.AttributeName)] = k.KeyType
			}
			if keys["pk"] != types.KeyTypeHash || keys["sk"] != types.KeyTypeRange || len(keys) != 2 {
				t.Fatalf("key schema %v", keys)
			}
			ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
			if err != nil {
				t.Fatal(err)
			}
			if got := ttl.TimeToLiveDescription.TimeToLiveStatus; got != tt.wantTTL {
				t.Fatalf("TTL %q, want %q", got, tt.wantTTL)
			}
			if tt.ttl != "" && aws.ToString(ttl.TimeToLiveDescription.AttributeName) != tt.ttl {
				t.Fatalf("TTL on %q, want %q", aws.ToString(ttl.TimeToLiveDescription.AttributeName), tt.ttl)
			}
			if err := dynamotable.Create(ctx, db, table, tt.ttl); err == nil {
				t.Fatal("creating an existing table succeeded")
			}
		})
	}
}
