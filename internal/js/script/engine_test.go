package script

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/execution"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
	"github.com/pml-sandbox/pml/internal/js/prescan"
	"github.com/pml-sandbox/pml/internal/testutil/installer"
)

// The host reads every script before the engine does, and must never refuse
// one the engine reads within the bounds: these tests hold the whole
// host-side preparation (the pre-scan, the analysis parser, esbuild) to
// QuickJS's own parser, run in the guest (guest.Engine.Parse).

// The engine these tests share, made on first use (a fuzz worker makes its
// own, from machine code compiled once for all of them) and closed by
// TestMain.
var (
	engineMu sync.Mutex
	engine   *guest.Engine
)

func testEngine(tb testing.TB) *guest.Engine {
	tb.Helper()
	engineMu.Lock()
	defer engineMu.Unlock()
	if engine == nil {
		e, err := guest.New(context.Background(), guest.Options{CacheDir: filepath.Join(os.TempDir(), "pml-script-test-wazero")})
		if err != nil {
			tb.Fatal(err)
		}
		engine = e
	}
	return engine
}

func TestMain(m *testing.M) {
	code := m.Run()
	if engine != nil {
		if err := engine.Close(context.Background()); err != nil {
			code = 1
		}
	}
	os.Exit(code)
}

// parseLimits are the engine's largest: code as large as any request may
// send, parsed with the deepest stack any request may have.
var parseLimits = guest.Limits{CodeBytes: guest.DefaultMaxLimits().CodeBytes, StackBytes: guest.DefaultMaxLimits().StackBytes, Timeout: time.Minute}

// TestDefaultCodeBytes: the size Prepare bounds code by when the caller
// names none is the engine's default, which the package cannot ask the
// engine for without linking it into every front end.
func TestDefaultCodeBytes(t *testing.T) {
	if got, want := execution.DefaultCodeBytes, guest.DefaultLimits().CodeBytes; got != want {
		t.Fatalf("execution.DefaultCodeBytes = %d, the engine's default is %d", got, want)
	}
}

// disagreement returns why the host's handling of code, which the engine
// parses (as a script body, within parseLimits), is wrong, or "": the
// preparation refuses it as JavaScript (as code in no language, or as
// JavaScript) for anything but a bound, or the pre-scan says it declares
// names again (once is all it takes here; many would keep it from
// esbuild and refuse it as TypeScript). A destructuring assignment may repeat __proto__ keys, which
// the pre-scan counts (it cannot tell such a pattern from an object
// literal soon enough; esbuild's own reading of it is cheap): that
// report alone is allowed.
func disagreement(code string) string {
	l := Limits{CodeBytes: parseLimits.CodeBytes}
	for _, lang := range []string{LangJS, LangAuto} {
		_, err := PrepareWithLimits(code, lang, l)
		if fe := fault.As(err); fe != nil && fe.Code != fault.LimitExceeded {
			return "PrepareWithLimits(" + lang + ") refuses it: " + fe.Error()
		}
	}
	rep, ferr := prescan.Scan(code, prescan.Limits{MaxBytes: l.CodeBytes})
	if ferr == nil && rep.Repeats > 0 && !strings.Contains(code, "__proto__") {
		return "the pre-scan says it declares a name again: " + rep.Repeated.Error()
	}
	return ""
}

// fuzzTokens are the pieces FuzzPrepareAgreesWithEngine builds code from:
// every keyword and reserved word, in the places where one is a name (after
// `.`, get and set, as keys, as class members, in patterns) and where it is
// not, with the brackets and operators around them.
var fuzzTokens = append(strings.Fields(
	"await break case catch class const continue debugger default delete do else enum export extends false "+
		"finally for function if import in instanceof new null return super switch this throw true try typeof "+
		"var void while with yield let static implements interface package private protected public get set async "+
		"of as accessor constructor __proto__ #a a b"),
	" ", "\n", ";", ",", ".", "?.", ":", "=", "=>", "(", ")", "[", "]", "{", "}", "*", "...", "+", "/", "'s'",
	"`t`", "1", "@d", "#a in b", "({", "})", "class A {", "x = {", "const {", "} = o", "let [", "] = o",
	"get ", "set ", "static ", "async ", "*", "//c\n", "/*c*/", "<!--", "-->", "\u2028")

func fuzzCode(sel []byte) string {
	var b strings.Builder
	for i, c := range sel {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(fuzzTokens[int(c)%len(fuzzTokens)])
	}
	return b.String()
}

// FuzzPrepareAgreesWithEngine: code the engine parses as a script body is
// never refused by the host as JavaScript but for a bound, and the
// pre-scan's count of names declared again never flags it. The input is
// text and a sequence of tokens (fuzzTokens), joined; the engine's verdict
// is pml_parse's, compile only.
func FuzzPrepareAgreesWithEngine(f *testing.F) {
	for _, s := range []string{
		"var o = {" + keywordAccessorsJS + "}; return Object.keys(o).length",
		"return { set await(v) {}, get await() {}, set break(v) {}, get break() {} }",
		"x = {const: 1, a: 1, a: 2}",
		"class A { static const() {} get class() {} #a; m() { return #a in this } }",
		"const {[k]: v, if: w} = o",
		"var let = [0]; return let[0]",
		"}); x(); (function(){",
		"<!-- c\n--> c\nreturn 1",
		"({__proto__: a, __proto__: b} = o)",
	} {
		f.Add(s, []byte(nil))
	}
	f.Add("", []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, text string, sel []byte) {
		code := text + fuzzCode(sel)
		if len(code) > 4<<10 {
			return // short code is what the tokens make; long code the corpus test reads
		}
		why := disagreement(code)
		if why == "" {
			return
		}
		// The host refuses or flags it: the engine must refuse it too (or
		// find it past its bounds).
		if perr := testEngine(t).Parse(context.Background(), code, parseLimits); perr == nil {
			t.Fatalf("the engine parses %q, but %s", code, why)
		}
	})
}

// keywordAccessorsJS is test262's language/reserved-words/
// ident-name-keyword-accessor.js's object: a getter and a setter named by
// every keyword and reserved word.
var keywordAccessorsJS = func() string {
	var b strings.Builder
	for _, k := range strings.Fields("await break case catch class const continue debugger default delete do else enum export " +
		"extends false finally for function if import in instanceof new null return super switch this throw true try typeof " +
		"var void while with yield let static implements interface package private protected public") {
		b.WriteString("set " + k + "(v) { this._" + k + " = v }, get " + k + "() { return '" + k + "' },\n")
	}
	return b.String()
}()

// TestKeywordAccessors: test262's keyword accessors object, refused once as
// `SyntaxError: "get" has already been declared`, is prepared and runs.
func TestKeywordAccessors(t *testing.T) {
	code := "var o = {" + keywordAccessorsJS + "}; return Object.keys(o).length"
	for _, lang := range []string{LangAuto, LangJS, LangTS} {
		p, err := Prepare(code, lang)
		if err != nil {
			t.Fatalf("Prepare(%s) = %v", lang, err)
		}
		r := testEngine(t).Run(context.Background(), guest.Request{Code: p.Code})
		if !r.OK || string(r.Value) != "46" {
			t.Fatalf("%s: ran as %s %v, want 46 keys", lang, r.Value, r.Err)
		}
	}
}

// corpora are the npm packages the tests install: the MCP SDK and its
// dependencies, the reference MCP server, the TypeScript compiler and the
// conformance suite, each by the script that installs it (its printed path
// is somewhere under the package directory to read).
var corpora = []struct{ script, under string }{
	{"mcp-sdk.sh", "."},
	{"server-everything.sh", "../../../.."},
	{"typescript.sh", "../../.."},
	{"conformance-suite.sh", "../../../.."},
}

// TestCorpusAgreesWithEngine runs every .js file of the npm packages the
// tests install (each distinct file once) through the host's preparation
// and, wherever the host refuses or the pre-scan flags one, through the
// engine's parser: no file the engine parses may be refused, as
// FuzzPrepareAgreesWithEngine asks. Files over the largest code size a
// request may send are past the bounds and skipped. Long: not under -short
// (the race detector's run).
func TestCorpusAgreesWithEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the installed npm packages' JavaScript (tens of MB)")
	}
	var dirs []string
	for _, c := range corpora {
		p, err := installer.Run(c.script)
		if err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal(err)
			}
			t.Skipf("corpus unavailable (%v): install node and npm", err)
		}
		dirs = append(dirs, filepath.Clean(filepath.Join(p, c.under)))
	}
	start := time.Now()
	e := testEngine(t)
	seen := map[[32]byte]bool{}
	var files, bytes, past, checked int
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".js") || !d.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			if seen[sum] {
				return nil
			}
			seen[sum] = true
			files++
			bytes += len(b)
			if len(b) > parseLimits.CodeBytes {
				past++
				return nil
			}
			code := string(b)
			why := disagreement(code)
			if why == "" {
				return nil
			}
			checked++
			if perr := e.Parse(context.Background(), code, parseLimits); perr == nil {
				t.Errorf("%s: the engine parses it, but %s", path, why)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 1000 {
		t.Fatalf("read %d files under %v; the installed packages hold thousands", files, dirs)
	}
	t.Logf("%d distinct .js files (%.1f MB) in %v; %d past the code-size cap, %d refused or flagged (checked with the engine)",
		files, float64(bytes)/1e6, time.Since(start).Round(time.Millisecond), past, checked)
}

// TestKeywordsAsNames puts every keyword and reserved word in every place
// a name goes in JavaScript (a key, a method, an accessor, a class member
// with each modifier, a pattern's key, a property), followed by code a
// confused reading would take for declarations: whatever the engine parses
// must pass, as FuzzPrepareAgreesWithEngine asks.
func TestKeywordsAsNames(t *testing.T) {
	keywords := strings.Fields("await break case catch class const continue debugger default delete do else enum export " +
		"extends false finally for function if import in instanceof new null return super switch this throw true try typeof " +
		"var void while with yield let static implements interface package private protected public get set async of as " +
		"accessor constructor")
	templates := []string{
		"x = {K: 1, a: 1, a: 2}",
		"x = {K, a: 1, a: 2}",
		"x = {K() {}, a: 1, a: 2}",
		"x = {get K() {}, set K(v) {}, a: 1, a: 2}",
		"x = {async K() {}, async *K() {}, *K() {}, a: 1, a: 2}",
		"x = {'K': 1, [K]: 2, a: 1, a: 2}",
		"class A { K() {} a() {} a() {} }",
		"class A { K\n a() {}\n a() {} }",
		"class A { K = 1; a() {} a() {} }",
		"class A { static K() {} a() {} a() {} }",
		"class A { static K\n a() {} }",
		"class A { get K() {} set K(v) {} a() {} }",
		"class A { async K() {} *K() {} async *K() {} }",
		"class A { #a; K() { return #a in this } static K = 1; b = #a in this; c = #a in this }",
		"const {K: a} = o; const {K: b} = o",
		"let {K: [a], K: {b}} = o; let c, d",
		"({K: a, K: b} = o)",
		"x = o.K + o?.K; let a; let b",
		"x = K; let a; let b",
		"var K = 1; let a; let b",
		"x = K[0]; let a; let b",
		"x = (K) => K; let a; let b",
		"label: for (;;) { break label } K; let a; let b",
	}
	e := testEngine(t)
	for _, tpl := range templates {
		for _, k := range keywords {
			code := strings.ReplaceAll(tpl, "K", k)
			why := disagreement(code)
			if why == "" {
				continue
			}
			if perr := e.Parse(context.Background(), code, parseLimits); perr == nil {
				t.Errorf("the engine parses %q, but %s", code, why)
			}
		}
	}
}
