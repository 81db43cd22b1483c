package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/aggregate"
	"github.com/pml-sandbox/pml/internal/cli"
	"github.com/pml-sandbox/pml/internal/testutil/ddbstream"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
	"github.com/pml-sandbox/pml/internal/trace"
	"github.com/pml-sandbox/pml/internal/tracedb"
)

// TestTraceRelatedSumsShards: `pml trace --related` on a DynamoDB table
// whose counters the aggregator spread over shards prints one number per
// tool, the sum.
func TestTraceRelatedSumsShards(t *testing.T) {
	ctx := context.Background()
	inst := dynamolocal.Start(t)
	db := inst.Client()
	table := dynamolocal.TableName(t)
	if err := tracedb.CreateTable(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	store := tracedb.NewDynamo(db, table, 0, nil)
	for i := range 12 {
		id := fmt.Sprintf("ex_%02d", i)
		var calls []trace.Call
		for j, tool := range []string{"x", "y", "z"} {
			calls = append(calls, trace.Call{ExecutionID: id, CallID: j + 1, Server: "s", Tool: tool, Kind: trace.KindMCP, StartedAt: time.Now(), OK: true})
		}
		store.Record(ctx, trace.Execution{ID: id, CodeHash: "h", Status: trace.StatusOK, StartedAt: time.Now(), Source: "test", Calls: 3}, calls)
		if err := store.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := ddbstream.Open(ctx, inst, table)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := stream.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := aggregate.New(aggregate.Options{DB: db, Table: table, Extract: tracedb.CoOccurrence, MaxTransactItems: 10,
		CountersPerShard: 1, MaxShards: 3, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// A batch per execution: each spreads its counters over 3 shards.
	for _, r := range recs {
		if err := agg.Handle(ctx, events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{r}}); err != nil {
			t.Fatal(err)
		}
	}
	// The counters of s:x are in more than one partition.
	partitions := 0
	for _, pk := range []string{"TOOL#s:x", aggregate.ShardKey("TOOL#s:x", 1), aggregate.ShardKey("TOOL#s:x", 2)} {
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table), KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :w)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}, ":w": &types.AttributeValueMemberS{Value: "WITH#"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Items) > 0 {
			partitions++
		}
	}
	if partitions < 2 {
		t.Fatalf("the counters of s:x are in %d partition(s); the test wants them sharded", partitions)
	}
	var out, errOut bytes.Buffer
	code := cli.Main(ctx, []string{"trace", "--store", "dynamodb", "--table", table, "--endpoint", inst.Endpoint, "--related", "s:x"}, &out, &errOut)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var got struct {
		Tool    string            `json:"tool"`
		Related []tracedb.Related `json:"related"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if fmt.Sprint(got.Related) != "[{s:y 12} {s:z 12}]" {
		t.Fatalf("related %+v, want s:y and s:z 12 times each", got.Related)
	}
}
