package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

// Bounds of a policy set. Evaluation reads only the policies whose scope
// can apply to a request (index), but loading parses and type-checks
// every one, and a set this large is no longer one a person reads.
const (
	MaxPolicies = 5000
	MaxBytes    = 2 << 20
	// maxErrors bounds the problems one load reports.
	maxErrors = 20
)

// Set is a policy set, parsed and validated against the schema: the
// rules a deployment decides by. It is immutable and safe for concurrent
// use.
type Set struct {
	origin string
	text   []byte
	digest string
	// policies in the order written; byID finds them.
	policies []*entry
	byID     map[string]*entry
	index    index
	// readsArgs: some policy mentions the arguments, so a call's
	// arguments are read into the request (else they are left out: the
	// default set never reads them, and reading costs).
	readsArgs bool
	// isDefault: generated from the deployment's switches (Default).
	isDefault bool
}

// entry is one policy of a Set.
type entry struct {
	id     string
	policy *cedar.Policy
	permit bool
	limits []Limit
	pos    string // file:line
}

// ID implements cedar's PolicyIterator's element: the policy's id.
func (e *entry) pair() (cedar.PolicyID, *cedar.Policy) { return cedar.PolicyID(e.id), e.policy }

// LoadError is a policy set that failed to load: every problem found
// (up to a bound), each naming its place.
type LoadError struct {
	Origin   string
	Problems []string
}

// Error lists the problems, one a line.
func (e *LoadError) Error() string {
	return fmt.Sprintf("policy set %s: %d problem(s):\n  %s", e.Origin, len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// Parse reads a policy set in Cedar's policy syntax and validates every
// policy against the schema (strict): a syntax error, an unknown entity
// type, attribute or action, a condition of the wrong type, an unknown
// annotation or a malformed limit each fail the load with a *LoadError
// naming the policy and its line. origin names the set in messages and
// traces (a path, an s3:// or ssm: address, "default").
//
// Each policy's id is its @id annotation, else "policy<N>" (N counts
// from 0 in the order written, as Cedar numbers unnamed policies).
func Parse(origin string, text []byte) (*Set, error) {
	if len(text) > MaxBytes {
		return nil, &LoadError{origin, []string{fmt.Sprintf("%d bytes; a policy set may hold at most %d", len(text), MaxBytes)}}
	}
	list, err := cedar.NewPolicyListFromBytes(origin, text)
	if err != nil {
		return nil, &LoadError{origin, []string{strings.ReplaceAll(err.Error(), "<input>", origin)}}
	}
	if len(list) > MaxPolicies {
		return nil, &LoadError{origin, []string{fmt.Sprintf("%d policies; a policy set may hold at most %d "+
			"(split what repeats per tool into conditions on resource, or per principal into attributes)", len(list), MaxPolicies)}}
	}
	sum := sha256.Sum256(text)
	s := &Set{origin: origin, text: text, digest: hex.EncodeToString(sum[:8]), byID: make(map[string]*entry, len(list))}
	var problems []string
	for i, p := range list {
		e, errs := s.read(i, p)
		for _, err := range errs {
			problems = append(problems, fmt.Sprintf("%s: policy %q: %v", e.pos, e.id, err))
		}
		if len(problems) >= maxErrors {
			problems = append(problems[:maxErrors], "… (further problems not listed)")
			break
		}
	}
	if len(problems) > 0 {
		return nil, &LoadError{origin, problems}
	}
	s.index = newIndex(s.policies)
	return s, nil
}

// read checks the i-th policy and adds it to s; errs are its problems.
func (s *Set) read(i int, p *cedar.Policy) (*entry, []error) {
	ann := map[string]string{}
	for k, v := range p.Annotations() {
		ann[string(k)] = string(v)
	}
	e := &entry{id: "policy" + strconv.Itoa(i), policy: p, permit: p.Effect() == cedar.Permit,
		pos: fmt.Sprintf("%s:%d", s.origin, p.Position().Line)}
	var errs []error
	if id, ok := ann[AnnotationID]; ok {
		switch {
		case id == "" || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			errs = append(errs, errors.New("@id must be a name without control characters"))
		case s.byID[id] != nil:
			errs = append(errs, fmt.Errorf("@id %q is also the id of the policy at %s", id, s.byID[id].pos))
		}
		e.id = id
	} else if s.byID[e.id] != nil {
		errs = append(errs, fmt.Errorf("its position's id %q is another policy's @id", e.id))
	}
	if err := validator().Policy(e.id, (*xast.Policy)(p.AST())); err != nil {
		errs = append(errs, err)
	}
	limits, err := limitsOf(e.id, e.permit, ann)
	if err != nil {
		errs = append(errs, err)
	}
	e.limits = limits
	if len(errs) == 0 {
		s.policies = append(s.policies, e)
		s.byID[e.id] = e
		if strings.Contains(string(p.MarshalCedar()), "args") {
			s.readsArgs = true
		}
	}
	return e, errs
}

// Info is one policy of a set, as an operator reads it.
type Info struct {
	ID       string   `json:"id"`
	Effect   string   `json:"effect"`
	Position string   `json:"position"`
	Limits   []string `json:"limits,omitempty"`
	// Text is the policy in Cedar, as cedar-go writes it back.
	Text string `json:"text"`
}

// Policies describes the set's policies, in the order written.
func (s *Set) Policies() []Info {
	out := make([]Info, len(s.policies))
	for i, e := range s.policies {
		out[i] = e.info()
	}
	return out
}

// Policy describes the policy id, false when the set has none of it.
func (s *Set) Policy(id string) (Info, bool) {
	e := s.byID[id]
	if e == nil {
		return Info{}, false
	}
	return e.info(), true
}

func (e *entry) info() Info {
	in := Info{ID: e.id, Effect: "forbid", Position: e.pos, Text: string(e.policy.MarshalCedar())}
	if e.permit {
		in.Effect = "permit"
	}
	for _, l := range e.limits {
		in.Limits = append(in.Limits, l.String())
	}
	return in
}

// Origin is where the set came from.
func (s *Set) Origin() string { return s.origin }

// Text is the set as written.
func (s *Set) Text() []byte { return s.text }

// Digest identifies the set's text (the first 16 hex digits of its
// SHA-256): traces and logs say which version decided.
func (s *Set) Digest() string { return s.digest }

// Len is how many policies the set holds.
func (s *Set) Len() int { return len(s.policies) }

// IsDefault reports whether s is the default set generated from the
// deployment's switches.
func (s *Set) IsDefault() bool { return s.isDefault }

// Limits are the limits the policy id carries.
func (s *Set) Limits(id string) []Limit {
	if e := s.byID[id]; e != nil {
		return e.limits
	}
	return nil
}

// Position is where the policy id stands ("file:line"), "" for none.
func (s *Set) Position(id string) string {
	if e := s.byID[id]; e != nil {
		return e.pos
	}
	return ""
}

// ReadsArgs reports whether a policy of the set mentions a call's
// arguments (a request builder may leave them out otherwise).
func (s *Set) ReadsArgs() bool { return s.readsArgs }

// Authorize implements Authorizer: Cedar's answer over the policies whose
// scope may apply (forbid wins; no permit is a deny), with the limits of
// the permits that allowed.
func (s *Set) Authorize(_ context.Context, in Input) (Decision, error) {
	req := cedar.Request{Principal: in.Principal, Action: in.Action, Resource: in.Resource, Context: in.Context}
	d, diag := cedar.Authorize(s.index.candidates(in), in.Entities, req)
	out := Decision{Allowed: d == cedar.Allow, Set: s.digest}
	for _, r := range diag.Reasons {
		id := string(r.PolicyID)
		out.Policies = append(out.Policies, id)
		if d == cedar.Allow {
			out.Limits = append(out.Limits, s.byID[id].limits...)
		}
	}
	for _, e := range diag.Errors {
		out.Errors = append(out.Errors, fmt.Sprintf("%s: %s", e.PolicyID, e.Message))
	}
	return out, nil
}

// policyIter is a cedar.PolicyIterator over some entries of a set.
type policyIter [][]*entry

// All implements cedar.PolicyIterator.
func (it policyIter) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for _, list := range it {
			for _, e := range list {
				if !yield(e.pair()) {
					return
				}
			}
		}
	}
}

// index finds the policies whose scope may apply to a request: by its
// action, then by its resource and the resource's ancestors. It only
// narrows; each candidate's scope is still evaluated whole.
type index struct {
	// anyAction are the policies of every action ("action" alone, or a
	// scope the index does not read).
	anyAction actionIndex
	byAction  map[types.EntityUID]*actionIndex
}

// actionIndex is the policies of one action.
type actionIndex struct {
	// anyResource: the resource scope is "resource" or "resource is T".
	anyResource []*entry
	// byResource: "resource == R", "resource in R" or "resource is T in R",
	// by R.
	byResource map[types.EntityUID][]*entry
}

func newIndex(policies []*entry) index {
	ix := index{byAction: map[types.EntityUID]*actionIndex{}}
	for _, e := range policies {
		ast := (*xast.Policy)(e.policy.AST())
		var actions []types.EntityUID
		switch a := ast.Action.(type) {
		case xast.ScopeTypeEq:
			actions = []types.EntityUID{a.Entity}
		case xast.ScopeTypeIn:
			// The schema declares no action groups: "in" is "==".
			actions = []types.EntityUID{a.Entity}
		case xast.ScopeTypeInSet:
			actions = a.Entities
		default:
			ix.anyAction.add(ast.Resource, e)
			continue
		}
		for _, act := range actions {
			ai := ix.byAction[act]
			if ai == nil {
				ai = &actionIndex{}
				ix.byAction[act] = ai
			}
			ai.add(ast.Resource, e)
		}
	}
	return ix
}

func (ai *actionIndex) add(scope xast.IsResourceScopeNode, e *entry) {
	var r types.EntityUID
	switch sc := scope.(type) {
	case xast.ScopeTypeEq:
		r = sc.Entity
	case xast.ScopeTypeIn:
		r = sc.Entity
	case xast.ScopeTypeIsIn:
		r = sc.Entity
	default:
		ai.anyResource = append(ai.anyResource, e)
		return
	}
	if ai.byResource == nil {
		ai.byResource = map[types.EntityUID][]*entry{}
	}
	ai.byResource[r] = append(ai.byResource[r], e)
}

// candidates are the policies that may apply to in.
func (ix index) candidates(in Input) policyIter {
	it := make(policyIter, 0, 6)
	for _, ai := range []*actionIndex{&ix.anyAction, ix.byAction[in.Action]} {
		if ai == nil {
			continue
		}
		it = append(it, ai.anyResource)
		if ai.byResource == nil {
			continue
		}
		it = append(it, ai.byResource[in.Resource])
		for _, p := range ancestors(in.Entities, in.Resource) {
			it = append(it, ai.byResource[p])
		}
	}
	return it
}

// ancestors are uid's ancestors in entities (parents, theirs, ...):
// a tool's server, here. Allocation-free for an entity without parents.
func ancestors(entities types.EntityGetter, uid types.EntityUID) []types.EntityUID {
	if entities == nil {
		return nil
	}
	var out []types.EntityUID
	for i, next := -1, uid; ; i++ {
		if e, ok := entities.Get(next); ok {
			for p := range e.Parents.All() {
				if p != uid && !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
		if i+1 >= len(out) {
			return out
		}
		next = out[i+1]
	}
}
