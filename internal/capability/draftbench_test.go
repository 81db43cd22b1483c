package capability_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/capability"
)

// hostileDraftCode is a draft of about 60 KiB: code that parses, as a
// hostile caller would pad it.
func hostileDraftCode(i int) string {
	return fmt.Sprintf("// %d\nreturn %q", i, strings.Repeat("x", 60<<10))
}

// BenchmarkHonestSaveAmongHostileDrafts: an honest save (a new version
// published) on the file registry, with no drafts and with 150 drafts of
// 60 KiB waiting, from as many authors (the most any quota lets stand).
// A save must not pay for the drafts: they are stored apart from what is
// published.
//
//	go test -run '^$' -bench HonestSaveAmongHostileDrafts -benchtime 50x ./internal/capability/
func BenchmarkHonestSaveAmongHostileDrafts(b *testing.B) {
	ctx := context.Background()
	for _, drafts := range []int{0, 150} {
		b.Run(fmt.Sprintf("drafts=%d", drafts), func(b *testing.B) {
			reg := capability.NewFileRegistry(filepath.Join(b.TempDir(), "caps.json"))
			defer reg.Close()
			now := time.Now().UTC()
			for i := range drafts {
				code := hostileDraftCode(i)
				d := capability.Draft{ID: capability.NewDraftID(), Proposal: capability.Proposal{Name: fmt.Sprintf("pad:p%d", i), Code: code},
					Author: fmt.Sprintf("jwt:i#hostile-%d", i), CodeHash: capability.CodeHash(code), CreatedAt: now, ExpiresAt: now.Add(time.Hour), Status: capability.DraftPending}
				if err := putDraft(ctx, reg, d); err != nil {
					b.Fatal(err)
				}
			}
			n := 0
			for b.Loop() {
				n++
				c := capability.Capability{Name: "honest:sum", Code: fmt.Sprintf("return %d", n), Publisher: "jwt:i#honest"}
				if _, err := reg.Save(ctx, c, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHonestDraftAmongHostileDrafts: an honest draft (an agent's
// save under the deployed policy, through the guard) with 150 drafts of
// 60 KiB waiting: it reads what waits (to find an equivalent draft, to
// count the limits) from files decoded once, and writes only its own.
//
//	go test -run '^$' -bench HonestDraftAmongHostileDrafts -benchtime 50x ./internal/capability/
func BenchmarkHonestDraftAmongHostileDrafts(b *testing.B) {
	ctx := context.Background()
	for _, drafts := range []int{0, 150} {
		b.Run(fmt.Sprintf("drafts=%d", drafts), func(b *testing.B) {
			reg := capability.NewFileRegistry(filepath.Join(b.TempDir(), "caps.json"))
			defer reg.Close()
			now := time.Now().UTC()
			for i := range drafts {
				code := hostileDraftCode(i)
				d := capability.Draft{ID: capability.NewDraftID(), Proposal: capability.Proposal{Name: fmt.Sprintf("pad:p%d", i), Code: code},
					Author: fmt.Sprintf("jwt:i#hostile-%d", i), CodeHash: capability.CodeHash(code), CreatedAt: now, ExpiresAt: now.Add(time.Hour), Status: capability.DraftPending}
				if err := putDraft(ctx, reg, d); err != nil {
					b.Fatal(err)
				}
			}
			g := &capability.Guard{Registry: reg, Policy: deployed, DraftLimits: capability.DraftLimits{PerAuthor: 1 << 20, Total: 1 << 20}}
			n := 0
			for b.Loop() {
				n++
				out, err := g.Submit(ctx, caller(agent), agent, capability.Proposal{Name: "honest:sum", Code: fmt.Sprintf("return %d", n)})
				if err != nil || out.Draft == nil {
					b.Fatal(out, err)
				}
			}
		})
	}
}

func putDraft(ctx context.Context, reg capability.Registry, d capability.Draft) error {
	return reg.PutDraft(ctx, d, capability.DraftLimits{})
}
