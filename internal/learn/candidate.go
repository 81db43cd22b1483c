package learn

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/pml-sandbox/pml/internal/trace"
)

// Candidate is a program seen succeed, by its fingerprint, as one
// principal sees it: the counts of every principal's runs, and what its
// own runs held (their literals, tools, args and template), never
// another's.
type Candidate struct {
	Fingerprint string `json:"fingerprint"`
	// Successes counts its successful runs, by any principal; Principals
	// the distinct principals that ran it (an estimate past a few on
	// DynamoDB).
	Successes  int64 `json:"successes"`
	Principals int   `json:"principals"`
	// LastSeen is the viewer's last run of it.
	LastSeen time.Time `json:"last_seen"`
	// Tools are the tools it calls, in the order of their first call.
	Tools     []string `json:"tools"`
	ArgsKeys  []string `json:"args_keys,omitempty"`
	ArgsWhole bool     `json:"args_whole,omitempty"`
	// Slots are its lifted literals, in the order of the code, as the
	// viewer's runs filled them.
	Slots []Slot `json:"slots,omitempty"`
	// Template is its code with the literals cut out, from one of the
	// viewer's runs; nil until a run of the viewer's that carried it was
	// counted.
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

// Viewer is who asks for candidates: its principal ("" where auth is
// off). It sees the candidates it ran, each made of its own runs; being
// an approver changes nothing here (another principal's program reaches
// an approver as that principal's draft).
type Viewer struct {
	Principal string
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
// past it, the count saturates and no further principal's runs are kept.
const maxPrincipals = 1000

// Tally adds up executions into candidates, in memory: the local store's
// fold over the trace file, and the reference the DynamoDB counters are
// tested against.
type Tally struct {
	byFP map[string]*tallied
	runs map[string]*Runs
	// keep, when set, says whose runs' contents to keep (a fold for one
	// viewer keeps only its own); counts are kept for every run.
	keep func(principal string) bool
}

// tallied is a candidate's counts, and each principal's own part.
type tallied struct {
	successes  int64
	principals map[string]bool
	own        map[string]*owned
}

// owned is what one principal's runs of a candidate held.
type owned struct {
	lastSeen  time.Time
	tools     []string
	argsKeys  []string
	argsWhole bool
	slots     []Slot
	template  *trace.Template
}

// NewTally returns an empty Tally that keeps every principal's part.
func NewTally() *Tally { return &Tally{byFP: map[string]*tallied{}, runs: map[string]*Runs{}} }

// newTallyFor returns an empty Tally that keeps only principal's part.
func newTallyFor(principal string) *Tally {
	t := NewTally()
	t.keep = func(p string) bool { return p == principal }
	return t
}

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
		c = &tallied{principals: map[string]bool{}, own: map[string]*owned{}}
		t.byFP[p.Fingerprint] = c
	}
	c.successes++
	if len(c.principals) < maxPrincipals {
		c.principals[ex.Principal] = true
	}
	if !c.principals[ex.Principal] || t.keep != nil && !t.keep(ex.Principal) {
		return
	}
	o := c.own[ex.Principal]
	if o == nil {
		o = &owned{slots: make([]Slot, len(p.Literals))}
		c.own[ex.Principal] = o
	}
	o.add(ex.StartedAt, p)
}

// add folds one of the principal's runs into its part.
func (o *owned) add(at time.Time, p *trace.Pattern) {
	if !at.Before(o.lastSeen) {
		o.lastSeen = at
		o.tools = p.Tools
	}
	o.argsWhole = o.argsWhole || p.ArgsWhole
	for _, k := range p.ArgsKeys {
		if !slices.Contains(o.argsKeys, k) {
			o.argsKeys = append(o.argsKeys, k)
		}
	}
	slices.Sort(o.argsKeys)
	if len(p.Literals) == len(o.slots) {
		for i, l := range p.Literals {
			o.slots[i].add(l)
		}
	}
	if p.Template != nil && len(p.Template.Holes) == len(o.slots) {
		o.template = p.Template
	}
}

// Candidates returns the candidates q's viewer ran, seen succeed at least
// q.MinSuccesses times, each made of the viewer's runs, best first.
func (t *Tally) Candidates(q Query) []Candidate {
	q = q.norm()
	var out []Candidate
	for fp, c := range t.byFP {
		if o := c.own[q.Viewer.Principal]; o != nil && c.successes >= q.MinSuccesses {
			out = append(out, c.candidate(fp, o))
		}
	}
	return rank(out, q)
}

// Candidate returns the candidate fp, made of v's runs, if v ran it.
func (t *Tally) Candidate(fp string, v Viewer) (Candidate, bool) {
	c := t.byFP[fp]
	if c == nil || c.own[v.Principal] == nil {
		return Candidate{}, false
	}
	return c.candidate(fp, c.own[v.Principal]), true
}

func (c *tallied) candidate(fp string, o *owned) Candidate {
	return Candidate{Fingerprint: fp, Successes: c.successes, Principals: len(c.principals), LastSeen: o.lastSeen,
		Tools: o.tools, ArgsKeys: slices.Clone(o.argsKeys), ArgsWhole: o.argsWhole, Slots: slices.Clone(o.slots), Template: o.template}
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
