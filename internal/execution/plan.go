package execution

import "time"

// Plan is a suspended execution's script as a person deciding its calls
// reads it: every call site of a tool that needs a person, how many calls
// each has made, and the grants in force — decisions that let more than
// one call of one site run. The service builds the sites from the static
// analysis of the script as it starts (the calls it names literally) and
// adds a site as a call reaches a tool by a computed name.
type Plan struct {
	Sites []PlanSite `json:"sites"`
	// Grants are the grants in force, oldest first.
	Grants []Grant `json:"grants,omitempty"`
	// MaxGrant is the most calls one grant may cover here.
	MaxGrant int `json:"max_grant"`
	// Truncated: the script has more sites than a plan lists.
	Truncated bool `json:"truncated,omitempty"`
}

// PlanSite is one call site of a tool that needs a person.
type PlanSite struct {
	// Site identifies it ("line:column" of the call's opening parenthesis
	// in the code that runs, as the engine reports it); empty for the
	// calls of a tool reached by a computed name from no frame of the
	// script (eval'd code, a promise job), which no grant covers.
	Site   string `json:"site,omitempty"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Line and Column are where it is in the script as written.
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
	// InLoop: it sits in a loop, or in a callback of an array's iterating
	// method (the analysis's judgement: analysis.Site.InLoop).
	InLoop bool `json:"in_loop,omitempty"`
	// Computed: the script names the tool there by a computed name
	// (mcp[name]), or from code the analysis could not read: the site was
	// learned from a call.
	Computed bool `json:"computed,omitempty"`
	// Calls counts the calls it has made so far (parked, run or refused).
	Calls int `json:"calls"`
}

// Grant is a person's approval of up to Max calls of one call site of one
// tool in one execution: it never outlives the execution, never covers
// another tool or site, and covers a call only while each Pinned argument
// has the value it had in the call approved with it. Each call it covers
// is traced as approved by By (trace.Call.Approval names the grant).
type Grant struct {
	ID     string `json:"id"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	Site   string `json:"site"`
	Line   int    `json:"line,omitempty"`
	Max    int    `json:"max"`
	Used   int    `json:"used"`
	// Pinned are the pinned arguments with the values they must keep
	// (each shown cut to a preview; calls are compared by the whole
	// value's digest).
	Pinned []PinnedArg `json:"pinned,omitempty"`
	By     string      `json:"by,omitempty"`
	Via    string      `json:"via,omitempty"`
	At     time.Time   `json:"at"`
}

// PinnedArg is one argument a grant pins.
type PinnedArg struct {
	Key string `json:"key"`
	// Value is the value's JSON text, cut to a preview when long.
	Value string `json:"value"`
	// Digest is the SHA-256 of the value's canonical JSON (RFC 8785).
	Digest string `json:"digest"`
}

// Left is how many more calls the grant covers.
func (g Grant) Left() int { return max(0, g.Max-g.Used) }
