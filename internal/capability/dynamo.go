package capability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

// DynamoAPI is the part of the DynamoDB client the registry uses.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	// Scan is Reindex's alone: an upgrade an operator runs once, never
	// an execution or a discovery read.
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// DynamoRegistry stores capabilities in one table: pk CAP#<name>, sk
// V#000001… for each version, and sk LATEST holding a copy of the newest
// version plus the call count. A save writes the new version and moves
// LATEST in one transaction conditioned on the version it read, so two
// concurrent saves can never take the same version number.
//
// What reads go where, by key, never by filter:
//   - an execution resolving names: one BatchGetItem of their LATEST items
//     (strongly consistent: a capability saved anywhere is found at once);
//   - a pinned version (a capability run): GetItem of its V# item;
//   - discovery (Index): the sparse global secondary index LatestIndex,
//     which only LATEST items enter (they alone carry lpk), sorted by the
//     time of their save (changed), so a refresh asks only for what was
//     saved since the last one;
//   - mcp[ns] for a namespace nothing referenced: GetItem of the item
//     NS#<ns> every save of a capability in ns writes.
type DynamoRegistry struct {
	db    DynamoAPI
	table string
}

// NewDynamoRegistry uses table through db.
func NewDynamoRegistry(db DynamoAPI, table string) *DynamoRegistry {
	return &DynamoRegistry{db: db, table: table}
}

// LatestIndex is the capabilities table's global secondary index of LATEST
// items: partition key lpk (always latestPK), sort key changed.
const LatestIndex = "latest"

const (
	latestPK = "LATEST"
	// changedLayout is fixed-width, so that changed sorts as it reads.
	changedLayout = "2006-01-02T15:04:05.000000000Z"
	// changeMargin is how far before the newest change it has seen an
	// index refresh asks from again: a save that reached the index late
	// (global secondary indexes are eventually consistent, and each
	// writer stamps with its own clock) is still found.
	changeMargin = time.Minute
)

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
	// What a version records of its publication (Capability's fields).
	Pins        map[string]int `dynamodbav:"pins,omitempty"`
	Provenance  []string       `dynamodbav:"provenance,omitempty"`
	Author      string         `dynamodbav:"author,omitempty"`
	Publisher   string         `dynamodbav:"publisher,omitempty"`
	Via         string         `dynamodbav:"via,omitempty"`
	Draft       string         `dynamodbav:"draft,omitempty"`
	CodeHash    string         `dynamodbav:"code_hash,omitempty"`
	Equivalence string         `dynamodbav:"equivalence,omitempty"`
	// LPK and Changed are set on LATEST items only: the keys of
	// LatestIndex.
	LPK     string `dynamodbav:"lpk,omitempty"`
	Changed string `dynamodbav:"changed,omitempty"`
}

func pk(name string) string        { return "CAP#" + name }
func versionSK(version int) string { return fmt.Sprintf("V#%06d", version) }
func key(name, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk(name)}, "sk": &types.AttributeValueMemberS{Value: sk}}
}
func nsKey(ns string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "NS#" + ns}, "sk": &types.AttributeValueMemberS{Value: "NS"}}
}

// optionalAttrs are the item's attributes a version may lack: a LATEST
// item moved to such a version loses them.
var optionalAttrs = []string{"description", "input_schema", "pins", "provenance", "author", "publisher", "via", "draft", "code_hash", "equivalence"}

func toItem(c Capability, sk string) item {
	return item{PK: pk(c.Name), SK: sk, Name: c.Name, Version: c.Version, ID: c.ID, Description: c.Description,
		InputSchema: string(c.InputSchema), Code: c.Code, CreatedAt: c.CreatedAt.Format(time.RFC3339Nano),
		UpdatedAt: c.UpdatedAt.Format(time.RFC3339Nano), Calls: c.Calls,
		Pins: c.Pins, Provenance: c.Provenance, Author: c.Author, Publisher: c.Publisher, Via: c.Via, Draft: c.Draft,
		CodeHash: c.CodeHash, Equivalence: c.Equivalence}
}

func fromItem(it item) Capability {
	c := Capability{Name: it.Name, Version: it.Version, ID: it.ID, Description: it.Description, Code: it.Code, Calls: it.Calls,
		Pins: it.Pins, Provenance: it.Provenance, Author: it.Author, Publisher: it.Publisher, Via: it.Via, Draft: it.Draft,
		CodeHash: it.CodeHash, Equivalence: it.Equivalence}
	if it.InputSchema != "" {
		c.InputSchema = json.RawMessage(it.InputSchema)
	}
	c.CreatedAt, _ = time.Parse(time.RFC3339Nano, it.CreatedAt)
	c.UpdatedAt, _ = time.Parse(time.RFC3339Nano, it.UpdatedAt)
	return c
}

func decodeItem(raw map[string]types.AttributeValue) (item, error) {
	var it item
	if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
		return item{}, fault.Wrap(fault.Internal, err, "decoding a capability")
	}
	return it, nil
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

// Save implements Registry. The version's item is put only where none is
// (a version is never rewritten), the LATEST item is updated rather than
// replaced (so that call counts added meanwhile are kept) on the condition
// that it is still the version read, and the namespace's item on the
// condition that its owners are still those allow was asked about: one
// transaction, retried from the reads when another save won a condition.
func (r *DynamoRegistry) Save(ctx context.Context, c Capability, allow Allow) (Saved, error) {
	if err := Validate(c); err != nil {
		return Saved{}, err
	}
	stamp(&c)
	for attempt := 0; attempt < 8; attempt++ {
		now := time.Now().UTC()
		var draft Draft
		if c.Draft != "" {
			d, err := r.GetDraft(ctx, c.Draft)
			if err != nil && fault.CodeOf(err) != fault.NotFound {
				return Saved{}, err
			}
			if err := publishable(c, d, err == nil, now); err != nil {
				return Saved{}, err
			}
			draft = d
		}
		prev, existing, err := r.equivalent(ctx, c)
		if err != nil {
			return Saved{}, err
		}
		if existing && c.Draft == "" {
			// Nothing is published: no decision to check.
			return Saved{Capability: prev, Existing: true}, nil
		}
		owners, rev, err := r.namespace(ctx, c.Namespace())
		if err != nil {
			return Saved{}, err
		}
		if allow != nil {
			if err := allow(slices.Clone(owners)); err != nil {
				return Saved{}, err
			}
		}
		out := Saved{Capability: prev, Existing: true}
		var writes []types.TransactWriteItem
		if !existing {
			next, w, err := r.versionWrites(ctx, c, now)
			if err != nil {
				return Saved{}, err
			}
			out, writes = Saved{Capability: next}, w
		}
		writes = append(writes, types.TransactWriteItem{Update: r.namespaceUpdate(c.Namespace(), c.Publisher, owners, rev, !existing, now)})
		if c.Draft != "" {
			u, err := r.draftUpdate(closed(draft, DraftPublished, c.Publisher, "", out.Version, now))
			if err != nil {
				return Saved{}, err
			}
			writes = append(writes, types.TransactWriteItem{Update: u})
		}
		_, err = r.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: writes})
		if err == nil {
			return out, nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return Saved{}, fault.Wrap(fault.Unavailable, err, "saving capability "+c.Name)
		}
		// Another save took this version, the namespace or the draft
		// first: read again and retry.
	}
	return Saved{}, fault.New(fault.Unavailable, "saving capability %s: too many concurrent saves", c.Name)
}

// versionWrites are the writes that publish c as its name's next version:
// its V# item, put only where none is, and the LATEST item moved to it on
// the condition that it is still the version read.
func (r *DynamoRegistry) versionWrites(ctx context.Context, c Capability, now time.Time) (Capability, []types.TransactWriteItem, error) {
	latest, err := r.get(ctx, c.Name, latestPK)
	if err != nil {
		return Capability{}, nil, err
	}
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
	put, err := r.putVersion(next)
	if err != nil {
		return Capability{}, nil, err
	}
	update, err := latestUpdate(next, now, cond, values)
	if err != nil {
		return Capability{}, nil, err
	}
	update.TableName, update.Key = aws.String(r.table), key(next.Name, latestPK)
	return next, []types.TransactWriteItem{{Put: put}, {Update: update}}, nil
}

// putVersion is the put of a version's item, which holds only where the
// item does not exist: no write rewrites a version.
func (r *DynamoRegistry) putVersion(c Capability) (*types.Put, error) {
	vItem, err := attributevalue.MarshalMap(toItem(c, versionSK(c.Version)))
	if err != nil {
		return nil, fault.Wrap(fault.Internal, err, "encoding capability")
	}
	return &types.Put{TableName: aws.String(r.table), Item: vItem, ConditionExpression: aws.String("attribute_not_exists(pk)")}, nil
}

// equivalent finds a version of c's name equivalent to c: one Query of
// the versions' equivalences (projected), and a GetItem of the one that
// matches (and of each version saved before equivalences were recorded,
// whose equivalence is computed from it).
func (r *DynamoRegistry) equivalent(ctx context.Context, c Capability) (Capability, bool, error) {
	in := &dynamodb.QueryInput{
		TableName:              aws.String(r.table),
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :v)"),
		ProjectionExpression:   aws.String("version, equivalence"),
		ConsistentRead:         aws.Bool(true),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": &types.AttributeValueMemberS{Value: pk(c.Name)},
			":v":  &types.AttributeValueMemberS{Value: "V#"},
		},
	}
	for {
		page, err := r.db.Query(ctx, in)
		if err != nil {
			return Capability{}, false, fault.Wrap(fault.Unavailable, err, "reading the versions of capability "+c.Name)
		}
		for _, raw := range page.Items {
			var v struct {
				Version     int    `dynamodbav:"version"`
				Equivalence string `dynamodbav:"equivalence"`
			}
			if err := attributevalue.UnmarshalMap(raw, &v); err != nil {
				return Capability{}, false, fault.Wrap(fault.Internal, err, "decoding a capability version")
			}
			if v.Equivalence != "" && v.Equivalence != c.Equivalence {
				continue
			}
			it, err := r.get(ctx, c.Name, versionSK(v.Version))
			if err != nil || it == nil {
				return Capability{}, false, err
			}
			if found, ok := equivalentOf(c, []Capability{fromItem(*it)}); ok {
				return found, true, nil
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return Capability{}, false, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// nsItem is a namespace's item: it exists once something was published
// in the namespace (mcp[ns] finds it) and, since owners are recorded,
// holds them with a revision the writes that rely on them are
// conditioned on.
type nsItem struct {
	Owners    []string `dynamodbav:"owners,omitempty"`
	OwnersRev int      `dynamodbav:"owners_rev,omitempty"`
}

// namespace reads ns's owners and their revision (0: none recorded).
func (r *DynamoRegistry) namespace(ctx context.Context, ns string) ([]string, int, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: nsKey(ns), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("owners, owners_rev")})
	if err != nil {
		return nil, 0, fault.Wrap(fault.Unavailable, err, "reading capability namespace "+ns)
	}
	var it nsItem
	if out.Item != nil {
		if err := attributevalue.UnmarshalMap(out.Item, &it); err != nil {
			return nil, 0, fault.Wrap(fault.Internal, err, "decoding capability namespace "+ns)
		}
	}
	return it.Owners, it.OwnersRev, nil
}

// namespaceUpdate writes ns's item on the condition that its owners are
// still those read (revision rev); publishing into a namespace without
// owners records publisher as its owner (an anonymous publisher, where
// auth is off, owns nothing).
func (r *DynamoRegistry) namespaceUpdate(ns, publisher string, owners []string, rev int, publishing bool, now time.Time) *types.Update {
	u := &types.Update{TableName: aws.String(r.table), Key: nsKey(ns),
		UpdateExpression:          aws.String("SET #ns = :ns"),
		ExpressionAttributeNames:  map[string]string{"#ns": "ns", "#rev": "owners_rev"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":ns": &types.AttributeValueMemberS{Value: ns}},
	}
	if rev > 0 {
		u.ConditionExpression = aws.String("#rev = :rev")
		u.ExpressionAttributeValues[":rev"] = &types.AttributeValueMemberN{Value: strconv.Itoa(rev)}
		return u
	}
	u.ConditionExpression = aws.String("attribute_not_exists(#rev)")
	if publishing && len(owners) == 0 && publisher != "" {
		u.UpdateExpression = aws.String("SET #ns = :ns, #owners = :owners, #rev = :one, #since = :since")
		u.ExpressionAttributeNames["#owners"], u.ExpressionAttributeNames["#since"] = "owners", "since"
		u.ExpressionAttributeValues[":owners"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: publisher}}}
		u.ExpressionAttributeValues[":one"] = &types.AttributeValueMemberN{Value: "1"}
		u.ExpressionAttributeValues[":since"] = &types.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)}
	}
	return u
}

// Owners implements Registry: a GetItem of the namespace's item.
func (r *DynamoRegistry) Owners(ctx context.Context, ns string) ([]string, error) {
	owners, _, err := r.namespace(ctx, ns)
	return owners, err
}

// latestUpdate is the update that makes the LATEST item next: every field
// set (or removed when empty) but the call count, which only AddCalls
// changes, and the index keys stamped with the time of the save.
func latestUpdate(next Capability, now time.Time, cond string, values map[string]types.AttributeValue) (*types.Update, error) {
	fields, err := attributevalue.MarshalMap(toItem(next, latestPK))
	if err != nil {
		return nil, fault.Wrap(fault.Internal, err, "encoding capability")
	}
	delete(fields, "pk")
	delete(fields, "sk")
	delete(fields, "calls")
	fields["lpk"] = &types.AttributeValueMemberS{Value: latestPK}
	fields["changed"] = &types.AttributeValueMemberS{Value: now.Format(changedLayout)}
	names := map[string]string{}
	var set []string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		names["#"+k] = k
		values[":"+k] = fields[k]
		set = append(set, "#"+k+" = :"+k)
	}
	values[":zero"] = &types.AttributeValueMemberN{Value: "0"}
	set = append(set, "#calls = if_not_exists(#calls, :zero)")
	names["#calls"] = "calls"
	expr := "SET " + strings.Join(set, ", ")
	var remove []string
	for _, k := range optionalAttrs {
		if _, ok := fields[k]; !ok {
			names["#"+k] = k
			remove = append(remove, "#"+k)
		}
	}
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	return &types.Update{UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values}, nil
}

// Get implements Registry: one GetItem, of the LATEST item for version 0,
// else of the version's own item (whose call count is the one it was saved
// with).
func (r *DynamoRegistry) Get(ctx context.Context, name string, version int) (Capability, error) {
	sk := latestPK
	if version > 0 {
		sk = versionSK(version)
	}
	it, err := r.get(ctx, name, sk)
	if err != nil {
		return Capability{}, err
	}
	if it == nil {
		return Capability{}, notFound(name, version)
	}
	return fromItem(*it), nil
}

// Lookup implements Registry: one strongly consistent BatchGetItem of the
// names' LATEST items (per 100 names, DynamoDB's most per request).
func (r *DynamoRegistry) Lookup(ctx context.Context, names []string) (map[string]Capability, error) {
	out := make(map[string]Capability, len(names))
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	for chunk := range slices.Chunk(names, 100) {
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for i, name := range chunk {
			keys[i] = key(name, latestPK)
		}
		req := map[string]types.KeysAndAttributes{r.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				// Keys DynamoDB left unprocessed (throttling): back off
				// a little, as its guide asks, and ask for them again.
				if attempt > 6 {
					return nil, &fault.Error{Code: fault.Unavailable, Retryable: true, Message: "looking up capabilities: DynamoDB keeps leaving keys unprocessed"}
				}
				select {
				case <-time.After(time.Duration(10<<attempt) * time.Millisecond):
				case <-ctx.Done():
					return nil, fault.Wrap(fault.Unavailable, ctx.Err(), "looking up capabilities")
				}
			}
			page, err := r.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, fault.Wrap(fault.Unavailable, err, "looking up capabilities")
			}
			for _, raw := range page.Responses[r.table] {
				it, err := decodeItem(raw)
				if err != nil {
					return nil, err
				}
				out[it.Name] = fromItem(it)
			}
			req = page.UnprocessedKeys
		}
	}
	return out, nil
}

// List implements Registry: a Query of LatestIndex, which holds the LATEST
// items only.
func (r *DynamoRegistry) List(ctx context.Context) ([]Capability, error) {
	ch, err := r.Changes(ctx, "")
	if err != nil {
		return nil, err
	}
	return ch.Caps, nil
}

// Changes implements Registry: a Query of LatestIndex for the LATEST items
// saved since changeMargin before the mark (the newest save time seen),
// every one of them for the empty mark.
func (r *DynamoRegistry) Changes(ctx context.Context, mark string) (Changes, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(r.table),
		IndexName:                 aws.String(LatestIndex),
		KeyConditionExpression:    aws.String("lpk = :l"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":l": &types.AttributeValueMemberS{Value: latestPK}},
	}
	full := mark == ""
	next := time.Time{}.Format(changedLayout)
	if !full {
		since, err := time.Parse(changedLayout, mark)
		if err != nil {
			return Changes{}, fault.New(fault.Internal, "capability index mark %q is not a time", mark)
		}
		next = mark
		in.KeyConditionExpression = aws.String("lpk = :l AND changed >= :since")
		in.ExpressionAttributeValues[":since"] = &types.AttributeValueMemberS{Value: since.Add(-changeMargin).Format(changedLayout)}
	}
	out := []Capability{}
	for {
		page, err := r.db.Query(ctx, in)
		if err != nil {
			return Changes{}, fault.Wrap(fault.Unavailable, err, "listing capabilities")
		}
		for _, raw := range page.Items {
			it, err := decodeItem(raw)
			if err != nil {
				return Changes{}, err
			}
			out = append(out, fromItem(it))
			next = max(next, it.Changed)
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	slices.SortFunc(out, func(a, b Capability) int { return strings.Compare(a.Name, b.Name) })
	return Changes{Full: full, Caps: out, Next: next}, nil
}

// HasNamespace implements Registry: a GetItem of the namespace's item.
func (r *DynamoRegistry) HasNamespace(ctx context.Context, ns string) (bool, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: nsKey(ns), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("pk")})
	if err != nil {
		return false, fault.Wrap(fault.Unavailable, err, "looking up capability namespace "+ns)
	}
	return out.Item != nil, nil
}

// AddCalls implements Registry: one UpdateItem per name (ADD), each a
// batch's worth of calls.
func (r *DynamoRegistry) AddCalls(ctx context.Context, counts map[string]int64) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		_, err := r.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(r.table),
			Key:                       key(name, latestPK),
			UpdateExpression:          aws.String("ADD calls :n"),
			ConditionExpression:       aws.String("attribute_exists(pk)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: strconv.FormatInt(counts[name], 10)}},
		})
		var ccf *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &ccf) {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return fault.Wrap(fault.Unavailable, errors.Join(errs...), "counting capability calls")
	}
	return nil
}

// Reindexed is what Reindex did.
type Reindexed struct {
	// Indexed is how many capabilities it gave their index keys and
	// namespace item.
	Indexed int `json:"indexed"`
	// Current is how many had them already (saved by this release, or a
	// save or an earlier reindex got there first).
	Current int `json:"current"`
}

// Reindex brings capabilities saved by a release before LatestIndex and
// the namespace items into them: every LATEST item without the index keys
// gets them (stamped now, so every process's next index refresh finds
// it), and its namespace its NS# item, so discovery lists it and mcp[ns]
// finds it; until then such a capability is callable by name only. It
// Scans the table once (LATEST items only are written), so it is for an
// operator after an upgrade (`pml capability reindex`), never for the
// request path. It is idempotent and safe beside saves: an item is
// stamped only while it still lacks the keys. progress, when not nil,
// sees the counts after every page.
func (r *DynamoRegistry) Reindex(ctx context.Context, progress func(Reindexed)) (Reindexed, error) {
	var done Reindexed
	in := &dynamodb.ScanInput{
		TableName:                aws.String(r.table),
		FilterExpression:         aws.String("sk = :latest"),
		ProjectionExpression:     aws.String("#name, lpk"),
		ExpressionAttributeNames: map[string]string{"#name": "name"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":latest": &types.AttributeValueMemberS{Value: latestPK},
		},
	}
	for {
		page, err := r.db.Scan(ctx, in)
		if err != nil {
			return done, fault.Wrap(fault.Unavailable, err, "reindexing capabilities: scanning "+r.table)
		}
		for _, raw := range page.Items {
			it, err := decodeItem(raw)
			if err != nil {
				return done, err
			}
			if it.LPK != "" {
				done.Current++
				continue
			}
			stamped, err := r.stamp(ctx, it.Name)
			if err != nil {
				return done, err
			}
			if stamped {
				done.Indexed++
			} else {
				done.Current++
			}
		}
		if progress != nil {
			progress(done)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return done, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// stamp gives name's LATEST item the index keys and writes its namespace
// item, in one transaction that holds only while the item still lacks the
// keys; false when a save (which writes both) got there first. A
// transaction that lost to a concurrent write is tried again.
func (r *DynamoRegistry) stamp(ctx context.Context, name string) (bool, error) {
	c := Capability{Name: name}
	var err error
	for range 4 {
		_, err = r.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName:           aws.String(r.table),
				Key:                 key(name, latestPK),
				UpdateExpression:    aws.String("SET lpk = :l, changed = :now"),
				ConditionExpression: aws.String("attribute_exists(pk) AND attribute_not_exists(lpk)"),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":l":   &types.AttributeValueMemberS{Value: latestPK},
					":now": &types.AttributeValueMemberS{Value: time.Now().UTC().Format(changedLayout)},
				},
			}},
			// An update, not a put: the item may hold the namespace's
			// owners, which a put would erase.
			{Update: &types.Update{TableName: aws.String(r.table), Key: nsKey(c.Namespace()),
				UpdateExpression:          aws.String("SET #ns = :ns"),
				ExpressionAttributeNames:  map[string]string{"#ns": "ns"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":ns": &types.AttributeValueMemberS{Value: c.Namespace()}}}},
		}})
		var tce *types.TransactionCanceledException
		if err == nil {
			return true, nil
		}
		if !errors.As(err, &tce) {
			break
		}
		if slices.ContainsFunc(tce.CancellationReasons, func(r types.CancellationReason) bool {
			return aws.ToString(r.Code) == "ConditionalCheckFailed"
		}) {
			return false, nil
		}
	}
	return false, fault.Wrap(fault.Unavailable, err, "reindexing capability "+name)
}

// CreateTable creates the capabilities table (on demand) with LatestIndex,
// as template.yaml declares it; for tests and local setups.
func CreateTable(ctx context.Context, db *dynamodb.Client, table string) error {
	s := func(name string) *string { return aws.String(name) }
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   s(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: s("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: s("sk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: s("lpk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: s("changed"), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: s("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: s("sk"), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: s(LatestIndex),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: s("lpk"), KeyType: types.KeyTypeHash},
				{AttributeName: s("changed"), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}},
	})
	if err != nil {
		return fmt.Errorf("creating table %s: %w", table, err)
	}
	return nil
}
