package learn

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/trace"
)

// Candidate is a program seen succeed, by its fingerprint: what the runs
// of one pattern add up to.
type Candidate struct {
	Fingerprint string `json:"fingerprint"`
	// Successes counts its successful runs; Principals the distinct
	// principals that ran it (an estimate past a few dozen on DynamoDB).
	Successes  int64     `json:"successes"`
	Principals int       `json:"principals"`
	LastSeen   time.Time `json:"last_seen"`
	// Tools are the tools it calls, in the order of their first call.
	Tools     []string `json:"tools"`
	ArgsKeys  []string `json:"args_keys,omitempty"`
	ArgsWhole bool     `json:"args_whole,omitempty"`
	// Slots are its lifted literals, in the order of the code.
	Slots []Slot `json:"slots,omitempty"`
	// Template is its code with the literals cut out; nil until a run
	// that carried it was counted.
	Template *trace.Template `json:"-"`
}

// Slot is what the runs of a candidate put in one lifted literal.
type Slot struct {
	Kind string `json:"kind"`
	// Values are distinct values seen (at most MaxSlotValues).
	Values []string `json:"values,omitempty"`
	// Varied reports that runs put different values here (or values
	// too long to keep, told apart by hash); Withheld that some run's
	// value was withheld (trace.WithheldSecret, trace.WithheldLong).
	Varied   bool   `json:"varied,omitempty"`
	Withheld string `json:"withheld,omitempty"`
	hashes   []string
}

// MaxSlotValues bounds the values a slot keeps: two tell that it varied,
// a few more make a useful description.
const MaxSlotValues = 5

// Input reports whether the slot becomes an input of a suggestion: it
// varied, or no value of it may be kept.
func (s Slot) Input() bool { return s.Varied || s.Withheld != "" || len(s.Values) == 0 }

// add folds one run's literal into the slot.
func (s *Slot) add(l trace.Literal) {
	if s.Kind == "" {
		s.Kind = l.Kind
	}
	switch {
	case l.Withheld == trace.WithheldSecret:
		s.Withheld = trace.WithheldSecret
	case l.Withheld != "":
		if s.Withheld == "" {
			s.Withheld = l.Withheld
		}
		if !slices.Contains(s.hashes, l.Hash) {
			if len(s.hashes) < MaxSlotValues {
				s.hashes = append(s.hashes, l.Hash)
			}
			s.Varied = s.Varied || len(s.hashes)+len(s.Values) > 1
		}
	default:
		if !slices.Contains(s.Values, l.Value) {
			if len(s.Values) < MaxSlotValues {
				s.Values = append(s.Values, l.Value)
			}
			s.Varied = s.Varied || len(s.hashes)+len(s.Values) > 1
		}
	}
}

// Viewer is who asks for candidates: its principal ("" where auth is off)
// and whether the deployment makes it an approver.
type Viewer struct {
	Principal string
	Approver  bool
}

// DefaultMinSuccesses is K: a candidate is suggested once seen succeed
// this many times.
const DefaultMinSuccesses = 3

// Query selects candidates.
type Query struct {
	Viewer Viewer
	// MinSuccesses is K (DefaultMinSuccesses when 0).
	MinSuccesses int64
	// Limit bounds the answer (default 20, at most 100).
	Limit int
	// Now is the time recency is measured from (default time.Now).
	Now time.Time
}

func (q Query) norm() Query {
	if q.MinSuccesses <= 0 {
		q.MinSuccesses = DefaultMinSuccesses
	}
	if q.Limit <= 0 {
		q.Limit = 20
	}
	q.Limit = min(q.Limit, 100)
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	return q
}

// recencyHalfLife is how fast an unused candidate sinks: its score halves
// each week it is not seen.
const recencyHalfLife = 7 * 24 * time.Hour

// Score ranks a candidate: successes count most, distinct principals
// next (a pattern several callers found is more general), both on a log
// scale, and the whole halves for each week since it was last seen.
func (c Candidate) Score(now time.Time) float64 {
	s := math.Log1p(float64(c.Successes)) + 0.5*math.Log1p(float64(c.Principals))
	age := max(now.Sub(c.LastSeen), 0)
	return s * math.Exp2(-float64(age)/float64(recencyHalfLife))
}

// rank sorts cs best first and cuts them to the query's limit.
func rank(cs []Candidate, q Query) []Candidate {
	slices.SortFunc(cs, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(b.Score(q.Now), a.Score(q.Now)), b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Fingerprint, b.Fingerprint))
	})
	if len(cs) > q.Limit {
		cs = cs[:q.Limit]
	}
	return cs
}

// maxPrincipals bounds the principals a Tally remembers per candidate;
// past it, the count saturates.
const maxPrincipals = 1000

// Tally adds up executions into candidates, in memory: the local store's
// fold over the trace file, and the reference the DynamoDB counters are
// tested against.
type Tally struct {
	byFP map[string]*tallied
	runs map[string]*Runs
}

type tallied struct {
	Candidate
	principals map[string]bool
}

// NewTally returns an empty Tally.
func NewTally() *Tally { return &Tally{byFP: map[string]*tallied{}, runs: map[string]*Runs{}} }

// Add counts one execution record: a successful one with a pattern as a
// run of its candidate, a capability run as a success or failure of its
// capability. Others count nothing.
func (t *Tally) Add(ex trace.Execution) {
	if ex.Capability != "" {
		if ex.Status == trace.StatusSuspended {
			return
		}
		r := t.runs[ex.Capability]
		if r == nil {
			r = &Runs{}
			t.runs[ex.Capability] = r
		}
		if ex.Status == trace.StatusOK {
			r.OK++
		} else {
			r.Failed++
		}
		return
	}
	p := ex.Pattern
	if p == nil || ex.Status != trace.StatusOK || p.Fingerprint == "" {
		return
	}
	c := t.byFP[p.Fingerprint]
	if c == nil {
		c = &tallied{Candidate: Candidate{Fingerprint: p.Fingerprint, Slots: make([]Slot, len(p.Literals))}, principals: map[string]bool{}}
		t.byFP[p.Fingerprint] = c
	}
	c.Successes++
	if len(c.principals) < maxPrincipals {
		c.principals[ex.Principal] = true
	}
	if !ex.StartedAt.Before(c.LastSeen) {
		c.LastSeen = ex.StartedAt
		c.Tools = p.Tools
	}
	c.ArgsWhole = c.ArgsWhole || p.ArgsWhole
	for _, k := range p.ArgsKeys {
		if !slices.Contains(c.ArgsKeys, k) {
			c.ArgsKeys = append(c.ArgsKeys, k)
		}
	}
	slices.Sort(c.ArgsKeys)
	if len(p.Literals) == len(c.Slots) {
		for i, l := range p.Literals {
			c.Slots[i].add(l)
		}
	}
	if p.Template != nil && len(p.Template.Holes) == len(c.Slots) {
		c.Template = p.Template
	}
}

// Candidates returns the candidates q's viewer may see (those it ran;
// all of them for an approver) seen succeed at least q.MinSuccesses times,
// best first.
func (t *Tally) Candidates(q Query) []Candidate {
	q = q.norm()
	var out []Candidate
	for _, c := range t.byFP {
		if c.Successes >= q.MinSuccesses && t.visible(c, q.Viewer) {
			out = append(out, c.candidate())
		}
	}
	return rank(out, q)
}

// Candidate returns the candidate fp if v may see it.
func (t *Tally) Candidate(fp string, v Viewer) (Candidate, bool) {
	c := t.byFP[fp]
	if c == nil || !t.visible(c, v) {
		return Candidate{}, false
	}
	return c.candidate(), true
}

func (t *Tally) visible(c *tallied, v Viewer) bool { return v.Approver || c.principals[v.Principal] }

func (c *tallied) candidate() Candidate {
	out := c.Candidate
	out.Principals = len(c.principals)
	out.Slots = slices.Clone(c.Slots)
	return out
}

// Runs counts the runs of one capability: evidence for search.
type Runs struct {
	OK     int64 `json:"ok"`
	Failed int64 `json:"failed"`
}

// SuccessRate is the share of runs that succeeded, with one success and
// one failure assumed before any (so a capability never run scores 0.5,
// and one run is not a certainty).
func (r Runs) SuccessRate() float64 {
	return float64(r.OK+1) / float64(r.OK+r.Failed+2)
}

// Runs returns the capability runs counted, by capability name.
func (t *Tally) Runs() map[string]Runs {
	out := make(map[string]Runs, len(t.runs))
	for n, r := range t.runs {
		out[n] = *r
	}
	return out
}
