// Package capability makes learned programs callable like tools: a
// capability is stored code named namespace:action, and a script reaches it
// as mcp.<namespace>.<action>(args). Each call runs in a fresh executor and a
// fresh sandbox — in-process locally, in the capability Lambda when deployed
// — with a depth limit and cycle detection, so capabilities may call tools
// and each other safely.
package capability

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/js/script"
)

// Capability is one stored version of a learned program.
type Capability struct {
	Name        string          `json:"name"` // namespace:action
	Version     int             `json:"version"`
	ID          string          `json:"id"` // cap:namespace:action@version, stable forever
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// Code is never empty in a saved version; a listing that leaves it
	// out (pml capability list) shows no key.
	Code      string    `json:"code,omitempty"`
	CreatedAt time.Time `json:"created_at"` // of version 1
	UpdatedAt time.Time `json:"updated_at"` // of this version: when it was published
	// Calls counts the calls of every version, as of the last batch a
	// Counter wrote; a pinned version read from DynamoDB carries the count
	// it was saved with.
	Calls int64 `json:"calls"`

	// What callers may trust about this version, set by the registry when
	// it is published and never changed after (versions are immutable:
	// no store has a path that rewrites one). Versions published before
	// these existed have them empty.

	// Pins are the versions of the capabilities this version's code
	// calls, pinned when it was saved: its calls run those versions, not
	// the heads (unless the request above pinned the name first).
	Pins map[string]int `json:"pins,omitempty"`
	// Provenance are the executions the code came from, as its author
	// said when saving or proposing it (execution ids; informational).
	Provenance []string `json:"provenance,omitempty"`
	// Author is the principal that wrote the code (saved or proposed it),
	// Publisher the one whose decision published it, and Via how that
	// decision came (ViaCaller, ViaApprover, ViaClient, ViaPage). Listings
	// show the principals to approvers and to the principals themselves
	// only (Shown).
	Author    string `json:"author,omitempty"`
	Publisher string `json:"publisher,omitempty"`
	Via       string `json:"via,omitempty"`
	// Draft is the draft this version was published from, if any.
	Draft string `json:"draft,omitempty"`
	// CodeHash is "sha256:" and the hex SHA-256 of Code as stored; a run
	// refuses a version whose code no longer matches it.
	CodeHash string `json:"code_hash,omitempty"`
	// Equivalence identifies what the version does: a hash of its code
	// with whitespace and comments normalised away (Normalize), its
	// description, input schema and pins. Saving a capability equivalent
	// to one of its versions answers that version.
	Equivalence string `json:"equivalence,omitempty"`
}

// How a version's publication was decided (Capability.Via): the policy's
// channels (execution.Channel), with an approver's own credentials named
// apart from the author's.
const (
	ViaCaller   = "caller"      // the author with its own credentials, where the caller decides
	ViaApprover = "approver"    // an approver's credentials
	ViaClient   = "elicitation" // the author's MCP client's user, asked through elicitation
	ViaPage     = "page"        // a person signed in on the approval page
)

// Namespace is the part before the colon (the `mcp.<namespace>` object).
func (c Capability) Namespace() string { ns, _, _ := strings.Cut(c.Name, ":"); return ns }

// Action is the part after the colon.
func (c Capability) Action() string { _, a, _ := strings.Cut(c.Name, ":"); return a }

// Registry stores capabilities. Saving a name again makes a new version;
// Get with version 0 returns the latest. A version, once saved, never
// changes: no method rewrites one.
//
// An execution never lists the registry: it resolves the names its code
// references (Lookup), and discovery reads an Index kept per process,
// refreshed through Changes. Reading a latest version never reads older
// ones.
//
// Who may publish is not the registry's to decide (see Guard), but it
// keeps what the decision needs: each namespace's owner, recorded by the
// first publication in it, and the drafts waiting for someone to publish
// them. Save checks the owners and writes in one step, so two publishers
// can never both take a namespace, nor one publish past an owner recorded
// meanwhile.
type Registry interface {
	// Save publishes c as its name's next version, as c.Publisher, and
	// records c.Publisher as the namespace's owner if it has none (an
	// anonymous publisher, where auth is off, owns nothing). allow,
	// when not nil, is asked with the namespace's owners as they are at
	// the write, and its error refuses the save (nothing written). A
	// version equivalent to c (Capability.Equivalence) already saved is
	// answered instead of a new one (Saved.Existing). When c.Draft names a
	// draft, the draft must be pending and is marked published by the
	// same write.
	Save(ctx context.Context, c Capability, allow Allow) (Saved, error)
	// Get returns one version of name; version 0 is the latest.
	Get(ctx context.Context, name string, version int) (Capability, error)
	// Lookup returns the latest version of each of names that exists, by
	// name; a name that does not exist is absent from the map. It reads
	// the names asked for and nothing else, as of the call (a capability
	// saved anywhere before it is found).
	Lookup(ctx context.Context, names []string) (map[string]Capability, error)
	// List returns the latest version of every capability, sorted by
	// name: what an Index loads, never what an execution reads.
	List(ctx context.Context) ([]Capability, error)
	// Changes returns what changed since mark, the Next of an earlier
	// answer ("" asks for everything), for an Index to refresh itself.
	Changes(ctx context.Context, mark string) (Changes, error)
	// HasNamespace reports whether some capability is named ns:*, as of
	// the call (dynamic access: mcp[ns]).
	HasNamespace(ctx context.Context, ns string) (bool, error)
	// AddCalls adds n to the call count of each name (a Counter's batch).
	// Names that no longer exist are skipped.
	AddCalls(ctx context.Context, counts map[string]int64) error
	// Owners returns the principals that own namespace ns (none before
	// anything was published in it by this release).
	Owners(ctx context.Context, ns string) ([]string, error)

	// PutDraft stores a new draft (its ID must be new) within limits,
	// counted as every process sees them (LIMIT_EXCEEDED past them; the
	// oldest closed drafts make room where the total is reached). Drafts
	// are kept apart from the versions: neither write rewrites the other.
	PutDraft(ctx context.Context, d Draft, limits DraftLimits) error
	// GetDraft returns a draft, pending or closed, until it expires;
	// NOT_FOUND after.
	GetDraft(ctx context.Context, id string) (Draft, error)
	// Drafts returns every draft that has not expired, oldest first.
	Drafts(ctx context.Context) ([]Draft, error)
	// CloseDraft marks a pending draft rejected or withdrawn (status)
	// by principal; CONFLICT when it is no longer pending.
	CloseDraft(ctx context.Context, id, status, principal, reason string) (Draft, error)
}

// Allow decides, as a save is written, whether it may publish into a
// namespace owned by owners; its error refuses the save.
type Allow func(owners []string) error

// Saved is what Registry.Save answers: the version published, or the
// equivalent one that already was (Existing).
type Saved struct {
	Capability
	Existing bool `json:"existing,omitempty"`
}

// Changes is what Registry.Changes returns.
type Changes struct {
	// Full reports that Caps is the whole registry, to replace what the
	// reader holds; otherwise Caps are latest versions saved since the
	// mark (possibly some the reader already has), to merge.
	Full bool
	Caps []Capability
	// Next is the mark to ask from next time.
	Next string
}

// partRE is the shape of a capability name's parts, narrower than what
// catalog.ValidName lets servers and tools be called: capability names are
// minted here, and stay short and identifier-like so that ids
// (cap:ns:action@n) and references (name@version) always parse. Compiled
// on first use: its counted repetition compiles to a program of ~64
// states, a tenth of a millisecond of every process's start otherwise.
var partRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$-]{0,63}$`) })

// ParseName checks "namespace:action": each part of the shape partRE
// describes and a valid name by the one rule every server and tool name
// follows (catalog.ValidName), so a capability is always reachable as
// mcp.<namespace>.<action>.
func ParseName(name string) (namespace, action string, err error) {
	ns, act, ok := strings.Cut(name, ":")
	if !ok {
		return "", "", fault.New(fault.InvalidRequest, "capability name %q must be namespace:action", name)
	}
	for _, p := range []string{ns, act} {
		if !partRE().MatchString(p) {
			return "", "", fault.New(fault.InvalidRequest, "capability name %q: %q must start with a letter, _ or $ and hold letters, digits, _, $ or - (at most 64)", name, p)
		}
		if err := catalog.ValidName(p); err != nil {
			return "", "", fault.Wrap(fault.InvalidRequest, err, fmt.Sprintf("capability name %q", name))
		}
	}
	return ns, act, nil
}

// ParseRef splits "name@version" (version 0 when absent).
func ParseRef(ref string) (name string, version int, err error) {
	name, v, ok := strings.Cut(ref, "@")
	if !ok {
		return ref, 0, nil
	}
	if _, err := fmt.Sscanf(v, "%d", &version); err != nil || version < 1 {
		return "", 0, fault.New(fault.InvalidRequest, "bad version in %q", ref)
	}
	return name, version, nil
}

// ID is the stable identifier of one version.
func ID(name string, version int) string { return fmt.Sprintf("cap:%s@%d", name, version) }

// Validate checks what Save must check before storing: the name, that the
// code parses, and that the input schema compiles. argcheck.Compile first
// checks the schema's size and depth, so a hostile schema is refused before
// the compile, which cannot be cancelled.
func Validate(c Capability) error {
	if _, _, err := ParseName(c.Name); err != nil {
		return err
	}
	if strings.TrimSpace(c.Code) == "" {
		return fault.New(fault.InvalidRequest, "capability %s has no code", c.Name)
	}
	// A run would let the engine judge code the analysis parser cannot
	// read; a save cannot wait for that, so it refuses only code that no
	// parser reads, whose run would fail anyway.
	p, err := script.Prepare(c.Code, script.LangAuto)
	if err != nil {
		return err
	}
	if p.Unread != nil {
		return p.Unread
	}
	if len(c.InputSchema) > 0 {
		if err := argcheck.Compile(c.InputSchema); err != nil {
			return fault.Wrap(fault.InvalidRequest, err, "capability "+c.Name+": input_schema")
		}
	}
	if err := checkPins(c.Name, c.Pins); err != nil {
		return err
	}
	return checkProvenance(c.Name, c.Provenance)
}

// checkPins checks the pins a capability is saved with: capability names
// and versions, never its own name (a capability calling itself is a
// cycle, whatever the version).
func checkPins(name string, pins map[string]int) error {
	if ferr := execution.CheckPins(pins); ferr != nil {
		return fault.Wrap(fault.InvalidRequest, ferr, "capability "+name+": pins")
	}
	for p := range pins {
		if _, _, err := ParseName(p); err != nil {
			return fault.Wrap(fault.InvalidRequest, err, "capability "+name+": pins")
		}
		if p == name {
			return fault.New(fault.InvalidRequest, "capability %s pins itself", name)
		}
	}
	return nil
}

// notFound is the error for an unknown capability or version.
func notFound(name string, version int) error {
	if version > 0 {
		return fault.New(fault.NotFound, "no capability %s version %d", name, version)
	}
	return fault.New(fault.NotFound, "no capability %s", name)
}
