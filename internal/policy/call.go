package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cedar-policy/cedar-go/types"
)

// Verdict is what becomes of a tool call.
type Verdict int

// Verdicts.
const (
	// Allow: send it.
	Allow Verdict = iota
	// Ask: a person decides it (parked where the request waits, else
	// refused): the set denies it as it stands and would permit it
	// approved, or it is over a limit whose policy says "ask".
	Ask
	// Forbid: the set refuses it.
	Forbid
	// OverLimit: a limit of a policy that permits it is reached.
	OverLimit
)

// Outcome is a call's verdict and what settled it.
type Outcome struct {
	Verdict Verdict
	// Decision is the set's answer (for Ask: the answer as the call
	// stands, naming the forbids that ask for a person).
	Decision Decision
	// Limit is the limit reached (OverLimit, or Ask over a limit).
	Limit *Limit
	// Reason says why, for Forbid when no policy did (arguments the set
	// cannot read, a set that cannot be evaluated, no counter).
	Reason string
	// WindowEnds is when the limit's window ends (OverLimit).
	WindowEnds time.Time
	// Charged are the counts an allowed call added (Gate.Refund gives
	// them back when nothing of the call was sent).
	Charged []Charge
}

// Charge is what one call added to one count.
type Charge struct {
	Key CountKey
	N   int64
}

// ArgsReader is an Authorizer that says whether its policies read a
// call's arguments (a Set, or what holds one): those that do not are not
// given them. An Authorizer that does not say is given them.
type ArgsReader interface{ ReadsArgs() bool }

// CountKey names one count: a limit's measure, for one principal and
// tool, in one window.
type CountKey struct {
	Policy, Measure, Principal, Tool string
	// Window is when the window starts; Expires when the count may be
	// forgotten (the window's end, and a margin).
	Window, Expires time.Time
}

// String is the key as one string (a counter hashes it into its own key).
func (k CountKey) String() string {
	return strings.Join([]string{k.Policy, k.Measure, k.Principal, k.Tool, strconv.FormatInt(k.Window.Unix(), 10)}, "\x00")
}

// Counter keeps counts every process of a deployment sees alike: a
// directory under a file lock locally, a DynamoDB item per key deployed
// (internal/policy/usage).
type Counter interface {
	// Add adds n to the count of k unless that would take it past max,
	// in one atomic step, and returns the count after (or as it stood,
	// when it did not add) and whether it added. With max < 0 it adds
	// whatever the count (an approved call, or a refund: n < 0).
	Add(ctx context.Context, k CountKey, n, max int64) (count int64, added bool, err error)
}

// Gate decides tool calls: the policy set's answer, then the limits of
// the permits that allowed, counted before the call is sent.
type Gate struct {
	Rules Authorizer
	// Counter counts limited calls; nil refuses every call a limit
	// applies to (a limit that cannot be counted is not honoured by
	// letting calls through).
	Counter Counter
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	// full remembers counts seen at their limit until their window
	// ends, so that calls past a limit are refused without a write: the
	// writes one key takes in a window are bounded by its limit, and one
	// refusal per process.
	mu   sync.Mutex
	full map[string]fullCount
	// entities are the principals' and tools' entities built so far.
	entities entityCache
	// decisions are the set's answers to requests without arguments.
	decisions decisionCache
}

type fullCount struct {
	count   int64
	expires time.Time
}

// maxFull bounds the counts a Gate remembers.
const maxFull = 10000

// Check decides c: Allow (its limits counted), Ask, Forbid or OverLimit.
func (g *Gate) Check(ctx context.Context, c Call) Outcome {
	authorize := g.authorizer(c)
	d, err := authorize(ctx, c)
	if err != nil {
		return g.failed(d, err)
	}
	if !d.Allowed {
		if c.Approved {
			return Outcome{Verdict: Forbid, Decision: d}
		}
		// Would a person's approval let it through?
		approved := c
		approved.Approved = true
		if d2, err := authorize(ctx, approved); err == nil && d2.Allowed {
			return Outcome{Verdict: Ask, Decision: d}
		}
		return Outcome{Verdict: Forbid, Decision: d}
	}
	return g.charge(ctx, c, d)
}

// errArgs marks an error reading a call's arguments (the call is refused
// with it as the reason, not as a set that could not be evaluated).
type errArgs struct{ error }

func (g *Gate) failed(d Decision, err error) Outcome {
	if ea, ok := err.(errArgs); ok {
		return Outcome{Verdict: Forbid, Reason: ea.Error()}
	}
	return Outcome{Verdict: Forbid, Decision: d, Reason: "the policy set could not be evaluated: " + err.Error()}
}

// authorizer is how the set answers c's requests: from the set in force
// and the answers it gave before when it reads no arguments (the request
// is then the same for every call of a run with the same tool, consent
// and approval), else afresh for every call. Limits are counted by
// charge on every call either way.
func (g *Gate) authorizer(c Call) func(context.Context, Call) (Decision, error) {
	if sn, ok := g.Rules.(Snapshotter); ok {
		if s := sn.Snapshot(); !s.ReadsArgs() {
			return func(ctx context.Context, c Call) (Decision, error) { return g.authorizeCached(ctx, s, c) }
		}
	}
	withArgs := true
	if ar, ok := g.Rules.(ArgsReader); ok {
		withArgs = ar.ReadsArgs()
	}
	return func(ctx context.Context, c Call) (Decision, error) {
		in, err := callInput(c, withArgs, &g.entities)
		if err != nil {
			return Decision{}, errArgs{err}
		}
		return g.Rules.Authorize(ctx, in)
	}
}

// charge counts c against every limit of the permits that allowed it:
// all must have room (a limit bounds, it never grants). A count added
// before one that has no room is given back.
func (g *Gate) charge(ctx context.Context, c Call, d Decision) Outcome {
	if len(d.Limits) == 0 || c.Uncounted {
		return Outcome{Verdict: Allow, Decision: d}
	}
	if g.Counter == nil {
		return Outcome{Verdict: Forbid, Decision: d, Reason: "a limit applies to this call, and this deployment keeps no counts"}
	}
	now := time.Now()
	if g.Now != nil {
		now = g.Now()
	}
	var done []Charge
	refund := func() { g.Refund(ctx, done) }
	for i := range d.Limits {
		l := d.Limits[i]
		n, err := l.amount(c.Args)
		if err != nil {
			refund()
			return Outcome{Verdict: Forbid, Decision: d, Limit: &l, Reason: err.Error()}
		}
		if n == 0 {
			continue // adds nothing: a sum's zero
		}
		start := now.Truncate(l.Window)
		k := CountKey{Policy: l.Policy, Measure: l.Measure(), Principal: c.Principal, Tool: c.Tool.FullName(),
			Window: start, Expires: start.Add(l.Window + time.Hour)}
		max := l.max()
		waived := c.Approved && l.Ask // a person decided this call over its limit
		if waived {
			max = -1
		}
		if !waived && g.knownFull(k, n, max, now) {
			refund()
			return g.over(c, d, l, start)
		}
		count, ok, err := g.Counter.Add(ctx, k, n, max)
		if err != nil {
			refund()
			return Outcome{Verdict: Forbid, Decision: d, Limit: &l, Reason: "the limit's count could not be read: " + err.Error()}
		}
		if !ok {
			g.remember(k, count)
			refund()
			return g.over(c, d, l, start)
		}
		done = append(done, Charge{k, n})
	}
	return Outcome{Verdict: Allow, Decision: d, Charged: done}
}

// Refund gives back what a call added to its counts: the call was not
// sent after all (its source refused it: arguments its schema rejects, a
// server that is down). Best effort: a refund lost leaves a count high,
// which refuses sooner, never later.
func (g *Gate) Refund(ctx context.Context, charged []Charge) {
	for _, c := range charged {
		_, _, _ = g.Counter.Add(context.WithoutCancel(ctx), c.Key, -c.N, -1)
	}
}

// over is the outcome of a call past limit l.
func (g *Gate) over(c Call, d Decision, l Limit, start time.Time) Outcome {
	if l.Ask && !c.Approved {
		return Outcome{Verdict: Ask, Decision: d, Limit: &l, WindowEnds: start.Add(l.Window)}
	}
	return Outcome{Verdict: OverLimit, Decision: d, Limit: &l, WindowEnds: start.Add(l.Window)}
}

// knownFull reports whether k was seen too full to take n more in this
// window.
func (g *Gate) knownFull(k CountKey, n, max int64, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	f, ok := g.full[k.String()]
	return ok && now.Before(f.expires) && f.count+n > max
}

func (g *Gate) remember(k CountKey, count int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.full == nil || len(g.full) >= maxFull {
		g.full = map[string]fullCount{}
	}
	g.full[k.String()] = fullCount{count, k.Expires}
}

// amount is what one call adds to l's count: 1 call, or the summed
// argument in millionths. An argument that is missing, not a number, or
// negative is an error: the call is refused rather than counted as
// nothing (a script chooses its arguments).
func (l Limit) amount(args []byte) (int64, error) {
	if l.Arg == "" {
		return 1, nil
	}
	v, err := argAt(args, l.Arg)
	if err != nil {
		return 0, fmt.Errorf("policy %q sums the argument %s: %w", l.Policy, l.Arg, err)
	}
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return 0, fmt.Errorf("policy %q sums the argument %s, and this call's is not a number", l.Policy, l.Arg)
	case f < 0:
		return 0, fmt.Errorf("policy %q sums the argument %s, and this call's is negative", l.Policy, l.Arg)
	case f*sumScale >= 1<<62:
		return 0, fmt.Errorf("policy %q sums the argument %s, and this call's is too large", l.Policy, l.Arg)
	}
	// Rounded up: a sum never counts less than was spent.
	return int64(math.Ceil(f * sumScale)), nil
}

// errNoArg is an argument a sum needs that the call lacks.
var errNoArg = errors.New("this call does not give it")

// argAt is the value at a dotted path of the arguments, as text (a
// string's own text, anything else as JSON).
func argAt(args []byte, path string) (string, error) {
	vals, err := argValues(args)
	if err != nil {
		return "", err
	}
	v, ok := vals[types.String(path)]
	if !ok {
		return "", errNoArg
	}
	r, _ := v.(types.Record)
	t, _ := r.Get("text")
	s, _ := t.(types.String)
	return string(s), nil
}
