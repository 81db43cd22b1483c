package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pml-sandbox/pml/internal/fault"
)

// DynamoAPI is the part of the DynamoDB client the journal uses: GetItem
// (an intent's existing entry, where a conditional failure does not carry
// it), PutItem (the intent, conditional), UpdateItem (outcomes, attempts,
// compensations, conditional) and Query (List).
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Dynamo is a Store in the suspensions table (key pk, sk; TTL on ttl),
// one partition per execution beside its suspension's and its run's:
//
//	pk JRNL#<execution id>  sk effect#0000000042   the entry of call 42
//
// An intent is one PutItem conditioned on attribute_not_exists(pk); an
// outcome, an attempt and a compensation are one UpdateItem each,
// conditioned on the entry's status (and attempts); List is one
// consistent Query (paginated). Every item carries ttl, its intent's time
// plus the TTL.
type Dynamo struct {
	db    DynamoAPI
	table string
	opts  Options
}

// NewDynamo returns a Dynamo store in table.
func NewDynamo(db DynamoAPI, table string, opts Options) *Dynamo {
	return &Dynamo{db: db, table: table, opts: opts.withDefaults()}
}

// partitionPrefix is the journal's partition key prefix; the table's other
// kinds of record have theirs (internal/suspend: SUSP#, RUN#, SESS#).
const partitionPrefix = "JRNL#"

func effectSK(callID int) string { return fmt.Sprintf("effect#%010d", callID) }

func (d *Dynamo) key(executionID string, callID int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: partitionPrefix + executionID},
		"sk": &types.AttributeValueMemberS{Value: effectSK(callID)},
	}
}

// item is an entry as an item. The error and the compensation are JSON
// strings (kept byte for byte as the fault's wire shape); arguments and
// result are binary.
type item struct {
	PK           string    `dynamodbav:"pk"`
	SK           string    `dynamodbav:"sk"`
	ExecutionID  string    `dynamodbav:"execution_id"`
	CallID       int       `dynamodbav:"call_id"`
	Principal    string    `dynamodbav:"principal,omitempty"`
	Server       string    `dynamodbav:"server"`
	Tool         string    `dynamodbav:"tool"`
	Key          string    `dynamodbav:"idempotency_key"`
	ArgsDigest   string    `dynamodbav:"args_digest"`
	ArgsBytes    int       `dynamodbav:"args_bytes"`
	Args         []byte    `dynamodbav:"args,omitempty"`
	Honours      bool      `dynamodbav:"honours,omitempty"`
	Status       string    `dynamodbav:"status"`
	Result       []byte    `dynamodbav:"result,omitempty"`
	ResultBytes  int       `dynamodbav:"result_bytes,omitempty"`
	Error        string    `dynamodbav:"error,omitempty"`
	IntendedAt   time.Time `dynamodbav:"intended_at"`
	SettledAt    time.Time `dynamodbav:"settled_at,omitempty"`
	Attempts     int       `dynamodbav:"attempts"`
	Compensation string    `dynamodbav:"compensation,omitempty"`
	// CompensationTag is the compensation's claimTag, which
	// SetCompensation's condition compares.
	CompensationTag string `dynamodbav:"compensation_tag,omitempty"`
	TTL             int64  `dynamodbav:"ttl"`
}

func (it *item) entry() (Entry, error) {
	e := Entry{ExecutionID: it.ExecutionID, CallID: it.CallID, Principal: it.Principal, Server: it.Server, Tool: it.Tool, Key: it.Key,
		ArgsDigest: it.ArgsDigest, ArgsBytes: it.ArgsBytes, Args: it.Args, Honours: it.Honours, Status: Status(it.Status),
		Result: it.Result, ResultBytes: it.ResultBytes, IntendedAt: it.IntendedAt, Attempts: it.Attempts}
	if !it.SettledAt.IsZero() {
		e.SettledAt = it.SettledAt
	}
	if it.Error != "" {
		e.Error = new(fault.Error)
		if err := json.Unmarshal([]byte(it.Error), e.Error); err != nil {
			return Entry{}, fmt.Errorf("journal: call %d's error: %w", it.CallID, err)
		}
	}
	if it.Compensation != "" {
		e.Compensation = new(Compensation)
		if err := json.Unmarshal([]byte(it.Compensation), e.Compensation); err != nil {
			return Entry{}, fmt.Errorf("journal: call %d's compensation: %w", it.CallID, err)
		}
	}
	return e, nil
}

func decodeItem(av map[string]types.AttributeValue) (*Entry, error) {
	var it item
	if err := attributevalue.UnmarshalMap(av, &it); err != nil {
		return nil, fmt.Errorf("journal: decoding an item: %w", err)
	}
	e, err := it.entry()
	return &e, err
}

// jsonString is v as a JSON string attribute value ("" for nil).
func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return "", err
	}
	return string(b), nil
}

// Intend implements Store.
func (d *Dynamo) Intend(ctx context.Context, e *Entry) (*Entry, error) {
	if err := checkIntent(e); err != nil {
		return nil, err
	}
	s := pendingIntent(e, d.opts.Now())
	it := item{PK: partitionPrefix + s.ExecutionID, SK: effectSK(s.CallID), ExecutionID: s.ExecutionID, CallID: s.CallID, Principal: s.Principal,
		Server: s.Server, Tool: s.Tool, Key: s.Key, ArgsDigest: s.ArgsDigest, ArgsBytes: s.ArgsBytes, Args: s.Args, Honours: s.Honours,
		Status: string(s.Status), IntendedAt: s.IntendedAt, Attempts: s.Attempts, TTL: s.IntendedAt.Add(d.opts.TTL).Unix()}
	av, err := attributevalue.MarshalMap(it)
	if err != nil {
		return nil, fmt.Errorf("journal: encoding the intent: %w", err)
	}
	_, err = d.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(d.table), Item: av,
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil, nil
	case !errors.As(err, &ccf):
		return nil, fmt.Errorf("journal: writing the intent of call %d: %w", e.CallID, err)
	case len(ccf.Item) > 0:
		return decodeItem(ccf.Item)
	}
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: d.key(e.ExecutionID, e.CallID), ConsistentRead: aws.Bool(true)})
	switch {
	case err != nil:
		return nil, fmt.Errorf("journal: reading the entry of call %d: %w", e.CallID, err)
	case len(out.Item) == 0:
		return nil, fmt.Errorf("journal: call %d's entry exists and cannot be read", e.CallID)
	}
	return decodeItem(out.Item)
}

// update runs one conditional UpdateItem of an entry: set and cond are
// its expressions, over the names (#…) and values (:…) given. A failed
// condition is ErrNotFound when there is no entry, ErrConflict otherwise.
func (d *Dynamo) update(ctx context.Context, executionID string, callID int, set, cond string, names map[string]string, values map[string]types.AttributeValue) error {
	if !validID(executionID) {
		return ErrNotFound
	}
	_, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(d.table), Key: d.key(executionID, callID),
		UpdateExpression: aws.String(set), ConditionExpression: aws.String("attribute_exists(pk) AND " + cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &ccf):
		return fmt.Errorf("journal: updating call %d: %w", callID, err)
	case len(ccf.Item) > 0:
		return ErrConflict
	}
	// A condition failure without the old item (an endpoint that does
	// not return it): read whether there is one.
	out, gerr := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: d.key(executionID, callID), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("pk")})
	if gerr == nil && len(out.Item) == 0 {
		return ErrNotFound
	}
	return ErrConflict
}

func num(n int) types.AttributeValue    { return &types.AttributeValueMemberN{Value: strconv.Itoa(n)} }
func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// Resend implements Store.
func (d *Dynamo) Resend(ctx context.Context, executionID string, callID, attempts int) error {
	return d.update(ctx, executionID, callID, "SET #a = :next", "#s = :pending AND #a = :prev",
		map[string]string{"#a": "attempts", "#s": "status"},
		map[string]types.AttributeValue{":next": num(attempts + 1), ":prev": num(attempts), ":pending": str(string(Pending))})
}

// Settle implements Store.
func (d *Dynamo) Settle(ctx context.Context, executionID string, callID int, o Outcome) error {
	if err := checkOutcome(o); err != nil {
		return err
	}
	result, size, ferr := capOutcome(o)
	at, err := attributevalue.Marshal(d.opts.Now().UTC())
	if err != nil {
		return err
	}
	set := "SET #s = :status, #at = :at"
	names := map[string]string{"#s": "status", "#at": "settled_at"}
	values := map[string]types.AttributeValue{":status": str(string(o.Status)), ":at": at, ":pending": str(string(Pending))}
	if result != nil {
		set += ", #r = :result"
		names["#r"], values[":result"] = "result", &types.AttributeValueMemberB{Value: result}
	}
	if size > 0 {
		set += ", #rb = :size"
		names["#rb"], values[":size"] = "result_bytes", num(size)
	}
	if ferr != nil {
		js, err := jsonString(ferr)
		if err != nil {
			return err
		}
		set += ", #e = :error"
		names["#e"], values[":error"] = "error", str(js)
	}
	return d.update(ctx, executionID, callID, set, "#s = :pending", names, values)
}

// SetCompensation implements Store.
func (d *Dynamo) SetCompensation(ctx context.Context, executionID string, callID int, from, to *Compensation) error {
	names := map[string]string{"#c": "compensation", "#ct": "compensation_tag"}
	values := map[string]types.AttributeValue{}
	cond := "attribute_not_exists(#ct)"
	if from != nil {
		cond, values[":from"] = "#ct = :from", str(claimTag(from))
	}
	set := "REMOVE #c, #ct"
	if to != nil {
		js, err := jsonString(to)
		if err != nil {
			return err
		}
		set, values[":c"], values[":ct"] = "SET #c = :c, #ct = :ct", str(js), str(claimTag(to))
	}
	if len(values) == 0 {
		values = nil
	}
	return d.update(ctx, executionID, callID, set, cond, names, values)
}

// List implements Store.
func (d *Dynamo) List(ctx context.Context, executionID string) ([]Entry, error) {
	if !validID(executionID) {
		return nil, nil
	}
	p := dynamodb.NewQueryPaginator(d.db, &dynamodb.QueryInput{TableName: aws.String(d.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :effect)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(partitionPrefix + executionID), ":effect": str("effect#")}})
	var out []Entry
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("journal: listing %s: %w", executionID, err)
		}
		for _, av := range page.Items {
			e, err := decodeItem(av)
			if err != nil {
				return nil, err
			}
			out = append(out, *e)
		}
	}
	return out, nil
}
