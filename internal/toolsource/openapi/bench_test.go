package openapi

import (
	"os"
	"testing"
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
