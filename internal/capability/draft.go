package capability

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
)

// Proposal is what an author asks to publish: a capability's code and
// what callers are told about it.
type Proposal struct {
	Name string `json:"name"`
	// Code is never empty in a proposal that can be saved; a listing of
	// drafts that leaves it out shows no key.
	Code        string          `json:"code,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// Pins are the versions of the capabilities the code calls that it
	// runs (see Capability.Pins).
	Pins map[string]int `json:"pins,omitempty"`
	// Provenance are the executions the code came from (execution ids,
	// at most MaxProvenance).
	Provenance []string `json:"provenance,omitempty"`
}

// Capability is the proposal as a capability to save.
func (p Proposal) Capability() Capability {
	return Capability{Name: p.Name, Code: p.Code, Description: p.Description, InputSchema: p.InputSchema,
		Pins: p.Pins, Provenance: p.Provenance}
}

// Draft is a proposal waiting for someone the policy lets publish it:
// what a save becomes when its caller may not publish.
type Draft struct {
	ID string `json:"id"`
	Proposal
	// Author is the principal that proposed it.
	Author string `json:"author"`
	// CodeHash is Capability.CodeHash of the code.
	CodeHash  string    `json:"code_hash"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Status is DraftPending until someone publishes, rejects or (its
	// author) withdraws it; a closed draft is kept, with who closed it
	// and the version it became, until it expires.
	Status   string     `json:"status"`
	ClosedBy string     `json:"closed_by,omitempty"`
	ClosedAt *time.Time `json:"closed_at,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Version  int        `json:"version,omitempty"`
	// Equivalence is Capability.Equivalence of the proposal.
	Equivalence string `json:"equivalence,omitempty"`
}

// Draft statuses.
const (
	DraftPending   = "pending"
	DraftPublished = "published"
	DraftRejected  = "rejected"
	DraftWithdrawn = "withdrawn"
)

// Namespace is the part of the draft's name before the colon.
func (d Draft) Namespace() string { return Capability{Name: d.Name}.Namespace() }

// Pending reports whether d still waits for a decision at now.
func (d Draft) Pending(now time.Time) bool {
	return d.Status == DraftPending && now.Before(d.ExpiresAt)
}

// DefaultDraftTTL is how long a draft waits for someone to publish it.
const DefaultDraftTTL = 7 * 24 * time.Hour

// MaxProvenance bounds the executions a version names as its provenance.
const MaxProvenance = 20

// NewDraftID mints a draft id: "cd_" and 24 hex digits.
func NewDraftID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "cd_" + hex.EncodeToString(b[:])
}

var (
	draftIDRE = regexp.MustCompile(`^cd_[0-9a-f]{24}$`)
	// provenanceRE is the shape of an execution id any front end mints
	// (ex_…), loose enough for ids of other deployments. Compiled on first
	// use (its counted repetition makes a large program: ~0.2 ms of every
	// start otherwise).
	provenanceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`) })
)

// CheckDraftID refuses what cannot be a draft id, before any store is
// asked.
func CheckDraftID(id string) error {
	if !draftIDRE.MatchString(id) {
		return fault.New(fault.InvalidRequest, "%q is not a draft id (cd_ and 24 hex digits)", id)
	}
	return nil
}

// checkProvenance checks the execution ids a save names.
func checkProvenance(name string, ids []string) error {
	if len(ids) > MaxProvenance {
		return fault.New(fault.InvalidRequest, "capability %s: provenance names %d executions; at most %d", name, len(ids), MaxProvenance)
	}
	for _, id := range ids {
		if !provenanceRE().MatchString(id) {
			return fault.New(fault.InvalidRequest, "capability %s: provenance %q is not an execution id", name, id)
		}
	}
	return nil
}

// DraftLimits bound the drafts a registry keeps, so that no caller can
// fill it (each draft waits for a person, up to DefaultDraftTTL). The
// registry enforces them as it writes a draft, under the same lock or
// condition as the write: every process sees the same count.
type DraftLimits struct {
	// PerAuthor is how many drafts one author may have waiting (pending)
	// at once (DefaultDraftsPerAuthor when 0; PML_DRAFTS_PER_AUTHOR).
	PerAuthor int
	// Total is how many drafts the registry keeps, pending and closed
	// (DefaultMaxDrafts when 0; PML_DRAFTS_MAX). At the bound a new draft
	// makes room by dropping the oldest closed ones; when every one kept
	// is pending, it is refused.
	Total int
}

// The default draft limits: a person decides a few drafts a day, and an
// agent that proposes twenty without one being decided is past waiting
// for people.
const (
	DefaultDraftsPerAuthor = 20
	DefaultMaxDrafts       = 500
)

// orDefault is l with its zero limits at their defaults.
func (l DraftLimits) orDefault() DraftLimits {
	if l.PerAuthor <= 0 {
		l.PerAuthor = DefaultDraftsPerAuthor
	}
	if l.Total <= 0 {
		l.Total = DefaultMaxDrafts
	}
	return l
}

// keptDraft is what the limits read of a draft a registry keeps.
type keptDraft struct {
	ID, Author, Status string
	CreatedAt          time.Time
}

// admit decides whether d may join kept (the drafts not expired) under
// l: nil and the ids of the closed drafts to drop to make room, or the
// LIMIT_EXCEEDED that refuses it.
func admit(kept []keptDraft, d Draft, l DraftLimits) ([]string, error) {
	l = l.orDefault()
	mine := 0
	var closed []keptDraft
	for _, k := range kept {
		switch {
		case k.Status != DraftPending:
			closed = append(closed, k)
		case k.Author == d.Author:
			mine++
		}
	}
	if mine >= l.PerAuthor {
		return nil, fault.Limitf(fault.LimitDrafts, "%d drafts of this author wait for a decision already, the most one author may have (PML_DRAFTS_PER_AUTHOR=%d): "+
			"withdraw one (DELETE /capabilities/drafts/ID, or pml capability reject ID) or wait for a decision", mine, l.PerAuthor)
	}
	over := len(kept) + 1 - l.Total
	if over <= 0 {
		return nil, nil
	}
	if over > len(closed) {
		return nil, fault.Limitf(fault.LimitDrafts, "this deployment keeps %d drafts waiting for a decision, the most it keeps (PML_DRAFTS_MAX=%d): "+
			"a draft can be kept once some are decided or expire", len(kept)-len(closed), l.Total)
	}
	slices.SortFunc(closed, func(a, b keptDraft) int { return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID)) })
	evict := make([]string, over)
	for i := range evict {
		evict[i] = closed[i].ID
	}
	return evict, nil
}
