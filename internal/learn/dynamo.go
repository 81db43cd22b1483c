package learn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
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
// aggregator from the table's stream (Extract), never by an execution:
//
//	pk LEARN#<fp>              sk RUNS              successes; labels fp, tools, args, last_seen, template
//	pk LEARN#<fp>              sk WHO#<00-63>       runs by the principals in one of 64 buckets (distinct principals, estimated)
//	pk LEARN#<fp>              sk LIT#<ii>#<b>      runs that put a value of bucket b in literal ii; labels kind, value | withheld, hash
//	pk LEARN#BY#<principal>    sk FP#<fp>           that principal's runs of fp: who may see it, and its listing
//	pk LEARN#ALL               sk FP#<fp>           every candidate: the approvers' listing
//	pk LEARN#CAPS              sk OK#<name>, ERR#<name>   capability runs that succeeded, failed: evidence for search
//
// Every counter expires (expires_at) as long after its last run as the
// execution item that counted (PML_TRACE_TTL_DAYS): a candidate nobody runs
// any more fades out, and the listings stay as long as what ran lately.
const (
	candidatePrefix = "LEARN#"
	byPrefix        = "LEARN#BY#"
	allPK           = "LEARN#ALL"
	capsPK          = "LEARN#CAPS"
	runsSK          = "RUNS"
	whoBuckets      = 64
	valueBuckets    = 16
)

func candidatePK(fp string) string { return candidatePrefix + fp }

func byPK(principal string) string {
	if principal == "" {
		principal = "-" // auth off: the one local user
	}
	return byPrefix + principal
}

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
	runs := map[string]string{"fp": p.Fingerprint, "tools": string(tools), "args": string(args), "last_seen": seen}
	if p.Template != nil {
		t, _ := json.Marshal(p.Template)
		runs["template"] = string(t)
	}
	cpk := candidatePK(p.Fingerprint)
	index := map[string]string{"fp": p.Fingerprint, "last_seen": seen}
	out := []aggregate.Increment{
		{PK: cpk, SK: runsSK, N: 1, Labels: runs, Expires: expires},
		{PK: cpk, SK: fmt.Sprintf("WHO#%02d", bucket(principal, whoBuckets)), N: 1, Expires: expires},
		{PK: byPK(principal), SK: "FP#" + p.Fingerprint, N: 1, Labels: index, Expires: expires},
		{PK: allPK, SK: "FP#" + p.Fingerprint, N: 1, Labels: index, Expires: expires},
	}
	for i, l := range p.Literals {
		labels := map[string]string{"kind": l.Kind}
		b := "S"
		switch {
		case l.Withheld == trace.WithheldSecret:
			labels["withheld"] = l.Withheld
		case l.Withheld != "":
			labels["withheld"], labels["hash"] = l.Withheld, l.Hash
			b = strconv.FormatInt(int64(bucket(l.Hash, valueBuckets)), 16)
		default:
			if l.Value != "" {
				labels["value"] = l.Value
			} else {
				labels["empty"] = "1" // "" is a value; labels cannot be empty
			}
			b = strconv.FormatInt(int64(bucket(l.Value, valueBuckets)), 16)
		}
		out = append(out, aggregate.Increment{PK: cpk, SK: fmt.Sprintf("LIT#%02d#%s", i, b), N: 1, Labels: labels, Expires: expires})
	}
	return out, nil
}

type argsLabel struct {
	Keys  []string `json:"keys,omitempty"`
	Whole bool     `json:"whole,omitempty"`
}

// checkPattern refuses a pattern no writer makes: it would be counted
// under keys nobody reads, or past the bounds a candidate keeps.
func checkPattern(p *trace.Pattern) error {
	if len(p.Fingerprint) != 16 || strings.Trim(p.Fingerprint, "0123456789abcdef") != "" {
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
// read is a Query of one counter partition (aggregate.Read sums its
// shards); none is on an execution's path.
type Dynamo struct {
	DB    aggregate.Querier
	Table string
}

// counter is one counter item as the aggregator writes it.
type counter struct {
	SK     string `dynamodbav:"sk"`
	Count  int64  `dynamodbav:"count"`
	FP     string `dynamodbav:"fp"`
	Name   string `dynamodbav:"name"`
	Seen   string `dynamodbav:"last_seen"`
	Tools  string `dynamodbav:"tools"`
	Args   string `dynamodbav:"args"`
	Tpl    string `dynamodbav:"template"`
	Kind   string `dynamodbav:"kind"`
	Value  string `dynamodbav:"value"`
	Empty  string `dynamodbav:"empty"`
	Held   string `dynamodbav:"withheld"`
	Hash   string `dynamodbav:"hash"`
	expiry int64
}

func (d Dynamo) read(ctx context.Context, pk string) ([]counter, error) {
	items, err := aggregate.Read(ctx, d.DB, d.Table, pk)
	if err != nil {
		return nil, err
	}
	out := make([]counter, 0, len(items))
	now := time.Now().Unix()
	for _, it := range items {
		var c counter
		if attributevalue.UnmarshalMap(it, &c) != nil {
			continue
		}
		if e, ok := it["expires_at"].(*types.AttributeValueMemberN); ok {
			// DynamoDB deletes expired items within days, not at once.
			if c.expiry, _ = strconv.ParseInt(e.Value, 10, 64); c.expiry > 0 && c.expiry < now {
				continue
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// index reads a listing partition: each fingerprint's count and when it
// was last seen, summed over shards.
func (d Dynamo) index(ctx context.Context, pk string) (map[string]*Candidate, error) {
	cs, err := d.read(ctx, pk)
	if err != nil {
		return nil, err
	}
	out := map[string]*Candidate{}
	for _, c := range cs {
		fp := strings.TrimPrefix(c.SK, "FP#")
		if fp == c.SK || fp == "" {
			continue
		}
		e := out[fp]
		if e == nil {
			e = &Candidate{Fingerprint: fp}
			out[fp] = e
		}
		e.Successes += c.Count
		if t, err := time.Parse(time.RFC3339Nano, c.Seen); err == nil && t.After(e.LastSeen) {
			e.LastSeen = t
		}
	}
	return out, nil
}

// maxDetails bounds the candidate partitions one listing reads: the
// listing partition ranks them first, by the counts it holds.
const maxDetails = 200

// Candidates implements Store: the viewer's listing partition (an
// approver's: every candidate's), ranked by what it holds, then the
// partitions of the best of them (at most maxDetails, 4 × the limit),
// read concurrently.
func (d Dynamo) Candidates(ctx context.Context, q Query) ([]Candidate, error) {
	q = q.norm()
	pk := allPK
	if !q.Viewer.Approver {
		pk = byPK(q.Viewer.Principal)
	}
	idx, err := d.index(ctx, pk)
	if err != nil {
		return nil, unavailable(err)
	}
	pre := make([]Candidate, 0, len(idx))
	for _, c := range idx {
		pre = append(pre, *c)
	}
	if q.Viewer.Approver {
		// The approvers' listing counts every run: below K is below K.
		pre = slices.DeleteFunc(pre, func(c Candidate) bool { return c.Successes < q.MinSuccesses })
	}
	pre = rank(pre, Query{Limit: min(maxDetails, 4*q.Limit), Now: q.Now})
	full := make([]*Candidate, len(pre))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, c := range pre {
		g.Go(func() error {
			got, err := d.candidate(gctx, c.Fingerprint)
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

// Candidate implements Store: the viewer must have run it (its listing
// partition names it), unless it is an approver.
func (d Dynamo) Candidate(ctx context.Context, fp string, v Viewer) (Candidate, error) {
	if !v.Approver {
		idx, err := d.index(ctx, byPK(v.Principal))
		if err != nil {
			return Candidate{}, unavailable(err)
		}
		if idx[fp] == nil {
			return Candidate{}, noCandidate(fp)
		}
	}
	c, err := d.candidate(ctx, fp)
	if err != nil {
		return Candidate{}, unavailable(err)
	}
	if c == nil {
		return Candidate{}, noCandidate(fp)
	}
	return *c, nil
}

// candidate reads one candidate's partition (nil when it has none).
func (d Dynamo) candidate(ctx context.Context, fp string) (*Candidate, error) {
	cs, err := d.read(ctx, candidatePK(fp))
	if err != nil {
		return nil, err
	}
	c := &Candidate{Fingerprint: fp}
	who := map[string]bool{}
	slots := map[int]*Slot{}
	found := false
	for _, x := range cs {
		switch {
		case x.SK == runsSK:
			found = true
			c.Successes += x.Count
			t, _ := time.Parse(time.RFC3339Nano, x.Seen)
			if t.After(c.LastSeen) || c.Tools == nil {
				if t.After(c.LastSeen) {
					c.LastSeen = t
				}
				_ = json.Unmarshal([]byte(x.Tools), &c.Tools)
				var a argsLabel
				if json.Unmarshal([]byte(x.Args), &a) == nil {
					c.ArgsKeys, c.ArgsWhole = a.Keys, a.Whole
				}
			}
			if x.Tpl != "" && c.Template == nil {
				var tpl trace.Template
				if json.Unmarshal([]byte(x.Tpl), &tpl) == nil {
					c.Template = &tpl
				}
			}
		case strings.HasPrefix(x.SK, "WHO#"):
			if x.Count > 0 {
				who[x.SK] = true
			}
		case strings.HasPrefix(x.SK, "LIT#"):
			rest := strings.TrimPrefix(x.SK, "LIT#")
			is, _, _ := strings.Cut(rest, "#")
			i, err := strconv.Atoi(is)
			if err != nil || i < 0 || i >= MaxLiterals || x.Count <= 0 {
				continue
			}
			s := slots[i]
			if s == nil {
				s = &Slot{}
				slots[i] = s
			}
			s.add(trace.Literal{Kind: x.Kind, Value: x.Value, Withheld: x.Held, Hash: x.Hash})
		}
	}
	if !found {
		return nil, nil
	}
	c.Principals = estimate(len(who), whoBuckets)
	n := 0
	for i := range slots {
		n = max(n, i+1)
	}
	if c.Template != nil {
		n = max(n, len(c.Template.Holes))
	}
	c.Slots = make([]Slot, n)
	for i := range c.Slots {
		if s := slots[i]; s != nil {
			c.Slots[i] = *s
		}
	}
	return c, nil
}

// estimate is the distinct principals behind filled of m buckets (linear
// counting): exact while they fall in distinct buckets, an estimate past a
// few dozen.
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
	// Candidates are those q.Viewer may see, seen succeed at least
	// q.MinSuccesses times, best first.
	Candidates(ctx context.Context, q Query) ([]Candidate, error)
	// Candidate is one by fingerprint, NOT_FOUND unless v may see it.
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

func (l *Local) tally(ctx context.Context) (*Tally, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := NewTally()
	if err := l.Each(ctx, t.Add); err != nil {
		return nil, fault.Wrap(fault.Unavailable, err, "reading the trace file")
	}
	return t, nil
}

// Candidates implements Store.
func (l *Local) Candidates(ctx context.Context, q Query) ([]Candidate, error) {
	t, err := l.tally(ctx)
	if err != nil {
		return nil, err
	}
	return t.Candidates(q), nil
}

// Candidate implements Store.
func (l *Local) Candidate(ctx context.Context, fp string, v Viewer) (Candidate, error) {
	t, err := l.tally(ctx)
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
	t, err := l.tally(ctx)
	if err != nil {
		return nil, err
	}
	return t.Runs(), nil
}
