package suspend_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/suspend"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

func dynamoLocation(t *testing.T) location {
	t.Helper()
	db := dynamolocal.Start(t).Client()
	table := dynamolocal.TableName(t)
	if err := suspend.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	return location{
		open: func(opts suspend.Options) suspend.Store { return suspend.NewDynamo(db, table, opts) },
		items: func(t *testing.T, id string) []storedItem {
			t.Helper()
			var out []storedItem
			for _, it := range partitionItems(t, db, table, id) {
				name := it["sk"].(*types.AttributeValueMemberS).Value
				out = append(out, storedItem{name, itemSize(it)})
			}
			return out
		},
		spoil: func(t *testing.T, id string) {
			_, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "SUSP#" + id}, "sk": &types.AttributeValueMemberS{Value: "meta"},
				"version": &types.AttributeValueMemberS{Value: "not a number"}}})
			if err != nil {
				t.Fatal(err)
			}
		},
	}
}

// partitionItems reads every item of suspension id's partition.
func partitionItems(t *testing.T, db *dynamodb.Client, table, id string) []map[string]types.AttributeValue {
	t.Helper()
	return itemsOf(t, db, table, "SUSP#"+id)
}

// itemsOf reads every item of partition pk.
func itemsOf(t *testing.T, db *dynamodb.Client, table, pk string) []map[string]types.AttributeValue {
	t.Helper()
	var items []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(db, &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, out.Items...)
	}
	return items
}

// itemSize is an item's size as DynamoDB counts it against the 400 KB
// limit (attribute names plus values), rounded up where DynamoDB's rule is
// finer (numbers).
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return len(v.Value) + 1
	case *types.AttributeValueMemberM:
		return 3 + itemSize(v.Value)
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	default:
		return 1
	}
}

// TestDynamoItemsUnderTheLimit saves images of several sizes, the biggest
// metadata allowed, and checks every item written is under 400 KB, that
// the image is chunked and read back whole.
func TestDynamoItemsUnderTheLimit(t *testing.T) {
	const limit = 400 << 10
	loc := dynamoLocation(t)
	s := loc.open(suspend.Options{})
	ctx := context.Background()
	bigBridge := json.RawMessage(`"` + strings.Repeat("n", suspend.MaxBridgeBytes-2) + `"`)
	for _, tc := range []struct {
		id     string
		memory int
		bridge json.RawMessage
		chunks int
	}{
		{"ex_typical", 25 << 10, json.RawMessage(bridgeData), 1},
		{"ex_4MiB_heap", 250 << 10, json.RawMessage(bridgeData), 1},
		{"ex_1MiB", 1 << 20, bigBridge, 3},
		{"ex_10MiB", 10 << 20, bigBridge, 30}, // two BatchWriteItem requests
	} {
		t.Run(tc.id, func(t *testing.T) {
			r := &suspend.Record{ID: tc.id, Principal: "arn:aws:sts::123456789012:assumed-role/agent/session", Bridge: tc.bridge, Suspension: suspension(tc.memory, 5)}
			if err := s.Save(ctx, r); err != nil {
				t.Fatal(err)
			}
			chunks, biggest := 0, 0
			for _, it := range loc.items(t, tc.id) {
				if it.size >= limit {
					t.Errorf("item %s is %d bytes, over DynamoDB's limit", it.name, it.size)
				}
				if strings.HasPrefix(it.name, "chunk#") {
					chunks++
					biggest = max(biggest, it.size)
				}
				t.Logf("%s: %d bytes", it.name, it.size)
			}
			if chunks != tc.chunks {
				t.Errorf("%d chunks, want %d", chunks, tc.chunks)
			}
			if tc.chunks > 1 && biggest < 300<<10 {
				t.Errorf("biggest chunk item %d bytes: chunks are not filled", biggest)
			}
			got, err := s.Load(ctx, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			sameSuspension(t, got.Suspension, r.Suspension)
		})
	}
}

// lostResponse makes every PutItem happen but report a failure, as a
// timeout after DynamoDB applied the write would.
type lostResponse struct{ suspend.DynamoAPI }

func (l lostResponse) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, err := l.DynamoAPI.PutItem(ctx, in, opts...); err != nil {
		return nil, err
	}
	return nil, errors.New("connection reset")
}

// TestDynamoLostResponseKeepsImage checks a save whose outcome is unknown
// leaves the image in place: the record may point at it.
func TestDynamoLostResponseKeepsImage(t *testing.T) {
	db := dynamolocal.Start(t).Client()
	table := dynamolocal.TableName(t)
	if err := suspend.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := &suspend.Record{ID: "ex_1", Suspension: suspension(1<<20, 1)}
	if err := suspend.NewDynamo(lostResponse{db}, table, suspend.Options{}).Save(ctx, r); err == nil {
		t.Fatal("the save reported no error")
	}
	got, err := suspend.NewDynamo(db, table, suspend.Options{}).Load(ctx, "ex_1")
	if err != nil {
		t.Fatal(err)
	}
	sameSuspension(t, got.Suspension, r.Suspension)
}
