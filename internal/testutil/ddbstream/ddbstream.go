// Package ddbstream reads a table's DynamoDB stream on DynamoDB Local and
// hands its records over in the shape Lambda's event source mapping gives a
// function (events.DynamoDBEventRecord), so tests can feed real stream
// records to a stream handler: what the table wrote, with DynamoDB's own
// event ids, sequence numbers and old and new images.
//
//	r, err := ddbstream.Open(ctx, inst, table) // the stream must be on
//	recs, err := r.Next(ctx)                   // every record not read yet
//
// Shards are read parents first, each in order, as the event source
// mapping reads them; DynamoDB Local keeps one shard per table.
package ddbstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// Reader reads one table's stream from its start.
type Reader struct {
	client *dynamodbstreams.Client
	arn    string
	iters  map[string]*string // shard id → where the next read starts
	closed map[string]bool    // shards read to their end
}

// Open finds table's stream on inst. The table must have its stream on.
func Open(ctx context.Context, inst *dynamolocal.Instance, table string) (*Reader, error) {
	d, err := inst.Client().DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return nil, err
	}
	arn := aws.ToString(d.Table.LatestStreamArn)
	if arn == "" {
		return nil, fmt.Errorf("table %s has no stream", table)
	}
	return &Reader{
		client: dynamodbstreams.NewFromConfig(inst.Config()),
		arn:    arn,
		iters:  map[string]*string{},
		closed: map[string]bool{},
	}, nil
}

// ARN is the stream's ARN, the event source of its records.
func (r *Reader) ARN() string { return r.arn }

// Next returns every record written to the stream since the last call (the
// first call: since the stream began), shard by shard in stream order.
func (r *Reader) Next(ctx context.Context) ([]events.DynamoDBEventRecord, error) {
	d, err := r.client.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(r.arn)})
	if err != nil {
		return nil, err
	}
	shards := d.StreamDescription.Shards
	var out []events.DynamoDBEventRecord
	done := map[string]bool{}
	// Parents before children, as Lambda reads them.
	for len(done) < len(shards) {
		progressed := false
		for _, sh := range shards {
			id := aws.ToString(sh.ShardId)
			parent := aws.ToString(sh.ParentShardId)
			if done[id] || (parent != "" && !done[parent] && hasShard(shards, parent)) {
				continue
			}
			recs, err := r.readShard(ctx, id)
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
			done[id], progressed = true, true
		}
		if !progressed {
			return nil, errors.New("stream shards form a cycle")
		}
	}
	return out, nil
}

func hasShard(shards []types.Shard, id string) bool {
	for _, s := range shards {
		if aws.ToString(s.ShardId) == id {
			return true
		}
	}
	return false
}

func (r *Reader) readShard(ctx context.Context, shard string) ([]events.DynamoDBEventRecord, error) {
	if r.closed[shard] {
		return nil, nil
	}
	iter := r.iters[shard]
	if iter == nil {
		it, err := r.client.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(r.arn), ShardId: aws.String(shard), ShardIteratorType: types.ShardIteratorTypeTrimHorizon,
		})
		if err != nil {
			return nil, err
		}
		iter = it.ShardIterator
	}
	var out []events.DynamoDBEventRecord
	for iter != nil {
		got, err := r.client.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(1000)})
		if err != nil {
			return nil, err
		}
		for _, rec := range got.Records {
			out = append(out, r.event(rec))
		}
		if got.NextShardIterator == nil {
			r.closed[shard] = true
			delete(r.iters, shard)
			return out, nil
		}
		iter = got.NextShardIterator
		r.iters[shard] = iter
		if len(got.Records) == 0 {
			return out, nil // caught up with an open shard
		}
	}
	return out, nil
}

// event is rec as Lambda hands it to a function.
func (r *Reader) event(rec types.Record) events.DynamoDBEventRecord {
	sr := rec.Dynamodb
	ev := events.DynamoDBEventRecord{
		AWSRegion:      aws.ToString(rec.AwsRegion),
		EventID:        aws.ToString(rec.EventID),
		EventName:      string(rec.EventName),
		EventSource:    aws.ToString(rec.EventSource),
		EventVersion:   aws.ToString(rec.EventVersion),
		EventSourceArn: r.arn,
	}
	if sr == nil {
		return ev
	}
	ev.Change = events.DynamoDBStreamRecord{
		Keys:           Map(sr.Keys),
		NewImage:       Map(sr.NewImage),
		OldImage:       Map(sr.OldImage),
		SequenceNumber: aws.ToString(sr.SequenceNumber),
		SizeBytes:      aws.ToInt64(sr.SizeBytes),
		StreamViewType: string(sr.StreamViewType),
	}
	if sr.ApproximateCreationDateTime != nil {
		ev.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: sr.ApproximateCreationDateTime.Truncate(time.Second)}
	}
	return ev
}

// Map converts a stream image to the Lambda event's attribute values; nil
// stays nil.
func Map(m map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		out[k] = Value(v)
	}
	return out
}

// Value converts one stream attribute value.
func Value(v types.AttributeValue) events.DynamoDBAttributeValue {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value)
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value)
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value)
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value)
	case *types.AttributeValueMemberNULL:
		return events.NewNullAttribute()
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(v.Value)
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(v.Value)
	case *types.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(v.Value)
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, x := range v.Value {
			l[i] = Value(x)
		}
		return events.NewListAttribute(l)
	case *types.AttributeValueMemberM:
		return events.NewMapAttribute(Map(v.Value))
	}
	panic("ddbstream: unknown attribute value type " + strconv.Quote(fmt.Sprintf("%T", v)))
}
