package learn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/pml-sandbox/pml/internal/aggregate"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/trace"
)

// The learning loop's counters in the traces table, written by the
// aggregator from the table's stream (Extract), never by an execution.
// Three per run (a counter is an ADD of 2 write units in the aggregator's
// transactions, once per batch however many runs of it the batch holds),
// one more for a run that carries its program's template:
//
//	pk LEARN#ALL#<h>                   sk FP#<fp>   successes of every principal; labels fp, last_seen, w<b> (a principal of bucket b ran it)
//	pk LEARN#BY#<principal>#<h>        sk FP#<fp>   that principal's successes: who may see it, and its listing; labels fp, last_seen, tools, args
//	pk LEARN#OF#<principal>#<fp>       sk V#<v>     that principal's runs with literals of bucket v (16); labels l00… the literals
//	pk LEARN#OF#<principal>#<fp>       sk TPL       that principal's runs that carried the template; label template
//	pk LEARN#CAPS                      sk OK#<name>, ERR#<name>   capability runs that succeeded, failed: evidence for search
//
// What a run held (its literals, tools, template and so comments) is kept
// under its principal's keys only, and read for that principal only: no
// principal reads another's values or code. What principals share is the
// counts: LEARN#ALL's successes, and the principal buckets its labels mark
// (16, for the estimate of distinct principals).
//
// h is the fingerprint's first hex digit: the listings are 16 partitions
// each, so no single key takes every candidate of a busy deployment (the
// aggregator then shards each further, aggregate.Read sums); a principal's
// contents of one program are a partition of their own, at most 17
// counters a batch. Every counter expires (expires_at) as long after its
// last run as the execution item that counted (PML_TRACE_TTL_DAYS): a
// candidate nobody runs any more fades out, and the listings hold what ran
// lately.
const (
	byPrefix     = "LEARN#BY#"
	allPrefix    = "LEARN#ALL#"
	ofPrefix     = "LEARN#OF#"
	capsPK       = "LEARN#CAPS"
	fpPrefix     = "FP#"
	tplSK        = "TPL"
	whoBuckets   = 16
	valueBuckets = 16
)

const hexDigits = "0123456789abcdef"

// who names the principal "" (auth off: the one local user) in keys.
func who(principal string) string {
	if principal == "" {
		return "-"
	}
	return principal
}

func allPK(h byte) string { return allPrefix + string(h) }

func byPK(principal string, h byte) string { return byPrefix + who(principal) + "#" + string(h) }

func ofPK(principal, fp string) string { return ofPrefix + who(principal) + "#" + fp }

// whoLabel is the label of LEARN#ALL that marks principal's bucket.
func whoLabel(principal string) string { return "w" + string(hexDigits[bucket(principal, whoBuckets)]) }

func bucket(s string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int(h.Sum32() % uint32(n))
}

// Extract is the aggregate.Extractor of the learning loop, beside
// tracedb.CoOccurrence on the traces table's stream. An execution item
// inserted with a pattern (a successful execution that called tools)
// counts one run of its candidate; a capability run's item counts one
// success or failure of that capability. A rewrite (MODIFY: a durable
// execution's next run) counts nothing more: patterns and capability runs
// are recorded once. Anything else counts nothing.
func Extract(rec events.DynamoDBEventRecord) ([]aggregate.Increment, error) {
	if rec.EventName != string(events.DynamoDBOperationTypeInsert) && rec.EventName != string(events.DynamoDBOperationTypeModify) {
		return nil, nil
	}
	pk, sk := str(rec.Change.Keys, "pk"), str(rec.Change.Keys, "sk")
	if sk != "META" || !strings.HasPrefix(pk, "EXEC#") {
		return nil, nil
	}
	img, old := rec.Change.NewImage, rec.Change.OldImage
	expires, _ := strconv.ParseInt(num(img, "expires_at"), 10, 64)
	status := str(img, "status")
	if c := str(img, "capability"); c != "" {
		if len(old) > 0 || status == trace.StatusSuspended || status == "" {
			return nil, nil
		}
		sk := "ERR#" + c
		if status == trace.StatusOK {
			sk = "OK#" + c
		}
		return []aggregate.Increment{{PK: capsPK, SK: sk, N: 1, Labels: map[string]string{"name": c}, Expires: expires}}, nil
	}
	raw := str(img, "pattern")
	if raw == "" || status != trace.StatusOK || str(old, "pattern") != "" {
		return nil, nil
	}
	var p trace.Pattern
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return nil, fmt.Errorf("%s: pattern: %w", pk, err)
	}
	if p.Order != nil {
		// The tools by their index in the item's own list.
		listed, err := stringList(img, "tools")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pk, err)
		}
		p.Tools = make([]string, len(p.Order))
		for i, j := range p.Order {
			if j < 0 || j >= len(listed) {
				return nil, fmt.Errorf("%s: pattern: tool index %d of %d", pk, j, len(listed))
			}
			p.Tools[i] = listed[j]
		}
	}
	if err := checkPattern(&p); err != nil {
		return nil, fmt.Errorf("%s: pattern: %w", pk, err)
	}
	seen := str(img, "started_at")
	if _, err := time.Parse(time.RFC3339Nano, seen); err != nil {
		return nil, fmt.Errorf("%s: started_at %q: %w", pk, seen, err)
	}
	principal := str(img, "principal")
	tools, _ := json.Marshal(p.Tools)
	args, _ := json.Marshal(argsLabel{Keys: p.ArgsKeys, Whole: p.ArgsWhole})
	h := p.Fingerprint[0]
	own := ofPK(principal, p.Fingerprint)
	vector := map[string]string{}
	var joined strings.Builder
	for i, l := range p.Literals {
		v := encodeLiteral(l)
		vector[fmt.Sprintf("l%02d", i)] = v
		joined.WriteString(v)
		joined.WriteByte(0)
	}
	out := []aggregate.Increment{
		{PK: allPK(h), SK: fpPrefix + p.Fingerprint, N: 1, Expires: expires,
			Labels: map[string]string{"fp": p.Fingerprint, "last_seen": seen, whoLabel(principal): "1"}},
		{PK: byPK(principal, h), SK: fpPrefix + p.Fingerprint, N: 1, Expires: expires,
			Labels: map[string]string{"fp": p.Fingerprint, "last_seen": seen, "tools": string(tools), "args": string(args)}},
		{PK: own, SK: fmt.Sprintf("V#%x", bucket(joined.String(), valueBuckets)), N: 1, Expires: expires, Labels: vector},
	}
	if p.Template != nil {
		t, _ := json.Marshal(p.Template)
		out = append(out, aggregate.Increment{PK: own, SK: tplSK, N: 1, Labels: map[string]string{"template": string(t)}, Expires: expires})
	}
	return out, nil
}

// encodeLiteral is a literal as a label: its kind, then "=" and the value,
// "!" and why it was withheld, or "~" and the hash of a long one.
func encodeLiteral(l trace.Literal) string {
	switch {
	case l.Withheld == trace.WithheldSecret:
		return l.Kind + "!" + l.Withheld
	case l.Withheld != "":
		return l.Kind + "~" + l.Hash
	}
	return l.Kind + "=" + l.Value
}

func decodeLiteral(s string) (trace.Literal, bool) {
	if len(s) < 2 {
		return trace.Literal{}, false
	}
	l := trace.Literal{Kind: s[:1]}
	switch s[1] {
	case '=':
		l.Value = s[2:]
	case '!':
		l.Withheld = s[2:]
	case '~':
		l.Withheld, l.Hash = trace.WithheldLong, s[2:]
	default:
		return trace.Literal{}, false
	}
	return l, true
}

type argsLabel struct {
	Keys  []string `json:"keys,omitempty"`
	Whole bool     `json:"whole,omitempty"`
}

// checkPattern refuses a pattern no writer makes: it would be counted
// under keys nobody reads, or past the bounds a candidate keeps.
func checkPattern(p *trace.Pattern) error {
	if !validFingerprint(p.Fingerprint) {
		return fmt.Errorf("fingerprint %q", p.Fingerprint)
	}
	if len(p.Tools) == 0 || len(p.Tools) > MaxTools {
		return fmt.Errorf("%d tools", len(p.Tools))
	}
	if len(p.Literals) > MaxLiterals {
		return fmt.Errorf("%d literals", len(p.Literals))
	}
	for _, l := range p.Literals {
		if l.Kind != trace.LiteralString && l.Kind != trace.LiteralNumber || len(l.Value) > MaxValueBytes {
			return errors.New("a literal no writer makes")
		}
	}
	if t := p.Template; t != nil && (len(t.Holes) != len(p.Literals) || len(t.Names) != len(p.Literals) || len(t.Code) > MaxCodeBytes) {
		return errors.New("a template that does not fit its literals")
	}
	return nil
}

// validFingerprint: 16 lower-case hex digits, as Read makes them.
func validFingerprint(fp string) bool {
	return len(fp) == 16 && strings.Trim(fp, hexDigits) == ""
}

// stringList reads a list of strings (none when absent).
func stringList(m map[string]events.DynamoDBAttributeValue, name string) ([]string, error) {
	v, ok := m[name]
	if !ok || v.IsNull() {
		return nil, nil
	}
	if v.DataType() != events.DataTypeList {
		return nil, fmt.Errorf("%s is not a list", name)
	}
	var out []string
	for _, x := range v.List() {
		if x.DataType() != events.DataTypeString {
			return nil, fmt.Errorf("%s holds a non-string", name)
		}
		out = append(out, x.String())
	}
	return out, nil
}

func str(m map[string]events.DynamoDBAttributeValue, name string) string {
	if v, ok := m[name]; ok && v.DataType() == events.DataTypeString {
		return v.String()
	}
	return ""
}

func num(m map[string]events.DynamoDBAttributeValue, name string) string {
	if v, ok := m[name]; ok && v.DataType() == events.DataTypeNumber {
		return v.Number()
	}
	return ""
}

// Dynamo reads the learning loop's counters from the traces table. Every
// read is a Query (of a counter partition, summed over its shards, or of
// one counter); none is on an execution's path.
type Dynamo struct {
	DB    aggregate.Querier
	Table string
}

// counter is a counter item as the aggregator writes it.
type counter struct {
	SK    string `dynamodbav:"sk"`
	Count int64  `dynamodbav:"count"`
	FP    string `dynamodbav:"fp"`
	Name  string `dynamodbav:"name"`
	Seen  string `dynamodbav:"last_seen"`
	Tools string `dynamodbav:"tools"`
	Args  string `dynamodbav:"args"`
	Tpl   string `dynamodbav:"template"`
	item  map[string]types.AttributeValue
}

// decode turns counter items into counters, leaving out those past their
// expiry (DynamoDB deletes expired items within days, not at once).
func decode(items []map[string]types.AttributeValue) []counter {
	out := make([]counter, 0, len(items))
	now := time.Now().Unix()
	for _, it := range items {
		var c counter
		if attributevalue.UnmarshalMap(it, &c) != nil || c.Count <= 0 {
			continue
		}
		if e, ok := it["expires_at"].(*types.AttributeValueMemberN); ok {
			if exp, _ := strconv.ParseInt(e.Value, 10, 64); exp > 0 && exp < now {
				continue
			}
		}
		c.item = it
		out = append(out, c)
	}
	return out
}

func (d Dynamo) read(ctx context.Context, pk string) ([]counter, error) {
	items, err := aggregate.Read(ctx, d.DB, d.Table, pk)
	if err != nil {
		return nil, err
	}
	return decode(items), nil
}

// summary folds the items of one principal's FP# counter (on its shards)
// into its part of a candidate: its count, last seen, tools and args.
func summary(c *Candidate, items []counter) {
	for _, x := range items {
		c.Successes += x.Count
		t, err := time.Parse(time.RFC3339Nano, x.Seen)
		if err != nil {
			continue
		}
		if t.After(c.LastSeen) || c.Tools == nil && x.Tools != "" {
			if t.After(c.LastSeen) {
				c.LastSeen = t
			}
			if x.Tools != "" {
				_ = json.Unmarshal([]byte(x.Tools), &c.Tools)
				var a argsLabel
				if json.Unmarshal([]byte(x.Args), &a) == nil {
					c.ArgsKeys, c.ArgsWhole = a.Keys, a.Whole
				}
			}
		}
	}
}

// listing reads the 16 partitions of a principal's listing, concurrently:
// each fingerprint's count of its runs, last seen, tools and args.
func (d Dynamo) listing(ctx context.Context, principal string) (map[string]*Candidate, error) {
	parts := make([][]counter, len(hexDigits))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range hexDigits {
		g.Go(func() error {
			cs, err := d.read(gctx, byPK(principal, hexDigits[i]))
			parts[i] = cs
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	byFP := map[string][]counter{}
	for _, cs := range parts {
		for _, c := range cs {
			if fp := strings.TrimPrefix(c.SK, fpPrefix); fp != c.SK && validFingerprint(fp) {
				byFP[fp] = append(byFP[fp], c)
			}
		}
	}
	out := make(map[string]*Candidate, len(byFP))
	for fp, cs := range byFP {
		c := &Candidate{Fingerprint: fp}
		summary(c, cs)
		out[fp] = c
	}
	return out, nil
}

// maxDetails bounds the candidates one listing reads in full: the listing
// partitions rank them first, by the counts they hold.
const maxDetails = 200

// Candidates implements Store: the viewer's listing partitions, ranked by
// what they hold, then the best of them (at most maxDetails, 4 × the
// limit) read in full, concurrently.
func (d Dynamo) Candidates(ctx context.Context, q Query) ([]Candidate, error) {
	q = q.norm()
	idx, err := d.listing(ctx, q.Viewer.Principal)
	if err != nil {
		return nil, unavailable(err)
	}
	pre := make([]Candidate, 0, len(idx))
	for _, c := range idx {
		pre = append(pre, *c)
	}
	pre = rank(pre, Query{Limit: min(maxDetails, 4*q.Limit), Now: q.Now})
	full := make([]*Candidate, len(pre))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, c := range pre {
		g.Go(func() error {
			got, err := d.candidate(gctx, q.Viewer.Principal, idx[c.Fingerprint])
			full[i] = got
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, unavailable(err)
	}
	var out []Candidate
	for _, c := range full {
		if c != nil && c.Successes >= q.MinSuccesses {
			out = append(out, *c)
		}
	}
	return rank(out, q), nil
}

// Candidate implements Store: the viewer must have run it (its own
// counter of it exists).
func (d Dynamo) Candidate(ctx context.Context, fp string, v Viewer) (Candidate, error) {
	if !validFingerprint(fp) {
		return Candidate{}, noCandidate(fp)
	}
	items, err := aggregate.ReadCounter(ctx, d.DB, d.Table, byPK(v.Principal, fp[0]), fpPrefix+fp)
	if err != nil {
		return Candidate{}, unavailable(err)
	}
	mine := &Candidate{Fingerprint: fp}
	if summary(mine, decode(items)); mine.Successes == 0 {
		return Candidate{}, noCandidate(fp)
	}
	c, err := d.candidate(ctx, v.Principal, mine)
	if err != nil {
		return Candidate{}, unavailable(err)
	}
	if c == nil {
		return Candidate{}, noCandidate(fp)
	}
	return *c, nil
}

// candidate reads one candidate in full for principal, from its part
// (mine, from its listing): the counts from LEARN#ALL, the literals and
// template of its own runs from its own partition. Nil when LEARN#ALL
// has no count of it (expired).
func (d Dynamo) candidate(ctx context.Context, principal string, mine *Candidate) (*Candidate, error) {
	fp := mine.Fingerprint
	c := *mine
	c.Successes, c.Principals = 0, 0
	var all, own []counter
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		items, err := aggregate.ReadCounter(gctx, d.DB, d.Table, allPK(fp[0]), fpPrefix+fp)
		all = decode(items)
		return err
	})
	g.Go(func() error {
		var err error
		own, err = d.read(gctx, ofPK(principal, fp))
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	buckets := map[string]bool{}
	for _, x := range all {
		c.Successes += x.Count
		for name := range x.item {
			if len(name) == 2 && name[0] == 'w' && strings.IndexByte(hexDigits, name[1]) >= 0 {
				buckets[name] = true
			}
		}
	}
	if c.Successes == 0 {
		return nil, nil
	}
	c.Principals = estimate(len(buckets), whoBuckets)
	n := 0
	var vectors [][]trace.Literal
	for _, x := range own {
		switch {
		case x.SK == tplSK && x.Tpl != "" && c.Template == nil:
			var tpl trace.Template
			if json.Unmarshal([]byte(x.Tpl), &tpl) == nil {
				c.Template = &tpl
			}
		case strings.HasPrefix(x.SK, "V#"):
			vec := literals(x.item)
			n = max(n, len(vec))
			vectors = append(vectors, vec)
		}
	}
	if c.Template != nil {
		n = max(n, len(c.Template.Holes))
	}
	c.Slots = make([]Slot, n)
	for _, vec := range vectors {
		if len(vec) != n {
			continue
		}
		for i, l := range vec {
			c.Slots[i].add(l)
		}
	}
	return &c, nil
}

// literals reads a V# item's vector of literals (l00, l01…).
func literals(item map[string]types.AttributeValue) []trace.Literal {
	var vec []trace.Literal
	for i := 0; i < MaxLiterals; i++ {
		v, ok := item[fmt.Sprintf("l%02d", i)].(*types.AttributeValueMemberS)
		if !ok {
			break
		}
		l, ok := decodeLiteral(v.Value)
		if !ok {
			break
		}
		vec = append(vec, l)
	}
	return vec
}

// estimate is the distinct principals behind filled of m buckets (linear
// counting): exact while they fall in distinct buckets, an estimate past a
// few.
func estimate(filled, m int) int {
	if filled == 0 {
		return 0
	}
	if filled >= m {
		filled = m - 1 // saturated: the estimate's ceiling
	}
	n := -float64(m) * math.Log(float64(m-filled)/float64(m))
	return max(filled, int(math.Round(n)))
}

// Runs implements Store: one Query of LEARN#CAPS.
func (d Dynamo) Runs(ctx context.Context) (map[string]Runs, error) {
	cs, err := d.read(ctx, capsPK)
	if err != nil {
		return nil, unavailable(err)
	}
	out := map[string]Runs{}
	for _, c := range cs {
		r := out[c.Name]
		switch {
		case strings.HasPrefix(c.SK, "OK#"):
			r.OK += c.Count
		case strings.HasPrefix(c.SK, "ERR#"):
			r.Failed += c.Count
		default:
			continue
		}
		out[c.Name] = r
	}
	return out, nil
}

func unavailable(err error) error {
	if fault.CodeOf(err) != "" {
		return err
	}
	return fault.Wrap(fault.Unavailable, err, "reading the learning loop's counters")
}

func noCandidate(fp string) error {
	return fault.New(fault.NotFound, "no suggestion %q for this caller", fp)
}

// Store reads what the learning loop counted: a Local fold of the trace
// file, or Dynamo's counters.
type Store interface {
	// Candidates are those q.Viewer ran, seen succeed at least
	// q.MinSuccesses times (by anyone), each made of the viewer's own
	// runs, best first.
	Candidates(ctx context.Context, q Query) ([]Candidate, error)
	// Candidate is one by fingerprint, made of v's runs; NOT_FOUND
	// unless v ran it.
	Candidate(ctx context.Context, fp string, v Viewer) (Candidate, error)
	// Runs are the capability runs counted, by capability name.
	Runs(ctx context.Context) (map[string]Runs, error)
}

// Local is the Store of a trace file (or a process's memory): each read
// folds what Each yields into a Tally. The file is the trace store's own
// (tracedb.Memory.Learned); nothing else is written for learning.
type Local struct {
	// Each calls fn with every record that carries a pattern or is a
	// capability run.
	Each func(ctx context.Context, fn func(trace.Execution)) error

	mu sync.Mutex // one fold at a time: a fold reads the whole file
}

// tally folds what Each yields, keeping only principal's part of each
// candidate (only the counts, when keep is false).
func (l *Local) tally(ctx context.Context, principal string, keep bool) (*Tally, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := newTallyFor(principal)
	if !keep {
		t.keep = func(string) bool { return false }
	}
	if err := l.Each(ctx, t.Add); err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "reading the trace file")
	}
	return t, nil
}

// Candidates implements Store.
func (l *Local) Candidates(ctx context.Context, q Query) ([]Candidate, error) {
	t, err := l.tally(ctx, q.Viewer.Principal, true)
	if err != nil {
		return nil, err
	}
	return t.Candidates(q), nil
}

// Candidate implements Store.
func (l *Local) Candidate(ctx context.Context, fp string, v Viewer) (Candidate, error) {
	t, err := l.tally(ctx, v.Principal, true)
	if err != nil {
		return Candidate{}, err
	}
	c, ok := t.Candidate(fp, v)
	if !ok {
		return Candidate{}, noCandidate(fp)
	}
	return c, nil
}

// Runs implements Store.
func (l *Local) Runs(ctx context.Context) (map[string]Runs, error) {
	t, err := l.tally(ctx, "", false)
	if err != nil {
		return nil, err
	}
	return t.Runs(), nil
}
