package capability_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/testutil/dynamolocal"
)

// TestDraftQuotaPerAuthor: one author may keep at most
// DefaultDraftsPerAuthor drafts waiting; the next is refused
// LIMIT_EXCEEDED with what bounds it and how to make room, another
// author's is kept, and a draft withdrawn makes room again.
func TestDraftQuotaPerAuthor(t *testing.T) {
	registries(t, func(t *testing.T, reg capability.Registry) {
		ctx := context.Background()
		g := &capability.Guard{Registry: reg, Policy: deployed}
		var first string
		for i := range capability.DefaultDraftsPerAuthor {
			out, err := g.Submit(ctx, caller(agent), agent, capability.Proposal{Name: fmt.Sprintf("q:a%d", i), Code: fmt.Sprintf("return %d", i)})
			if err != nil || out.Draft == nil {
				t.Fatalf("draft %d: %+v %v", i, out, err)
			}
			if first == "" {
				first = out.Draft.ID
			}
		}
		over := capability.Proposal{Name: "q:over", Code: "return 'over'"}
		_, err := g.Submit(ctx, caller(agent), agent, over)
		if fault.CodeOf(err) != fault.LimitExceeded || !strings.Contains(err.Error(), "PML_DRAFTS_PER_AUTHOR") || !strings.Contains(err.Error(), "withdraw") {
			t.Fatalf("draft past the author's quota: %v", err)
		}
		if out, err := g.Submit(ctx, caller(trusted), trusted, capability.Proposal{Name: "q:other", Code: "return 0"}); err != nil || out.Status == "" {
			t.Fatalf("another author's draft: %+v %v", out, err)
		}
		if _, err := g.RejectDraft(ctx, caller(agent), first, "withdrawn"); err != nil {
			t.Fatal(err)
		}
		if out, err := g.Submit(ctx, caller(agent), agent, over); err != nil || out.Draft == nil {
			t.Fatalf("after withdrawing one: %+v %v", out, err)
		}
	})
}

// TestDraftsKeptApartFromWhatIsPublished: on the file registry a draft's
// code is not in the file every save rewrites, and a save leaves the
// drafts alone.
func TestDraftsKeptApartFromWhatIsPublished(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "caps.json")
	g := &capability.Guard{Registry: capability.NewFileRegistry(path), Policy: deployed}
	out, err := g.Submit(ctx, caller(agent), agent, capability.Proposal{Name: "q:pad", Code: "return 'DRAFT-MARKER'"})
	if err != nil || out.Draft == nil {
		t.Fatalf("%+v %v", out, err)
	}
	if _, err := g.Submit(ctx, caller(ops), ops, capability.Proposal{Name: "q:honest", Code: "return 1"}); err != nil {
		t.Fatal(err)
	}
	defs, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(defs), "DRAFT-MARKER") || strings.Contains(string(defs), out.Draft.ID) {
		t.Fatalf("the published file holds the draft: %s", defs)
	}
	if d, err := g.Draft(ctx, agent, out.Draft.ID); err != nil || !strings.Contains(d.Code, "DRAFT-MARKER") {
		t.Fatalf("the draft after a save: %+v %v", d, err)
	}
}

// twoRegistries runs f with two registries on the same storage, as two
// processes (pml commands, Lambda containers) have them.
func twoRegistries(t *testing.T, f func(t *testing.T, a, b capability.Registry)) {
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "caps.json")
		f(t, capability.NewFileRegistry(path), capability.NewFileRegistry(path))
	})
	t.Run("dynamodb", func(t *testing.T) {
		db := dynamolocal.Start(t).Client()
		table := dynamolocal.TableName(t)
		if err := capability.CreateTable(context.Background(), db, table); err != nil {
			t.Fatal(err)
		}
		f(t, capability.NewDynamoRegistry(db, table), capability.NewDynamoRegistry(db, table))
	})
}

func draftOf(author string, i int) capability.Draft {
	now := time.Now().UTC()
	code := fmt.Sprintf("return %d", i)
	return capability.Draft{ID: capability.NewDraftID(), Proposal: capability.Proposal{Name: fmt.Sprintf("q:d%d", i), Code: code},
		Author: author, CodeHash: capability.CodeHash(code), CreatedAt: now.Add(time.Duration(i) * time.Millisecond), ExpiresAt: now.Add(time.Hour), Status: capability.DraftPending}
}

// TestDraftLimitsHoldAcrossProcesses: the limits count what every
// process sees. Twelve authors racing from two registries on the same
// storage, under a total of five, keep exactly five drafts; one more is
// refused while all five wait, and is kept once one is closed, the
// closed one making room (it is gone, the others stay).
func TestDraftLimitsHoldAcrossProcesses(t *testing.T) {
	twoRegistries(t, func(t *testing.T, a, b capability.Registry) {
		ctx := context.Background()
		limits := capability.DraftLimits{PerAuthor: 2, Total: 5}
		var wg sync.WaitGroup
		errs := make([]error, 12)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reg := a
				if i%2 == 1 {
					reg = b
				}
				errs[i] = reg.PutDraft(ctx, draftOf(fmt.Sprintf("jwt:i#author-%d", i), i), limits)
			}()
		}
		wg.Wait()
		kept := 0
		for _, err := range errs {
			switch {
			case err == nil:
				kept++
			case fault.CodeOf(err) != fault.LimitExceeded || !strings.Contains(err.Error(), "PML_DRAFTS_MAX"):
				t.Errorf("a refusal that is not the limit: %v", err)
			}
		}
		list, err := b.Drafts(ctx)
		if err != nil || kept != 5 || len(list) != 5 {
			t.Fatalf("kept %d, listed %d (%v); want 5 under a total of 5", kept, len(list), err)
		}
		late := draftOf("jwt:i#late", 99)
		if err := a.PutDraft(ctx, late, limits); fault.CodeOf(err) != fault.LimitExceeded {
			t.Fatalf("a sixth while five wait: %v", err)
		}
		if _, err := b.CloseDraft(ctx, list[0].ID, capability.DraftWithdrawn, list[0].Author, ""); err != nil {
			t.Fatal(err)
		}
		if err := a.PutDraft(ctx, late, limits); err != nil {
			t.Fatalf("once one is closed: %v", err)
		}
		after, err := b.Drafts(ctx)
		if err != nil || len(after) != 5 || slices.ContainsFunc(after, func(d capability.Draft) bool { return d.ID == list[0].ID }) {
			t.Fatalf("after: %d drafts, the closed one kept: %v", len(after), err)
		}
		// Per author: two waiting, the third refused by name.
		for i := range 2 {
			if err := b.PutDraft(ctx, draftOf("jwt:i#busy", 200+i), capability.DraftLimits{PerAuthor: 2, Total: 100}); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.PutDraft(ctx, draftOf("jwt:i#busy", 300), capability.DraftLimits{PerAuthor: 2, Total: 100}); fault.CodeOf(err) != fault.LimitExceeded || !strings.Contains(err.Error(), "PML_DRAFTS_PER_AUTHOR=2") {
			t.Fatalf("a third draft of one author: %v", err)
		}
	})
}
