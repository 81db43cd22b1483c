package openapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pml-sandbox/pml/internal/testutil/octokit"
	"github.com/pml-sandbox/pml/internal/toolsource"
)

// BenchmarkParse: a document to tools, the work done once per process.
func BenchmarkParse(b *testing.B) {
	shop, err := os.ReadFile("testdata/shop.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		doc  []byte
	}{
		{"shop.yaml", shop},
		{"ring-4000x50", []byte(nestedCycle(4000, 50))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.doc)))
			for b.Loop() {
				// The ring is refused (no operation can be a tool); its
				// cost is what a hostile document gets.
				_, _ = Parse(bc.doc, nil, "http://x.test")
			}
		})
	}
}

// BenchmarkLargeCatalog: GitHub's REST document (1,222 operations, 13 MB)
// loaded by a Set as a process's start does, parsed and read back from
// the cache (issue 43).
func BenchmarkLargeCatalog(b *testing.B) {
	doc := octokit.Document(b)
	for _, bc := range []struct {
		name string
		dir  string
	}{
		{"parse", ""},
		{"cached", filepath.Join(b.TempDir(), "cache")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := Config{Config: toolsource.Config{Name: "gh", Type: Type}, Spec: doc, BaseURL: "https://api.github.com"}
			load := func() {
				set, err := toolsource.New(context.Background(), toolsource.NewRegistry(Kind{CacheDir: bc.dir}), []toolsource.Spec{cfg},
					toolsource.Env{Logger: quietLogger()})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := set.Tools(context.Background()); err != nil {
					b.Fatal(err)
				}
				_ = set.Close()
			}
			if bc.dir != "" {
				load() // the entry the loop reads back
			}
			b.ReportAllocs()
			for b.Loop() {
				load()
			}
		})
	}
}
