package usage

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/policy"
)

// DynamoAPI is the part of the DynamoDB client a Dynamo counter uses: one
// conditional UpdateItem per count (the suspensions table's grant
// includes it).
type DynamoAPI interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Dynamo counts in a DynamoDB table with the suspensions table's shape
// (pk, sk; TTL on ttl), one item per count:
//
//	pk LIMIT#<hash of policy, measure, principal, tool, window>  sk n
//
// Each Add is one UpdateItem: ADD to n, conditioned on n staying within
// the limit, so containers counting at once never let a limit pass.
//
// No key is hot: a key is one principal's use of one tool under one
// policy in one window, hashed so that keys spread over partitions
// whatever the principals' names. 10,000 executions a second are spread
// over as many keys as there are principals and limited tools; the
// writes one key takes in a window are bounded by its limit (a count
// within the limit, then one refused write per container: policy.Gate
// remembers a full count until its window ends), and a limit's rate is
// bounded at load (at most 500 a second, half what a DynamoDB partition
// takes per key).
type Dynamo struct {
	db    DynamoAPI
	table string
}

// NewDynamo returns a counter in table.
func NewDynamo(db DynamoAPI, table string) *Dynamo { return &Dynamo{db: db, table: table} }

// keyPrefix is the partition key prefix of counts in a shared table.
const keyPrefix = "LIMIT#"

// Add implements policy.Counter.
func (d *Dynamo) Add(ctx context.Context, k policy.CountKey, n, max int64) (int64, bool, error) {
	if max >= 0 && n > max {
		return 0, false, nil
	}
	in := &dynamodb.UpdateItemInput{
		TableName: aws.String(d.table),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: keyPrefix + keyHash(k)},
			"sk": &types.AttributeValueMemberS{Value: "n"},
		},
		UpdateExpression: aws.String("ADD #n :n SET #ttl = :ttl, #p = :p, #m = :m, #pr = :pr, #t = :t, #w = :w"),
		ExpressionAttributeNames: map[string]string{"#n": "n", "#ttl": "ttl", "#p": "policy", "#m": "measure",
			"#pr": "principal", "#t": "tool", "#w": "window"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n":   num(n),
			":ttl": num(k.Expires.Unix()),
			":p":   &types.AttributeValueMemberS{Value: k.Policy},
			":m":   &types.AttributeValueMemberS{Value: k.Measure},
			":pr":  &types.AttributeValueMemberS{Value: k.Principal},
			":t":   &types.AttributeValueMemberS{Value: k.Tool},
			":w":   num(k.Window.Unix()),
		},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if max >= 0 {
		// The count before this call may be at most max-n.
		in.ConditionExpression = aws.String("attribute_not_exists(#n) OR #n <= :room")
		in.ExpressionAttributeValues[":room"] = num(max - n)
	}
	out, err := d.db.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		var r record
		if len(ccf.Item) == 0 || attributevalue.UnmarshalMap(ccf.Item, &r) != nil {
			// An endpoint that does not return the item (DynamoDB
			// Local): the count is at least what failed the condition.
			return max - n + 1, false, nil
		}
		return r.Count, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("usage: counting %s: %w", k.Policy, err)
	}
	var r record
	if err := attributevalue.UnmarshalMap(out.Attributes, &r); err != nil {
		return 0, false, fmt.Errorf("usage: reading the count: %w", err)
	}
	return r.Count, true, nil
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
