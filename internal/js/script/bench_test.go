package script

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/js/prescan"
	"github.com/pml-sandbox/pml/internal/testutil/cputime"
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
// TypeScript costs on top. internal/executor's BenchmarkExecutePlainJS
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

// worstShapes are the shapes whose cost in esbuild grows fastest with
// their nesting (measured: shadowed arrow parameters in the renamer,
// comparisons retried as type arguments, comma sequences simplified
// recursively, indentation of nested statements; block comments measured
// back to their line's start, string literals folded), one level each.
var worstShapes = []struct{ name, pre, open, mid, close string }{
	{"arrow chain", "x=", "a=>", "a", ""},
	{"arrow blocks", "x=", "(a)=>{", "", "}"},
	{"functions", "", "(function(a){", "", "})"},
	{"classes", "", "(class{m(a){", "", "}})"},
	{"let blocks", "", "{let a=1;", "", "}"},
	{"blocks", "", "{", "a;a;a;a;a;a;a;a;", "}"},
	{"if chain", "", "if(a)", "a;", ""},
	{"comparisons", "x=", "a<", "a", ""},
	{"shifts", "x=", "a<<", "a", ""},
	{"commas", "x=", "a,", "a", ""},
	{"not", "x=", "!", "a", ""},
	{"ternaries", "x=", "a?b:", "c", ""},
	{"parentheses", "x=", "(", "1", ")"},
	{"member chain", "x=a", ".a", "", ""},
	{"type arguments", "var y:A", "<A", "", ">"},
	{"type assertions", "x=", "<A>", "a", ""},
	{"comments on a line", "x=", "/*c*/a+", "a", ""},
	{"string folds", "x=", "'a'+", "'a'", ""},
	{"template folds", "x=", "`a${1}`+", "1", ""},
}

// worstCase returns TypeScript of at most size bytes made of copies of a
// shape nested as deep as the pre-scan admits, as many as it admits (the
// size, or the count of scopes), one a line.
func worstCase(pre, open, mid, close string, size int) string {
	head := "let t: number = 1;\n" // TypeScript: esbuild strips it
	unit := func(n int) string {
		return pre + strings.Repeat(open, n) + mid + strings.Repeat(close, n) + ";\n"
	}
	ok := func(code string) bool { return prescan.Check(head+code, prescan.Limits{MaxBytes: size}) == nil }
	depth := sort.Search(1024, func(n int) bool { return !ok(unit(n + 1)) })
	u := unit(depth)
	copies := sort.Search(size/len(u)+1, func(n int) bool { return !ok(strings.Repeat(u, n+1)) })
	return head + strings.Repeat(u, copies)
}

// BenchmarkPrepareWorstCase is the cost of the parsers on the worst code
// the pre-scan admits: each costly shape as deep as it admits, repeated up
// to the default code size (256 KiB) or the scope count, through Prepare
// (the pre-scan, esbuild, the analysis of its output). Run with
// -benchtime=3x; B/op is what esbuild and the analysis allocate.
//
// PML_BENCH_CODE_BYTES sets another code size (the engine's cap is 1 MiB).
func BenchmarkPrepareWorstCase(b *testing.B) {
	size := guest.DefaultLimits().CodeBytes
	if v, err := strconv.Atoi(os.Getenv("PML_BENCH_CODE_BYTES")); err == nil && v > 0 {
		size = v
	}
	for _, s := range worstShapes {
		code := worstCase(s.pre, s.open, s.mid, s.close, size)
		depth, scopes, _ := prescan.Measure(code)
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(code)))
			cpu0 := cputime.Process()
			for b.Loop() {
				_, err := PrepareWithLimits(code, LangAuto, Limits{CodeBytes: size})
				if fe := fault.As(err); fe != nil && fe.Code != fault.ScriptError && fe.Code != fault.LimitExceeded {
					b.Fatal(err)
				}
			}
			// CPU time (the process's, collector included) is what the
			// work costs on a machine others load too.
			b.ReportMetric(float64((cputime.Process()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(depth), "depth")
			b.ReportMetric(float64(scopes), "scopes")
			b.ReportMetric(float64(len(code)), "bytes")
		})
	}
}
