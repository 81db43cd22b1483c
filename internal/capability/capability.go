// Package capability makes learned programs callable like tools: a
// capability is stored code named namespace:action, and a script reaches it
// as mcp.<namespace>.<action>(args). Each call runs in a fresh bridge and a
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
	"time"

	"github.com/pml-sandbox/pml/internal/argcheck"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/script"
)

// Capability is one stored version of a learned program.
type Capability struct {
	Name        string          `json:"name"` // namespace:action
	Version     int             `json:"version"`
	ID          string          `json:"id"` // cap:namespace:action@version, stable forever
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Code        string          `json:"code"`
	CreatedAt   time.Time       `json:"created_at"` // of version 1
	UpdatedAt   time.Time       `json:"updated_at"` // of this version
	// Calls counts the calls of every version, as of the last batch a
	// Counter wrote; a pinned version read from DynamoDB carries the count
	// it was saved with.
	Calls int64 `json:"calls"`
}

// Namespace is the part before the colon (the `mcp.<namespace>` object).
func (c Capability) Namespace() string { ns, _, _ := strings.Cut(c.Name, ":"); return ns }

// Action is the part after the colon.
func (c Capability) Action() string { _, a, _ := strings.Cut(c.Name, ":"); return a }

// Registry stores capabilities. Saving a name again makes a new version;
// Get with version 0 returns the latest.
//
// An execution never lists the registry: it resolves the names its code
// references (Lookup), and discovery reads an Index kept per process,
// refreshed through Changes. Reading a latest version never reads older
// ones.
type Registry interface {
	Save(ctx context.Context, c Capability) (Capability, error)
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
// (cap:ns:action@n) and references (name@version) always parse.
var partRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$-]{0,63}$`)

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
		if !partRE.MatchString(p) {
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
	return nil
}

// notFound is the error for an unknown capability or version.
func notFound(name string, version int) error {
	if version > 0 {
		return fault.New(fault.NotFound, "no capability %s version %d", name, version)
	}
	return fault.New(fault.NotFound, "no capability %s", name)
}
