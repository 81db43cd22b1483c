package tsdecl

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/catalog"
	tscpath "github.com/pml-sandbox/pml/internal/testutil/tsc"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func loadTools(t *testing.T, name string) []catalog.Tool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var tools []catalog.Tool
	if err := json.Unmarshal(raw, &tools); err != nil {
		t.Fatal(err)
	}
	return tools
}

func TestDeclarationsGolden(t *testing.T) {
	got := Declarations(loadTools(t, "tools.json"))
	golden := filepath.Join("testdata", "declarations.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("Declarations differ from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

// TestDeclarationsCompile type-checks the generated declarations, and a
// script using them, with the pinned TypeScript compiler (see
// internal/testutil/tsc).
func TestDeclarationsCompile(t *testing.T) {
	tsc := tscpath.Path(t)
	dir := t.TempDir()
	script := Declarations(loadTools(t, "tools.json")) + `
async function main() {
  const s = await mcp.demo["get-sum"]({ a: 1 });
  const n: number = s.sum;
  await mcp.demo.echo();
  await mcp.fs.read_file({ path: "/x", encoding: null, tuple: ["a", 1], choice: { id: 1 }, both: { a: "x", b: 2 } });
  await mcp["my-server"]["new"]();
  const hits = await tools.search("read a file", 3);
  const calls: string[] = (await tools.list()).map(t => t.call);
  const titles = hits.map(h => h.title ?? h.name + " " + h.kind);
  console.log("found", hits.length); console.warn({ calls });
  clearTimeout(setTimeout(() => {}, 10));
  await new Promise(resolve => setTimeout(resolve, 1));
  return [n, hits[0].score, calls, titles, await tools.describe(), args];
}
`
	// Each source is checked on its own: two sets of globals would clash.
	sources := map[string]string{
		"catalog.d.ts": Declarations(loadTools(t, "tools.json")),
		"hostile.d.ts": Declarations(hostileTools()),
		"script.ts":    script,
	}
	for name, body := range sources {
		sub := filepath.Join(dir, strings.TrimSuffix(name, filepath.Ext(name)))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(sub, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := typecheck(tsc, path); err != nil {
			t.Errorf("tsc %s: %v\n%s\n--- source ---\n%s", name, err, out, body)
		}
		// Agents' projects often have the DOM library: console and
		// setTimeout must merge with its declarations, not clash.
		if out, err := tscpath.Check(tsc, path, "--lib", "es2022,dom"); err != nil {
			t.Errorf("tsc --lib es2022,dom %s: %v\n%s", name, err, out)
		}
	}

	// The declarations must also reject wrong calls, or they say nothing.
	decl := Declarations(loadTools(t, "tools.json"))
	bad := decl + `
async function main() {
  await mcp.demo["get-sum"]({ a: "one" });
  await mcp.fs.write_file({ path: "/x" });
  await mcp.fs.read_file({ path: "/x", encoding: "latin1" });
}
`
	path := filepath.Join(dir, "bad.ts")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := typecheck(tsc, path)
	if err == nil {
		t.Fatal("tsc accepted calls that break the schemas")
	}
	first := strings.Count(decl, "\n") + 3 // the line of the first bad call
	for line := first; line < first+3; line++ {
		want := fmt.Sprintf("bad.ts(%d,", line)
		if !strings.Contains(string(out), want) {
			t.Errorf("tsc did not flag %s…:\n%s", want, out)
		}
	}
}

func typecheck(tsc, path string) ([]byte, error) { return tscpath.Check(tsc, path) }

func TestSchemaTypes(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		want   string
	}{
		{"string", `{"type":"string"}`, "string"},
		{"integer", `{"type":"integer"}`, "number"},
		{"type array", `{"type":["string","null"]}`, "string | null"},
		{"nullable", `{"type":"number","nullable":true}`, "number | null"},
		{"enum", `{"enum":["a","b",1,true,null]}`, `"a" | "b" | 1 | true | null`},
		{"enum escapes", `{"enum":["a\"b","\u2028"]}`, `"a\"b" | "\u2028"`},
		{"const", `{"const":"x"}`, `"x"`},
		{"const object", `{"const":{"a":1}}`, "Record<string, unknown>"},
		{"array", `{"type":"array","items":{"type":"string"}}`, "string[]"},
		{"array of union", `{"type":"array","items":{"type":["string","number"]}}`, "Array<string | number>"},
		{"array without items", `{"type":"array"}`, "unknown[]"},
		{"tuple draft 7", `{"type":"array","items":[{"type":"string"}],"additionalItems":false}`, "[string]"},
		{"tuple open", `{"prefixItems":[{"type":"string"}]}`, "[string, ...unknown[]]"},
		{"tuple with rest", `{"prefixItems":[{"type":"string"}],"items":{"type":"number"}}`, "[string, ...number[]]"},
		{"anyOf", `{"anyOf":[{"type":"string"},{"type":"number"}]}`, "string | number"},
		{"anyOf with unconstrained member", `{"anyOf":[{"type":"string"},{}]}`, "unknown"},
		{"allOf", `{"allOf":[{"type":"string"},{"minLength":1}]}`, "string"},
		{"type and oneOf", `{"type":"string","oneOf":[{"const":"a"},{"const":"b"}]}`, `string & ("a" | "b")`},
		{"empty object", `{"type":"object"}`, "Record<string, unknown>"},
		{"closed empty object", `{"type":"object","additionalProperties":false}`, "Record<string, never>"},
		{"map", `{"type":"object","additionalProperties":{"type":"number"}}`, "Record<string, number>"},
		{"pattern properties", `{"type":"object","patternProperties":{"^x":{"type":"string"}}}`, "Record<string, unknown>"},
		{"true", `true`, "unknown"},
		{"false", `false`, "never"},
		{"empty", `{}`, "unknown"},
		{"not an object", `"string"`, "unknown"},
		{"unknown type name", `{"type":"color"}`, "unknown"},
		{"ref to defs", `{"$ref":"#/$defs/a","$defs":{"a":{"type":"string"}}}`, "string"},
		{"ref to definitions", `{"$ref":"#/definitions/a","definitions":{"a":{"type":"boolean"}}}`, "boolean"},
		{"ref with escapes", `{"$ref":"#/$defs/a~1b%20c","$defs":{"a/b c":{"type":"number"}}}`, "number"},
		{"ref into array", `{"$ref":"#/x/1","x":[{"type":"string"},{"type":"null"}]}`, "null"},
		{"ref remote", `{"$ref":"https://example.com/s.json"}`, "unknown"},
		{"ref missing", `{"$ref":"#/$defs/none"}`, "unknown"},
		{"ref to root", `{"type":"object","properties":{"self":{"$ref":"#"}}}`, "{\n  self?: {\n    self?: unknown;\n  };\n}"},
		{"ref cycle pair", `{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}}}`, "unknown"},
		{"object", `{"type":"object","properties":{"a":{"type":"string"},"b-c":{"type":"number","description":"the */ end"}},"required":["a"]}`,
			"{\n  a: string;\n  /** the *\\/ end */\n  \"b-c\"?: number;\n}"},
		{"open object", `{"properties":{"a":{"type":"string"}},"additionalProperties":{"type":"number"}}`,
			"{\n  a?: string;\n  [key: string]: unknown;\n}"},
		{"nested indentation", `{"type":"object","properties":{"o":{"type":"object","properties":{"p":{"type":"string"}}}}}`,
			"{\n  o?: {\n    p?: string;\n  };\n}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &generator{budget: nodeBudget}
			s := g.load([]byte(tc.schema))
			got := g.typeOf(s, 0, "")
			if got != tc.want {
				t.Errorf("typeOf(%s)\n got %q\nwant %q", tc.schema, got, tc.want)
			}
		})
	}
}

func TestDeclarationsShape(t *testing.T) {
	got := Declarations([]catalog.Tool{
		{Server: "s", Name: "req", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`)},
		{Server: "s", Name: "opt", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)},
		{Server: "s", Name: "none"},
		{Server: "s", Name: "bad", InputSchema: json.RawMessage(`{not json`)},
		{Server: "s", Name: "out", OutputSchema: json.RawMessage(`{"type":"array","items":{"type":"number"}}`)},
		{Server: "s", Name: "req", Description: "duplicate, dropped"},
	})
	for _, want := range []string{
		"    req(args: {\n      a: string;\n    }): Promise<unknown>;\n",
		"    opt(args?: {\n",
		"    none(args?: Record<string, unknown>): Promise<unknown>;\n",
		"    bad(args?: Record<string, unknown>): Promise<unknown>;\n",
		"    out(args?: Record<string, unknown>): Promise<number[]>;\n",
		"declare const args: unknown;\n",
		"search(query: string, limit?: number)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("declarations lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "duplicate") {
		t.Errorf("duplicate tool rendered twice:\n%s", got)
	}
	if empty := Declarations(nil); !strings.Contains(empty, "declare const mcp: {};") {
		t.Errorf("no tools: %s", empty)
	}
}

// hostileTools are schemas built to blow up a naive generator.
func hostileTools() []catalog.Tool {
	deep := strings.Repeat(`{"type":"object","properties":{"a":`, 100) + `{"type":"string"}` + strings.Repeat(`}}`, 100)
	// Each definition uses the next twice: 2^40 nodes if expanded naively.
	var defs []string
	for i := range 40 {
		defs = append(defs, fmt.Sprintf(`"d%d":{"type":"object","properties":{"l":{"$ref":"#/$defs/d%d"},"r":{"$ref":"#/$defs/d%d"}}}`, i, i+1, i+1))
	}
	defs = append(defs, `"d40":{"type":"string"}`)
	fanout := `{"$ref":"#/$defs/d0","$defs":{` + strings.Join(defs, ",") + `}}`
	var enum []string
	for i := range 100000 {
		enum = append(enum, fmt.Sprintf(`"v%d"`, i))
	}
	huge := `{"type":"object","properties":{"e":{"enum":[` + strings.Join(enum, ",") + `]}}}`
	var props []string
	for i := range 5000 {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"string"}`, i))
	}
	wide := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	cycle := `{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}}}`
	tooDeepJSON := strings.Repeat(`[`, 100000) + strings.Repeat(`]`, 100000)
	return []catalog.Tool{
		{Server: "h", Name: "deep", InputSchema: json.RawMessage(deep)},
		{Server: "h", Name: "fanout", InputSchema: json.RawMessage(fanout)},
		{Server: "h", Name: "huge_enum", InputSchema: json.RawMessage(huge)},
		{Server: "h", Name: "wide", InputSchema: json.RawMessage(wide)},
		{Server: "h", Name: "cycle", InputSchema: json.RawMessage(cycle)},
		{Server: "h", Name: "json_bomb", InputSchema: json.RawMessage(tooDeepJSON)},
		{Server: "h", Name: "doc", Description: "*/ declare const evil: 1; /*" + strings.Repeat("x", 10000)},
	}
}

func TestDeclarationsHostile(t *testing.T) {
	start := time.Now()
	got := Declarations(hostileTools())
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	if len(got) > 2<<20 {
		t.Errorf("output is %d bytes", len(got))
	}
	for _, want := range []string{
		"e?: string;",                     // the huge enum collapsed to its type
		"// … 4800 more properties",       // the wide object elided
		"json_bomb(args?: Record<string,", // undecodable schema falls back
		"next?: unknown;",                 // the cycle cut
		"deep(args?: {",                   // deep, rendered down to the cap
	} {
		if !strings.Contains(got, want) {
			t.Errorf("hostile declarations lack %q", want)
		}
	}
	if strings.Contains(got, "*/ declare const evil") {
		t.Error("description closed the JSDoc comment")
	}
	if depth := maxIndent(got); depth > (maxDepth+4)*len(indent) {
		t.Errorf("nesting rendered %d spaces deep", depth)
	}
}

func maxIndent(s string) int {
	m := 0
	for _, l := range strings.Split(s, "\n") {
		m = max(m, len(l)-len(strings.TrimLeft(l, " ")))
	}
	return m
}

func FuzzDeclarations(f *testing.F) {
	for _, s := range []string{`{"type":"object"}`, `{"$ref":"#"}`, `{"enum":[1,"a"]}`, `{"anyOf":[{"$ref":"#/anyOf/0"}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		out := Declarations([]catalog.Tool{{Server: "s", Name: "t", InputSchema: json.RawMessage(schema), OutputSchema: json.RawMessage(schema)}})
		if !strings.Contains(out, "declare const mcp") {
			t.Fatal("no mcp declaration")
		}
	})
}

func BenchmarkDeclarations(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("testdata", "tools.json"))
	if err != nil {
		b.Fatal(err)
	}
	var tools []catalog.Tool
	if err := json.Unmarshal(raw, &tools); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		Declarations(tools)
	}
}

func TestSignatureAndOfServers(t *testing.T) {
	tools := []catalog.Tool{
		{Server: "gh", Name: "repos_get", Description: "Get a repository.", InputSchema: json.RawMessage(`{"type":"object","properties":{"owner":{"type":"string"}},"required":["owner"]}`)},
		{Server: "kv", Name: "get", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
	sig := Signature(tools[0])
	for _, want := range []string{"Get a repository.", "repos_get(args: {", "owner: string;", "}): Promise<unknown>;"} {
		if !strings.Contains(sig, want) {
			t.Errorf("signature lacks %q:\n%s", want, sig)
		}
	}
	if !strings.Contains(Declarations(tools), sig[strings.Index(sig, "repos_get"):strings.Index(sig, "{")]) {
		t.Error("the signature is not the declarations' own")
	}
	for _, tc := range []struct {
		servers []string
		want    int
	}{{nil, 2}, {[]string{"gh"}, 1}, {[]string{"gh", "kv"}, 2}, {[]string{"none"}, 0}} {
		if got := OfServers(tools, tc.servers); len(got) != tc.want {
			t.Errorf("OfServers(%v): %d tools, want %d", tc.servers, len(got), tc.want)
		}
	}
	if d := Declarations(OfServers(tools, []string{"kv"})); strings.Contains(d, "repos_get") || !strings.Contains(d, "kv: {") {
		t.Errorf("kv's declarations:\n%s", d)
	}
}
