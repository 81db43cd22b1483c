package capability

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Drafts live in the capabilities table under one partition, pk DRAFT, sk
// D#<id>, apart from the versions (a save never rewrites them, nor they a
// version): listing them is one Query (drafts are few: each waits for a
// person, within DraftLimits), reading one a GetItem. The draft itself is
// a JSON document in attribute doc, its status beside it for the
// conditions that close it once, its author and creation for the limits,
// and expires_at (epoch seconds) for the table's TTL, which deletes a
// draft some time after it expired (readers skip it from then).
//
// The limits are counted as every container sees them: a new draft reads
// the drafts' token (pk DRAFTQ, sk TOKEN, a version number), counts the
// drafts kept (a consistent Query of their small attributes), and is
// written in one transaction with the token moved on from the version
// read, so of two drafts counted against the same state one is written
// and the other counts again. A closed draft that makes room is expired
// (expires_at set to now: readers skip it, the TTL deletes it): the
// registry has no permission to delete.
const (
	draftPK      = "DRAFT"
	draftQuotaPK = "DRAFTQ"
)

type draftItem struct {
	Doc       string `dynamodbav:"doc"`
	Status    string `dynamodbav:"status"`
	ExpiresAt int64  `dynamodbav:"expires_at"`
	Author    string `dynamodbav:"author"`
	CreatedAt int64  `dynamodbav:"created_at"`
}

// draftAttempts bounds the counts a new draft makes when others are
// written meanwhile.
const draftAttempts = 8

// live reports whether d, read from it, has not expired at now: neither
// by its own expiry nor by the item's, which a closed draft that made
// room for a new one was given.
func (it draftItem) live(d Draft, now time.Time) bool {
	return now.Before(d.ExpiresAt) && (it.ExpiresAt == 0 || it.ExpiresAt > now.Unix())
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

// PutDraft implements Registry: the drafts kept are counted against
// limits, and the draft created (an UpdateItem where no draft has the
// id: an update rather than a put, so the registry needs no permission it
// did not have) in one transaction with the token that orders every new
// draft, and with the expiry of the closed drafts that make room.
func (r *DynamoRegistry) PutDraft(ctx context.Context, d Draft, limits DraftLimits) error {
	if err := CheckDraftID(d.ID); err != nil {
		return err
	}
	doc, err := json.Marshal(d)
	if err != nil {
		return fault.Wrap(fault.Internal, err, "encoding a capability draft")
	}
	for range draftAttempts {
		token, kept, err := r.keptDrafts(ctx)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(kept, func(k keptDraft) bool { return k.ID == d.ID }) {
			return fault.New(fault.Conflict, "draft %s exists", d.ID)
		}
		evict, err := admit(kept, d, limits)
		if err != nil {
			return err
		}
		writes := []types.TransactWriteItem{{Update: &types.Update{TableName: aws.String(r.table), Key: draftKey(d.ID),
			UpdateExpression:         aws.String("SET #doc = :doc, #status = :status, #exp = :exp, #author = :author, #created = :created"),
			ConditionExpression:      aws.String("attribute_not_exists(pk)"),
			ExpressionAttributeNames: map[string]string{"#doc": "doc", "#status": "status", "#exp": "expires_at", "#author": "author", "#created": "created_at"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":doc":     &types.AttributeValueMemberS{Value: string(doc)},
				":status":  &types.AttributeValueMemberS{Value: d.Status},
				":exp":     &types.AttributeValueMemberN{Value: strconv.FormatInt(d.ExpiresAt.Unix(), 10)},
				":author":  &types.AttributeValueMemberS{Value: d.Author},
				":created": &types.AttributeValueMemberN{Value: strconv.FormatInt(d.CreatedAt.UnixNano(), 10)},
			}}}, {Update: r.tokenUpdate(token)}}
		for _, id := range evict {
			writes = append(writes, types.TransactWriteItem{Update: &types.Update{TableName: aws.String(r.table), Key: draftKey(id),
				UpdateExpression:          aws.String("SET #exp = :now"),
				ConditionExpression:       aws.String("#status <> :pending"),
				ExpressionAttributeNames:  map[string]string{"#exp": "expires_at", "#status": "status"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Unix(), 10)}, ":pending": &types.AttributeValueMemberS{Value: DraftPending}},
			}})
		}
		_, err = r.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: writes})
		var tce *types.TransactionCanceledException
		switch {
		case err == nil:
			return nil
		case !errors.As(err, &tce):
			return fault.Wrap(fault.Unavailable, err, "saving draft "+d.ID)
		case len(tce.CancellationReasons) > 0 && aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed":
			return fault.New(fault.Conflict, "draft %s exists", d.ID)
		}
		// Another draft was written since the count: count again.
	}
	return fault.New(fault.Unavailable, "saving draft %s: too many drafts written at once", d.ID)
}

// keptDrafts reads the drafts' token (its version, 0 before any) and the
// drafts not expired, as the limits count them: consistent reads, the
// token first, so a count is never older than the token it is written
// against.
func (r *DynamoRegistry) keptDrafts(ctx context.Context) (int64, []keptDraft, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: draftQuotaPK}, "sk": &types.AttributeValueMemberS{Value: "TOKEN"}}})
	if err != nil {
		return 0, nil, fault.Wrap(fault.Unavailable, err, "counting capability drafts")
	}
	var token struct {
		Version int64 `dynamodbav:"version"`
	}
	if out.Item != nil {
		if err := attributevalue.UnmarshalMap(out.Item, &token); err != nil {
			return 0, nil, fault.Wrap(fault.Internal, err, "decoding the drafts' token")
		}
	}
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(r.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ConsistentRead:            aws.Bool(true),
		ProjectionExpression:      aws.String("#sk, #status, #exp, #author, #created"),
		ExpressionAttributeNames:  map[string]string{"#sk": "sk", "#status": "status", "#exp": "expires_at", "#author": "author", "#created": "created_at"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: draftPK}},
	}
	now := time.Now().Unix()
	var kept []keptDraft
	for {
		page, err := r.db.Query(ctx, in)
		if err != nil {
			return 0, nil, fault.Wrap(fault.Unavailable, err, "counting capability drafts")
		}
		for _, raw := range page.Items {
			var it struct {
				SK string `dynamodbav:"sk"`
				draftItem
			}
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return 0, nil, fault.Wrap(fault.Internal, err, "decoding a capability draft")
			}
			if it.ExpiresAt > now {
				kept = append(kept, keptDraft{ID: strings.TrimPrefix(it.SK, "D#"), Author: it.Author, Status: it.Status, CreatedAt: time.Unix(0, it.CreatedAt)})
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return token.Version, kept, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// tokenUpdate moves the drafts' token on from version (0: none yet).
func (r *DynamoRegistry) tokenUpdate(version int64) *types.Update {
	u := &types.Update{TableName: aws.String(r.table),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: draftQuotaPK}, "sk": &types.AttributeValueMemberS{Value: "TOKEN"}},
		UpdateExpression:          aws.String("SET #v = :next"),
		ExpressionAttributeNames:  map[string]string{"#v": "version"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":next": &types.AttributeValueMemberN{Value: strconv.FormatInt(version+1, 10)}},
	}
	if version == 0 {
		u.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		u.ConditionExpression = aws.String("#v = :v")
		u.ExpressionAttributeValues[":v"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)}
	}
	return u
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
	if !it.live(d, time.Now()) {
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
			if it.live(d, now) {
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
