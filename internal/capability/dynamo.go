package capability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/dynamotable"
	"github.com/pml-sandbox/pml/internal/fault"
)

// DynamoAPI is the part of the DynamoDB client the registry uses.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// DynamoRegistry stores capabilities in one table: pk CAP#<name>, sk
// V#000001… for each version, and sk LATEST holding a copy of the newest
// version plus the call count. A save writes the new version and moves
// LATEST in one transaction conditioned on the version it read, so two
// concurrent saves can never take the same version number.
type DynamoRegistry struct {
	db    DynamoAPI
	table string
}

// NewDynamoRegistry uses table through db.
func NewDynamoRegistry(db DynamoAPI, table string) *DynamoRegistry {
	return &DynamoRegistry{db: db, table: table}
}

type item struct {
	PK          string `dynamodbav:"pk"`
	SK          string `dynamodbav:"sk"`
	Name        string `dynamodbav:"name"`
	Version     int    `dynamodbav:"version"`
	ID          string `dynamodbav:"id"`
	Description string `dynamodbav:"description,omitempty"`
	InputSchema string `dynamodbav:"input_schema,omitempty"`
	Code        string `dynamodbav:"code"`
	CreatedAt   string `dynamodbav:"created_at"`
	UpdatedAt   string `dynamodbav:"updated_at"`
	Calls       int64  `dynamodbav:"calls"`
}

func pk(name string) string        { return "CAP#" + name }
func versionSK(version int) string { return fmt.Sprintf("V#%06d", version) }
func key(name, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk(name)}, "sk": &types.AttributeValueMemberS{Value: sk}}
}

func toItem(c Capability, sk string) item {
	return item{PK: pk(c.Name), SK: sk, Name: c.Name, Version: c.Version, ID: c.ID, Description: c.Description,
		InputSchema: string(c.InputSchema), Code: c.Code, CreatedAt: c.CreatedAt.Format(time.RFC3339Nano),
		UpdatedAt: c.UpdatedAt.Format(time.RFC3339Nano), Calls: c.Calls}
}

func fromItem(it item) Capability {
	c := Capability{Name: it.Name, Version: it.Version, ID: it.ID, Description: it.Description, Code: it.Code, Calls: it.Calls}
	if it.InputSchema != "" {
		c.InputSchema = json.RawMessage(it.InputSchema)
	}
	c.CreatedAt, _ = time.Parse(time.RFC3339Nano, it.CreatedAt)
	c.UpdatedAt, _ = time.Parse(time.RFC3339Nano, it.UpdatedAt)
	return c
}

func (r *DynamoRegistry) get(ctx context.Context, name, sk string) (*item, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: key(name, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "reading capability "+name)
	}
	if out.Item == nil {
		return nil, nil
	}
	var it item
	if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
		return nil, fault.Wrap(fault.Internal, err, "decoding capability "+name)
	}
	return &it, nil
}

// Save implements Registry.
func (r *DynamoRegistry) Save(ctx context.Context, c Capability) (Capability, error) {
	if err := Validate(c); err != nil {
		return Capability{}, err
	}
	for attempt := 0; attempt < 8; attempt++ {
		latest, err := r.get(ctx, c.Name, "LATEST")
		if err != nil {
			return Capability{}, err
		}
		now := time.Now().UTC()
		next := c
		next.Version, next.CreatedAt, next.UpdatedAt, next.Calls = 1, now, now, 0
		cond := "attribute_not_exists(pk)"
		values := map[string]types.AttributeValue{}
		if latest != nil {
			prev := fromItem(*latest)
			next.Version, next.CreatedAt, next.Calls = prev.Version+1, prev.CreatedAt, prev.Calls
			cond = "version = :prev"
			values[":prev"] = &types.AttributeValueMemberN{Value: fmt.Sprint(prev.Version)}
		}
		next.ID = ID(next.Name, next.Version)
		vItem, err := attributevalue.MarshalMap(toItem(next, versionSK(next.Version)))
		if err != nil {
			return Capability{}, fault.Wrap(fault.Internal, err, "encoding capability")
		}
		lItem, err := attributevalue.MarshalMap(toItem(next, "LATEST"))
		if err != nil {
			return Capability{}, fault.Wrap(fault.Internal, err, "encoding capability")
		}
		latestPut := &types.Put{TableName: aws.String(r.table), Item: lItem, ConditionExpression: aws.String(cond)}
		if len(values) > 0 {
			latestPut.ExpressionAttributeValues = values
		}
		_, err = r.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String(r.table), Item: vItem, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
			{Put: latestPut},
		}})
		if err == nil {
			return next, nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return Capability{}, fault.Wrap(fault.Unavailable, err, "saving capability "+c.Name)
		}
		// Another save took this version first: read again and retry.
	}
	return Capability{}, fault.New(fault.Unavailable, "saving capability %s: too many concurrent saves", c.Name)
}

// Get implements Registry.
func (r *DynamoRegistry) Get(ctx context.Context, name string, version int) (Capability, error) {
	latest, err := r.get(ctx, name, "LATEST")
	if err != nil {
		return Capability{}, err
	}
	if latest == nil {
		return Capability{}, notFound(name, version)
	}
	if version == 0 || version == latest.Version {
		return fromItem(*latest), nil
	}
	it, err := r.get(ctx, name, versionSK(version))
	if err != nil {
		return Capability{}, err
	}
	if it == nil {
		return Capability{}, notFound(name, version)
	}
	c := fromItem(*it)
	c.Calls = latest.Calls
	return c, nil
}

// List implements Registry. A scan is fine for a registry of programs
// people save by hand; it reads only the LATEST items.
func (r *DynamoRegistry) List(ctx context.Context) ([]Capability, error) {
	out := []Capability{}
	var start map[string]types.AttributeValue
	for {
		page, err := r.db.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 aws.String(r.table),
			FilterExpression:          aws.String("sk = :latest"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":latest": &types.AttributeValueMemberS{Value: "LATEST"}},
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fault.Wrap(fault.Unavailable, err, "listing capabilities")
		}
		for _, raw := range page.Items {
			var it item
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return nil, fault.Wrap(fault.Internal, err, "decoding a capability")
			}
			out = append(out, fromItem(it))
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		start = page.LastEvaluatedKey
	}
	slices.SortFunc(out, func(a, b Capability) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// IncrementCalls implements Registry.
func (r *DynamoRegistry) IncrementCalls(ctx context.Context, name string) error {
	_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(r.table),
		Key:                       key(name, "LATEST"),
		UpdateExpression:          aws.String("ADD calls :one"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
	})
	if err != nil {
		return fault.Wrap(fault.Unavailable, err, "counting a call of "+name)
	}
	return nil
}

// CreateTable creates the capabilities table (on-demand), as template.yaml
// declares it; for tests and local setups.
func CreateTable(ctx context.Context, db *dynamodb.Client, table string) error {
	return dynamotable.Create(ctx, db, table, "")
}
