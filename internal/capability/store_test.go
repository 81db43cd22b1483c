package capability_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/executor"
	"github.com/pml-sandbox/pml/internal/fault"
)

// TestNamespaceOwnersRecordedOnce: the first publication in a namespace
// records its publisher as the owner, in both registries; allow sees the
// owners as they are at the write; an anonymous publisher owns nothing.
func TestNamespaceOwnersRecordedOnce(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		ctx := context.Background()
		if owners, err := reg.Owners(ctx, "math"); err != nil || len(owners) != 0 {
			t.Fatalf("owners of an empty namespace: %v, %v", owners, err)
		}
		var seen [][]string
		allow := func(owners []string) error { seen = append(seen, owners); return nil }
		if _, err := reg.Save(ctx, capability.Capability{Name: "math:sum", Code: "return 1", Publisher: "jwt:i#alice"}, allow); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Save(ctx, capability.Capability{Name: "math:max", Code: "return 2", Publisher: "jwt:i#bob"}, allow); err != nil {
			t.Fatal(err)
		}
		if len(seen) != 2 || len(seen[0]) != 0 || !slices.Equal(seen[1], []string{"jwt:i#alice"}) {
			t.Fatalf("allow saw %q; want none, then alice", seen)
		}
		if owners, err := reg.Owners(ctx, "math"); err != nil || !slices.Equal(owners, []string{"jwt:i#alice"}) {
			t.Fatalf("owners %v, %v; want alice alone", owners, err)
		}
		// A refusal writes nothing.
		no := errors.New("no")
		if _, err := reg.Save(ctx, capability.Capability{Name: "math:sum", Code: "return 3", Publisher: "jwt:i#eve"}, func([]string) error { return no }); !errors.Is(err, no) {
			t.Fatalf("refused save: %v", err)
		}
		if c, _ := reg.Get(ctx, "math:sum", 0); c.Version != 1 {
			t.Fatalf("a refused save wrote version %d", c.Version)
		}
		if _, err := reg.Save(ctx, capability.Capability{Name: "anon:x", Code: "return 1"}, nil); err != nil {
			t.Fatal(err)
		}
		if owners, _ := reg.Owners(ctx, "anon"); len(owners) != 0 {
			t.Fatalf("an anonymous publisher owns %v", owners)
		}
	})
}

// TestTwoPublishersRaceForANamespace: publishers that each may publish
// only into a namespace nobody else owns race for a new one; exactly one
// wins, every other sees the winner's ownership at its write and is
// refused: no lost update.
func TestTwoPublishersRaceForANamespace(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		const n = 6
		var wg sync.WaitGroup
		won := make(chan string, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				me := fmt.Sprintf("jwt:i#p%d", i)
				<-start
				_, err := reg.Save(context.Background(), capability.Capability{Name: fmt.Sprintf("race:a%d", i), Code: fmt.Sprintf("return %d", i), Publisher: me},
					func(owners []string) error {
						if len(owners) > 0 && !slices.Contains(owners, me) {
							return fault.New(fault.Forbidden, "owned by %v", owners)
						}
						return nil
					})
				switch {
				case err == nil:
					won <- me
				case fault.CodeOf(err) != fault.Forbidden:
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(won)
		var winners []string
		for w := range won {
			winners = append(winners, w)
		}
		owners, err := reg.Owners(context.Background(), "race")
		if err != nil || len(winners) != 1 || !slices.Equal(owners, winners) {
			t.Fatalf("winners %v, owners %v (%v); want one winner, the owner", winners, owners, err)
		}
	})
}

// TestEquivalentSaveAnswersTheVersion: code that differs from a version
// only in whitespace and comments is that version; a line break that
// changes what the code does (automatic semicolon insertion), another
// description, schema or pins make a new one.
func TestEquivalentSaveAnswersTheVersion(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		ctx := context.Background()
		save := func(c capability.Capability) capability.Saved {
			t.Helper()
			s, err := reg.Save(ctx, c, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		v1 := save(capability.Capability{Name: "m:add", Code: "const s = args.a + args.b; // the sum\nreturn s"})
		if v1.Existing || v1.Version != 1 || v1.CodeHash != capability.CodeHash(v1.Code) {
			t.Fatalf("first save %+v", v1)
		}
		for _, code := range []string{
			"const s=args.a+args.b\nreturn s;",
			"/* adds */\n  const   s = args.a\n    + args.b;\n\n  return s // done",
		} {
			if s := save(capability.Capability{Name: "m:add", Code: code}); !s.Existing || s.Version != 1 || s.Code != v1.Code {
				t.Fatalf("%q: %+v; want version 1 answered", code, s)
			}
		}
		for i, c := range []capability.Capability{
			{Name: "m:add", Code: "const s = args.a + args.b\nreturn\ns"}, // returns undefined
			{Name: "m:add", Code: v1.Code, Description: "adds"},
			{Name: "m:add", Code: v1.Code, Description: "adds", InputSchema: []byte(`{"type": "object"}`)},
			{Name: "m:add", Code: v1.Code, Pins: map[string]int{"m:other": 1}},
			{Name: "m:add", Code: "const s = args.a + args.b; return s + ''"},
		} {
			if s := save(c); s.Existing || s.Version != i+2 {
				t.Fatalf("save %d (%q): %+v; want a new version %d", i, c.Code, s, i+2)
			}
		}
		// The same schema, spaced otherwise, is the same version.
		if s := save(capability.Capability{Name: "m:add", Code: v1.Code, Description: "adds", InputSchema: []byte(`{ "type" : "object" }`)}); !s.Existing || s.Version != 4 {
			t.Fatalf("equivalent schema: %+v; want version 4", s)
		}
		// An older version is answered too; the head stays.
		if s := save(capability.Capability{Name: "m:add", Code: "const s = args.a + args.b; return s"}); !s.Existing || s.Version != 1 {
			t.Fatalf("back to version 1's code: %+v", s)
		}
		if head, _ := reg.Get(ctx, "m:add", 0); head.Version != 6 {
			t.Fatalf("head %d; want 6", head.Version)
		}
	})
}

// TestNormalize: what the normal form keeps and drops.
func TestNormalize(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{"return 1 // one", "return 1;", true},
		{"return  /a b/g.test('a b')", "return /a b/g.test(\"a b\")", true},
		{"const x = 4 / 2 / 1; return x", "const x=4/2/1\nreturn x", true},
		{"return `a ${ 1 } b`", "return `a ${1} b`", true},
		{"return `a  b`", "return `a b`", false},
		{"return 'a  b'", "return 'a b'", false},
		{"let a = 1\n++a\nreturn a", "let a = 1; ++a; return a", true},
		{"return\n1", "return 1", false},
		{"return x", "return y", false},
		// Not JavaScript esbuild reads: compared as written.
		{"let x: number = 1; return x", "let x: number = 1; return x", true},
		{"let x: number = 1; return x", "let x: number = 1;  return x", false},
	}
	for _, tt := range tests {
		if got := capability.Normalize(tt.a) == capability.Normalize(tt.b); got != tt.same {
			t.Errorf("%q vs %q: same %v (%q, %q)", tt.a, tt.b, got, capability.Normalize(tt.a), capability.Normalize(tt.b))
		}
	}
}

// TestVersionsAreImmutable: no write rewrites a version. DynamoDB refuses
// the registry's own version put for a version that exists; seeding a
// file registry over an existing one is refused; and a version whose
// stored code was changed behind the registry's back (by hand, in the
// file) is refused when a run reads it, not run.
func TestVersionsAreImmutable(t *testing.T) {
	ctx := context.Background()
	t.Run("dynamodb", func(t *testing.T) {
		db, table := newTable(t)
		reg := capability.NewDynamoRegistry(db, table)
		v1, err := reg.Save(ctx, capability.Capability{Name: "imm:x", Code: "return 1", Publisher: "jwt:i#alice"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		forged := v1.Capability
		forged.Code, forged.CodeHash = "return 'evil'", capability.CodeHash("return 'evil'")
		if err := capability.PutVersion(ctx, reg, forged); err == nil {
			t.Fatal("a version was rewritten")
		}
		if got, _ := reg.Get(ctx, "imm:x", 1); got.Code != "return 1" {
			t.Fatalf("version 1 is now %q", got.Code)
		}
	})
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "caps.json")
		reg := capability.NewFileRegistry(path)
		if _, err := reg.Save(ctx, capability.Capability{Name: "imm:x", Code: "return 1"}, nil); err != nil {
			t.Fatal(err)
		}
		if err := capability.SeedFile(path, []capability.Capability{{Name: "imm:x", Code: "return 'evil'"}}); fault.CodeOf(err) != fault.Conflict {
			t.Fatalf("seeding over a registry: %v", err)
		}
		// Changed by hand: the run refuses it.
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(raw), `"return 1"`, `"return 'evil'"`, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		svc, _ := inProcess(reg, executor.Options{Policy: local, Logger: slog.New(slog.DiscardHandler)}, nil)
		if r := svc.Execute(ctx, execution.Request{Code: "return await mcp.imm.x({})"}); r.OK || r.Error.Code != fault.Internal || !strings.Contains(r.Error.Message, "does not match the hash") {
			t.Fatalf("a tampered version ran: %+v %+v", r.Result, r.Error)
		}
	})
}

// TestDraftsInTheStore: a draft is kept until it expires; publishing it is
// one write with the version, once; closing it is once too.
func TestDraftsInTheStore(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		ctx := context.Background()
		now := time.Now().UTC()
		d := capability.Draft{ID: capability.NewDraftID(), Proposal: capability.Proposal{Name: "d:one", Code: "return 1", Provenance: []string{"ex_1"}},
			Author: "jwt:i#agent", CodeHash: capability.CodeHash("return 1"), CreatedAt: now, ExpiresAt: now.Add(time.Hour), Status: capability.DraftPending}
		if err := reg.PutDraft(ctx, d, capability.DraftLimits{}); err != nil {
			t.Fatal(err)
		}
		if err := reg.PutDraft(ctx, d, capability.DraftLimits{}); fault.CodeOf(err) != fault.Conflict {
			t.Fatalf("the same id twice: %v", err)
		}
		old := d
		old.ID, old.CreatedAt, old.ExpiresAt = capability.NewDraftID(), now.Add(-2*time.Hour), now.Add(-time.Hour)
		if err := reg.PutDraft(ctx, old, capability.DraftLimits{}); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.GetDraft(ctx, old.ID); fault.CodeOf(err) != fault.NotFound {
			t.Fatalf("an expired draft: %v", err)
		}
		if list, err := reg.Drafts(ctx); err != nil || len(list) != 1 || list[0].ID != d.ID || list[0].Provenance[0] != "ex_1" {
			t.Fatalf("drafts %+v %v", list, err)
		}

		// Published from the draft: the version and the draft's closing.
		c := d.Proposal.Capability()
		c.Author, c.Publisher, c.Draft = d.Author, "arn:aws:iam::1:role/ops", d.ID
		saved, err := reg.Save(ctx, c, nil)
		if err != nil || saved.Version != 1 || saved.Draft != d.ID || saved.Author != d.Author || !slices.Equal(saved.Provenance, []string{"ex_1"}) {
			t.Fatalf("published %+v %v", saved, err)
		}
		got, err := reg.GetDraft(ctx, d.ID)
		if err != nil || got.Status != capability.DraftPublished || got.Version != 1 || got.ClosedBy != c.Publisher || got.ClosedAt == nil {
			t.Fatalf("the draft after publishing: %+v %v", got, err)
		}
		if _, err := reg.Save(ctx, c, nil); fault.CodeOf(err) != fault.Conflict {
			t.Fatalf("published twice: %v", err)
		}
		if _, err := reg.CloseDraft(ctx, d.ID, capability.DraftRejected, "x", ""); fault.CodeOf(err) != fault.Conflict {
			t.Fatalf("rejected once published: %v", err)
		}
		// Another code than the draft's is not published as it.
		e := d
		e.ID = capability.NewDraftID()
		if err := reg.PutDraft(ctx, e, capability.DraftLimits{}); err != nil {
			t.Fatal(err)
		}
		swapped := capability.Capability{Name: "d:one", Code: "return 'other'", Draft: e.ID}
		if _, err := reg.Save(ctx, swapped, nil); fault.CodeOf(err) != fault.Conflict {
			t.Fatalf("other code published as a draft: %v", err)
		}
		closed, err := reg.CloseDraft(ctx, e.ID, capability.DraftRejected, "arn:aws:iam::1:role/ops", "not now")
		if err != nil || closed.Status != capability.DraftRejected || closed.Reason != "not now" {
			t.Fatalf("closed %+v %v", closed, err)
		}
		if head, _ := reg.Get(ctx, "d:one", 0); head.Version != 1 {
			t.Fatalf("head %d", head.Version)
		}
	})
}
