package capability

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Drafts live in the capabilities table under one partition, pk DRAFT, sk
// D#<id>: listing them is one Query (drafts are few: each waits for a
// person), reading one a GetItem. The draft itself is a JSON document in
// attribute doc, its status beside it for the conditions that close it
// once, and expires_at (epoch seconds) for the table's TTL, which deletes
// a draft some time after it expired (readers skip it from then).
const draftPK = "DRAFT"

type draftItem struct {
	Doc       string `dynamodbav:"doc"`
	Status    string `dynamodbav:"status"`
	ExpiresAt int64  `dynamodbav:"expires_at"`
}

func draftKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: draftPK}, "sk": &types.AttributeValueMemberS{Value: "D#" + id}}
}

func (it draftItem) draft() (Draft, error) {
	var d Draft
	if err := json.Unmarshal([]byte(it.Doc), &d); err != nil {
		return Draft{}, fault.Wrap(fault.Internal, err, "decoding a capability draft")
	}
	return d, nil
}

// PutDraft implements Registry: an UpdateItem that creates the draft's
// item and holds only where no draft has the id (an update rather than a
// put, so the registry needs no permission it did not have).
func (r *DynamoRegistry) PutDraft(ctx context.Context, d Draft) error {
	if err := CheckDraftID(d.ID); err != nil {
		return err
	}
	doc, err := json.Marshal(d)
	if err != nil {
		return fault.Wrap(fault.Internal, err, "encoding a capability draft")
	}
	_, err = r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(r.table), Key: draftKey(d.ID),
		UpdateExpression:         aws.String("SET #doc = :doc, #status = :status, #exp = :exp"),
		ConditionExpression:      aws.String("attribute_not_exists(pk)"),
		ExpressionAttributeNames: map[string]string{"#doc": "doc", "#status": "status", "#exp": "expires_at"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":doc":    &types.AttributeValueMemberS{Value: string(doc)},
			":status": &types.AttributeValueMemberS{Value: d.Status},
			":exp":    &types.AttributeValueMemberN{Value: strconv.FormatInt(d.ExpiresAt.Unix(), 10)},
		}})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return fault.New(fault.Conflict, "draft %s exists", d.ID)
	case err != nil:
		return fault.Wrap(fault.Unavailable, err, "saving draft "+d.ID)
	}
	return nil
}

// GetDraft implements Registry: one consistent GetItem.
func (r *DynamoRegistry) GetDraft(ctx context.Context, id string) (Draft, error) {
	if err := CheckDraftID(id); err != nil {
		return Draft{}, err
	}
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: draftKey(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Draft{}, fault.Wrap(fault.Unavailable, err, "reading draft "+id)
	}
	missing := fault.New(fault.NotFound, "no draft %s (it may have expired)", id)
	if out.Item == nil {
		return Draft{}, missing
	}
	var it draftItem
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return Draft{}, fault.Wrap(fault.Internal, err, "decoding draft "+id)
	}
	d, err := it.draft()
	if err != nil {
		return Draft{}, err
	}
	if !time.Now().Before(d.ExpiresAt) {
		return Draft{}, missing
	}
	return d, nil
}

// Drafts implements Registry: a consistent Query of the drafts'
// partition.
func (r *DynamoRegistry) Drafts(ctx context.Context) ([]Draft, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(r.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ConsistentRead:            aws.Bool(true),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: draftPK}},
	}
	now := time.Now()
	out := []Draft{}
	for {
		page, err := r.db.Query(ctx, in)
		if err != nil {
			return nil, fault.Wrap(fault.Unavailable, err, "listing capability drafts")
		}
		for _, raw := range page.Items {
			var it draftItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return nil, fault.Wrap(fault.Internal, err, "decoding a capability draft")
			}
			d, err := it.draft()
			if err != nil {
				return nil, err
			}
			if now.Before(d.ExpiresAt) {
				out = append(out, d)
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	sortDrafts(out)
	return out, nil
}

// draftUpdate is the update that writes d, closed, over the draft it was
// while that draft is still pending.
func (r *DynamoRegistry) draftUpdate(d Draft) (*types.Update, error) {
	doc, err := json.Marshal(d)
	if err != nil {
		return nil, fault.Wrap(fault.Internal, err, "encoding a capability draft")
	}
	return &types.Update{TableName: aws.String(r.table), Key: draftKey(d.ID),
		UpdateExpression:         aws.String("SET #doc = :doc, #status = :status"),
		ConditionExpression:      aws.String("#status = :pending AND #exp > :now"),
		ExpressionAttributeNames: map[string]string{"#doc": "doc", "#status": "status", "#exp": "expires_at"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":doc":     &types.AttributeValueMemberS{Value: string(doc)},
			":status":  &types.AttributeValueMemberS{Value: d.Status},
			":pending": &types.AttributeValueMemberS{Value: DraftPending},
			":now":     &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Unix(), 10)},
		}}, nil
}

// CloseDraft implements Registry: the draft is read, then updated on the
// condition that it is still pending.
func (r *DynamoRegistry) CloseDraft(ctx context.Context, id, status, principal, reason string) (Draft, error) {
	d, err := r.GetDraft(ctx, id)
	if err != nil {
		return Draft{}, err
	}
	if d.Status != DraftPending {
		return Draft{}, fault.New(fault.Conflict, "draft %s is %s already", id, d.Status)
	}
	d = closed(d, status, principal, reason, 0, time.Now().UTC())
	u, err := r.draftUpdate(d)
	if err != nil {
		return Draft{}, err
	}
	_, err = r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ConditionExpression: u.ConditionExpression, ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return Draft{}, fault.New(fault.Conflict, "draft %s was closed meanwhile", id)
	case err != nil:
		return Draft{}, fault.Wrap(fault.Unavailable, err, "closing draft "+id)
	}
	return d, nil
}
