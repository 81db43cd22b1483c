package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The annotations a policy may carry. Any other is refused when the set is
// loaded: a misspelt @limit must not leave a permit unlimited.
const (
	// AnnotationID names the policy in errors, traces and explain.
	AnnotationID = "id"
	// AnnotationDescription says what the policy is for.
	AnnotationDescription = "description"
	// AnnotationLimit bounds the calls a permit allows: "<n>/<window>",
	// at most n calls per principal and tool in each window ("3/1h").
	AnnotationLimit = "limit"
	// AnnotationSum bounds the sum of a numeric argument:
	// "<argument path>, <max>/<window>" ("amount, 500/24h").
	AnnotationSum = "sum"
	// AnnotationOverLimit says what becomes of a call over a limit:
	// "refuse" (LIMIT_EXCEEDED, the default) or "ask" (a person decides
	// it, as a call that needs approval).
	AnnotationOverLimit = "overLimit"
)

var knownAnnotations = []string{AnnotationID, AnnotationDescription, AnnotationLimit, AnnotationSum, AnnotationOverLimit}

// maxRate bounds a limit's rate (its count over its window): a limit is a
// bound a principal reaches, and a counter item written more often than
// this would be a hot key in DynamoDB (each key takes about 1,000 writes a
// second).
const maxRate = 500.0 // per second

// sumScale is how finely sums count: amounts are kept in millionths, so
// a sum is exact to six decimal places and fits an int64 up to 9.2e12.
const sumScale = 1_000_000

// Limit bounds what one permit policy lets a principal do to a tool in a
// window of time. Windows are fixed: they start at multiples of Window
// since 0001-01-01 UTC (time.Truncate: an hour's window starts on the
// hour, a day's at midnight UTC), so every container agrees on the window
// of an instant without talking to the others.
type Limit struct {
	// Policy is the id of the policy that carries it.
	Policy string
	// Arg is the argument summed ("amount", "body.amount"); "" for a
	// limit on the number of calls.
	Arg string
	// Max is the most calls, or the largest sum (in the argument's own
	// units), in one window.
	Max float64
	// Window is the window's length.
	Window time.Duration
	// Ask: a call over the limit is asked of a person rather than refused.
	Ask bool
	// Text is the annotation as written ("3/1h").
	Text string
}

// Measure names what the limit counts: "calls", or "sum:<arg>".
func (l Limit) Measure() string {
	if l.Arg == "" {
		return "calls"
	}
	return "sum:" + l.Arg
}

// String says the limit in words.
func (l Limit) String() string {
	if l.Arg == "" {
		return fmt.Sprintf("at most %s calls per %s", fmtNum(l.Max), fmtWindow(l.Window))
	}
	return fmt.Sprintf("a sum of %s of at most %s per %s", l.Arg, fmtNum(l.Max), fmtWindow(l.Window))
}

// max is the limit in the counter's units.
func (l Limit) max() int64 {
	if l.Arg == "" {
		return int64(l.Max)
	}
	return int64(l.Max * sumScale)
}

// limitsOf reads a policy's limit annotations.
func limitsOf(id string, permit bool, ann map[string]string) ([]Limit, error) {
	for k := range ann {
		if !slices.Contains(knownAnnotations, k) {
			return nil, fmt.Errorf("unknown annotation @%s (known: @%s)", k, strings.Join(knownAnnotations, ", @"))
		}
	}
	var out []Limit
	ask := false
	if v, ok := ann[AnnotationOverLimit]; ok {
		switch v {
		case "ask":
			ask = true
		case "refuse":
		default:
			return nil, fmt.Errorf(`@overLimit(%q): want "refuse" or "ask"`, v)
		}
	}
	if v, ok := ann[AnnotationLimit]; ok {
		n, w, err := parseRate(v)
		if err != nil {
			return nil, fmt.Errorf("@limit(%q): %w", v, err)
		}
		if n != float64(int64(n)) || n < 1 {
			return nil, fmt.Errorf("@limit(%q): the count is a whole number of calls, at least 1", v)
		}
		out = append(out, Limit{Policy: id, Max: n, Window: w, Ask: ask, Text: v})
	}
	if v, ok := ann[AnnotationSum]; ok {
		arg, rate, found := strings.Cut(v, ",")
		arg, rate = strings.TrimSpace(arg), strings.TrimSpace(rate)
		if !found || arg == "" || strings.Contains(arg, "..") || strings.HasPrefix(arg, ".") || strings.HasSuffix(arg, ".") {
			return nil, fmt.Errorf(`@sum(%q): want "<argument>, <max>/<window>" ("amount, 500/24h")`, v)
		}
		n, w, err := parseRate(rate)
		if err != nil {
			return nil, fmt.Errorf("@sum(%q): %w", v, err)
		}
		if n*sumScale >= 1<<62 {
			return nil, fmt.Errorf("@sum(%q): the sum is too large to count", v)
		}
		out = append(out, Limit{Policy: id, Arg: arg, Max: n, Window: w, Ask: ask, Text: v})
	}
	switch {
	case len(out) > 0 && !permit:
		return nil, fmt.Errorf("a limit bounds what a permit allows: @%s on a forbid policy means nothing", AnnotationLimit)
	case ask && len(out) == 0:
		return nil, fmt.Errorf("@overLimit without @limit or @sum")
	}
	return out, nil
}

// parseRate reads "<max>/<window>": a number and a duration ("1h",
// "30m", "24h", "7d").
func parseRate(s string) (float64, time.Duration, error) {
	num, win, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("want <max>/<window> such as 3/1h")
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n < 0 || n != n {
		return 0, 0, fmt.Errorf("%q is not a number", num)
	}
	w, err := parseWindow(strings.TrimSpace(win))
	if err != nil {
		return 0, 0, err
	}
	if n/w.Seconds() > maxRate {
		return 0, 0, fmt.Errorf("more than %g a second is no limit (and its counter would be a hot key)", maxRate)
	}
	return n, w, nil
}

// parseWindow reads a window: a Go duration, or whole days ("7d"),
// between a second and 31 days.
func parseWindow(s string) (time.Duration, error) {
	var w time.Duration
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil {
			return 0, fmt.Errorf("%q is not a window such as 1h or 7d", s)
		}
		w = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if w, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a window such as 1h or 7d", s)
		}
	}
	if w < time.Second || w > 31*24*time.Hour || w%time.Second != 0 {
		return 0, fmt.Errorf("a window is whole seconds, from 1s to 31d (not %s)", s)
	}
	return w, nil
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func fmtWindow(w time.Duration) string {
	switch {
	case w%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", w/(24*time.Hour))
	case w%time.Hour == 0:
		return fmt.Sprintf("%dh", w/time.Hour)
	case w%time.Minute == 0:
		return fmt.Sprintf("%dm", w/time.Minute)
	}
	return fmt.Sprintf("%ds", w/time.Second)
}
