package script

import (
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/analysis"
)

// benchJS is a script of the size agents send (about 2 KB): comments, a
// few statements, two tool calls.
var benchJS = strings.Repeat("// agents explain each step in a comment line of about this length\n", 12) + `
const items = Array.from({length: 20}, (_, i) => ({id: i, name: "item " + i}));
const byParity = {even: 0, odd: 0};
for (const it of items) byParity[it.id % 2 ? "odd" : "even"] += it.name.length;
const stored = await mcp.demo.kv_set({key: "items", value: items});
const read = await mcp.demo.kv_get({key: "items"});
console.info("parity", byParity);
return {stored: stored.stored, n: read.value.length, byParity};
`

// BenchmarkStaticCheck compares what the static check of plain JavaScript
// cost before TypeScript (analysis alone) with what it costs now, and what
// TypeScript costs on top. internal/bridge's BenchmarkExecutePlainJS
// measures the whole service path.
func BenchmarkStaticCheck(b *testing.B) {
	b.Run("analysis only (before)", func(b *testing.B) {
		for b.Loop() {
			if _, err := analysis.MCPReferences(benchJS); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Prepare JavaScript", func(b *testing.B) {
		for b.Loop() {
			if _, err := Prepare(benchJS, LangAuto); err != nil {
				b.Fatal(err)
			}
		}
	})
	ts := strings.Replace(benchJS, "const byParity = {", "const byParity: Record<string, number> = {", 1)
	b.Run("Prepare TypeScript (auto)", func(b *testing.B) {
		for b.Loop() {
			if p, err := Prepare(ts, LangAuto); err != nil || !p.TypeScript {
				b.Fatal(err)
			}
		}
	})
}
