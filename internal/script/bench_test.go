package script

import (
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/analysis"
)

// The script of internal/bridge's BenchmarkExecutePlainJS (about 2 KB).
var benchJS = strings.Repeat("// a comment line that agents like to write, explaining the next step\n", 12) + `
const words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"];
const counts = {};
for (const w of words) counts[w] = (counts[w] || 0) + w.length;
const sum = await mcp.demo.add({a: 1, b: 2});
const echoed = await mcp.demo.echo({words, counts});
const total = Object.values(counts).reduce((a, b) => a + b, 0);
console.log("total", total);
return {sum, total, n: echoed.words.length};
`

// BenchmarkStaticCheck compares what the static check of plain JavaScript
// cost before TypeScript (analysis alone) with what it costs now, and what
// TypeScript costs on top.
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
	ts := strings.Replace(benchJS, "const counts = {};", "const counts: Record<string, number> = {};", 1)
	b.Run("Prepare TypeScript (auto)", func(b *testing.B) {
		for b.Loop() {
			if p, err := Prepare(ts, LangAuto); err != nil || !p.TypeScript {
				b.Fatal(err)
			}
		}
	})
}
