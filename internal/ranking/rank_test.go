package ranking

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/catalog"
	"github.com/pml-sandbox/pml/internal/learn"
	"github.com/pml-sandbox/pml/internal/trace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runs is a learn.Store that only counts capability runs.
type runs struct {
	learn.Store
	counts map[string]learn.Runs
	reads  atomic.Int64
	err    error
}

func (r *runs) Runs(context.Context) (map[string]learn.Runs, error) {
	r.reads.Add(1)
	return r.counts, r.err
}

var (
	search    = catalog.Tool{Server: "web", Name: "search", Description: "Search the web for pages matching a query", Kind: trace.KindMCP}
	summarize = catalog.Tool{Server: "text", Name: "summarize", Description: "Summarize a text in a few sentences", Kind: trace.KindMCP}
	read      = catalog.Tool{Server: "files", Name: "read", Description: "Read a file from the disk", Kind: trace.KindMCP}
)

const briefCode = `const pages = await mcp.web.search({q: args.topic});
return await mcp.text.summarize({text: pages.map(p => p.text).join("\n")});`

func capTool(name, desc string) catalog.Tool {
	ns, act, _ := strings.Cut(name, ":")
	return catalog.Tool{Server: ns, Name: act, Description: desc, Kind: trace.KindCapability}
}

func names(hits []catalog.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Tool.FullName()
	}
	return out
}

func TestCapabilityAboveTheToolsItCalls(t *testing.T) {
	ctx := context.Background()
	caps := []capability.Capability{
		{Name: "research:brief", ID: "cap:research:brief@1", Code: briefCode, Description: "A brief on a topic", Calls: 40},
		{Name: "research:flaky", ID: "cap:research:flaky@1", Code: briefCode, Description: "A brief on a topic", Calls: 40},
		{Name: "notes:open", ID: "cap:notes:open@1", Code: `return mcp.files.read({path: args.p})`, Description: "Open a note"},
	}
	store := &runs{counts: map[string]learn.Runs{"research:brief": {OK: 30, Failed: 1}, "research:flaky": {OK: 2, Failed: 30}}}
	r := &Ranker{
		Capabilities: func(context.Context) ([]capability.Capability, error) { return caps, nil },
		Store:        store,
		Related: func(_ context.Context, tool string) (map[string]int64, error) {
			if tool == "web:search" {
				return map[string]int64{"text:summarize": 500}, nil
			}
			return nil, nil
		},
	}
	defer r.Close(ctx)
	tools := []catalog.Tool{search, summarize, read, capTool("research:brief", "A brief on a topic"), capTool("research:flaky", "A brief on a topic"), capTool("notes:open", "Open a note")}
	r.Refresh(ctx)

	for _, tc := range []struct {
		query string
		above [][2]string // each first ranks above the second
	}{
		// Both tools match: the capability calling them comes first, the
		// one whose runs fail below the tools.
		{"search the web and summarize the text", [][2]string{
			{"research:brief", "web:search"}, {"research:brief", "text:summarize"},
			{"web:search", "research:flaky"}, {"text:summarize", "research:flaky"}}},
		// One tool matches: the tool first, the capability after it.
		{"search the web", [][2]string{{"web:search", "research:brief"}}},
		{"read a file", [][2]string{{"files:read", "notes:open"}}},
		// The capability's own words still count.
		{"brief", [][2]string{{"research:brief", "research:flaky"}}},
	} {
		got := names(r.Search(ctx, tools, tc.query, 0))
		for _, p := range tc.above {
			i, j := slices.Index(got, p[0]), slices.Index(got, p[1])
			if i < 0 || j < 0 || i > j {
				t.Errorf("%q: %v, want %s above %s", tc.query, got, p[0], p[1])
			}
		}
	}

	// Without evidence (nothing read yet, or a store that fails), the
	// graph alone still puts the capability first.
	bare := &Ranker{Capabilities: r.Capabilities, Store: &runs{err: errors.New("down")}, Log: slog.New(slog.DiscardHandler)}
	defer bare.Close(ctx)
	bare.Refresh(ctx)
	if got := names(bare.Search(ctx, tools, "search the web and summarize the text", 1)); got[0] != "research:brief" && got[0] != "research:flaky" {
		t.Errorf("without evidence: %v", got)
	}

	// The co-occurrence graph raises a capability whose tools are seen
	// together.
	lonely := &Ranker{Capabilities: r.Capabilities, Store: store}
	defer lonely.Close(ctx)
	lonely.Refresh(ctx)
	score := func(r *Ranker) float64 {
		for _, h := range r.Search(ctx, tools, "search the web and summarize the text", 0) {
			if h.Tool.FullName() == "research:brief" {
				return h.Score
			}
		}
		return 0
	}
	if with, without := score(r), score(lonely); with <= without {
		t.Errorf("co-occurrence did not raise the capability: %v with, %v without", with, without)
	}

	// Evidence shows in the descriptions (the d.ts, tools.describe).
	ann := r.Annotate(ctx, tools)
	if d := ann[3].Description; !strings.Contains(d, "called 40 times") || !strings.Contains(d, "30 of 31 recent runs succeeded") ||
		!strings.Contains(d, "calls web:search, then text:summarize") {
		t.Errorf("annotated: %q", d)
	}
	if ann[0].Description != search.Description {
		t.Errorf("an MCP tool was annotated: %q", ann[0].Description)
	}
}

// TestSearchNeverWaitsForTheStore: a search reads the evidence it has
// and refreshes it in the background, at most once per interval.
func TestSearchNeverWaitsForTheStore(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	store := &blocking{release: release}
	r := &Ranker{Capabilities: func(context.Context) ([]capability.Capability, error) { return nil, nil }, Store: store}
	for range 5 {
		r.Search(ctx, []catalog.Tool{search}, "search", 3) // returns while the read blocks
	}
	close(release)
	r.Close(ctx)
	if n := store.reads.Load(); n != 1 {
		t.Errorf("%d reads for 5 searches within the interval, want 1", n)
	}
}

type blocking struct {
	learn.Store
	release chan struct{}
	reads   atomic.Int64
}

func (b *blocking) Runs(context.Context) (map[string]learn.Runs, error) {
	b.reads.Add(1)
	<-b.release
	return nil, nil
}
