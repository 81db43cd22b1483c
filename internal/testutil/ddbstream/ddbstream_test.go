package ddbstream_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/pml-sandbox/pml/internal/dynamotable"
	"github.com/pml-sandbox/pml/internal/testutil/ddbstream"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

func TestMain(m *testing.M) { os.Exit(dynamolocal.Run(m)) }

// TestValue: every attribute type comes out as Lambda's JSON would carry it.
func TestValue(t *testing.T) {
	tests := []struct {
		in   types.AttributeValue
		want string
	}{
		{&types.AttributeValueMemberS{Value: "x"}, `{"S":"x"}`},
		{&types.AttributeValueMemberN{Value: "12.5"}, `{"N":"12.5"}`},
		{&types.AttributeValueMemberB{Value: []byte("hi")}, `{"B":"aGk="}`},
		{&types.AttributeValueMemberBOOL{Value: true}, `{"BOOL":true}`},
		{&types.AttributeValueMemberNULL{Value: true}, `{"NULL":true}`},
		{&types.AttributeValueMemberSS{Value: []string{"a", "b"}}, `{"SS":["a","b"]}`},
		{&types.AttributeValueMemberNS{Value: []string{"1"}}, `{"NS":["1"]}`},
		{&types.AttributeValueMemberBS{Value: [][]byte{[]byte("hi")}}, `{"BS":["aGk="]}`},
		{&types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "a"}}}, `{"L":[{"S":"a"}]}`},
		{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberN{Value: "1"}}}, `{"M":{"k":{"N":"1"}}}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(ddbstream.Value(tt.in))
		if err != nil || string(b) != tt.want {
			t.Errorf("%T: %s %v, want %s", tt.in, b, err, tt.want)
		}
	}
}

// TestNextReadsEachRecordOnce: records come in write order with their
// images and event ids, and a second Next returns only what was written
// since.
func TestNextReadsEachRecordOnce(t *testing.T) {
	inst := dynamolocal.Start(t)
	db := inst.Client()
	ctx := context.Background()
	table := dynamolocal.TableName(t)
	if err := dynamotable.Create(ctx, db, table, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := ddbstream.Open(ctx, inst, table); err == nil {
		t.Fatal("Open found a stream on a table without one")
	}
	if _, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(table),
		StreamSpecification: &dtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: dtypes.StreamViewTypeNewAndOldImages}}); err != nil {
		t.Fatal(err)
	}
	r, err := ddbstream.Open(ctx, inst, table)
	if err != nil {
		t.Fatal(err)
	}
	put := func(v string) {
		t.Helper()
		item := map[string]dtypes.AttributeValue{"pk": &dtypes.AttributeValueMemberS{Value: "p"}, "sk": &dtypes.AttributeValueMemberS{Value: "s"}, "v": &dtypes.AttributeValueMemberS{Value: v}}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	put("1")
	put("2")
	recs, err := r.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].EventName != "INSERT" || recs[1].EventName != "MODIFY" ||
		recs[1].Change.OldImage["v"].String() != "1" || recs[1].Change.NewImage["v"].String() != "2" ||
		recs[0].EventID == "" || recs[0].EventID == recs[1].EventID || recs[0].EventSourceArn != r.ARN() {
		t.Fatalf("records %+v", recs)
	}
	if recs, err := r.Next(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("nothing new, got %d records: %v", len(recs), err)
	}
	put("3")
	if recs, err := r.Next(ctx); err != nil || len(recs) != 1 || recs[0].Change.NewImage["v"].String() != "3" {
		t.Fatalf("the third write: %+v %v", recs, err)
	}
}
