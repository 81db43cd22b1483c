package learn

import (
	"slices"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/js/analysis"
	"github.com/pml-sandbox/pml/internal/redact"
	"github.com/pml-sandbox/pml/internal/trace"
)

func read(t *testing.T, code string) *Shape {
	t.Helper()
	p, err := analysis.Parse(code)
	if err != nil {
		t.Fatalf("parse %q: %v", code, err)
	}
	return Read(p, nil)
}

// TestFingerprintSame: what the fingerprint ignores.
func TestFingerprintSame(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"whitespace and comments",
			`const r = await mcp.demo.kv_get({key: "n"}); return r`,
			"// read it\nconst r =\n  await mcp.demo.kv_get( { key : \"n\" } ) /* the value */ ;\n\n return r"},
		{"local names",
			`const r = await mcp.demo.kv_get({key: "n"}); return r`,
			`const value = await mcp.demo.kv_get({key: "n"}); return value`},
		{"string literals",
			`await mcp.demo.kv_set({key: "a", value: "x"}); return 1`,
			`await mcp.demo.kv_set({key: 'other', value: "y"}); return 2`},
		{"template literal without substitutions",
			"await mcp.demo.echo({text: `hello`})",
			"await mcp.demo.echo({text: `bye`})"},
		{"functions and parameters",
			`function f(a) { return mcp.demo.add({a: a, b: 1}) } return f(2)`,
			`function g(x) { return mcp.demo.add({a: x, b: 5}) } return g(7)`},
		{"a key named like a local",
			`const a = 1; return mcp.demo.add({a: a, b: 1})`,
			`const z = 1; return mcp.demo.add({a: z, b: 1})`},
		{"shorthand properties, same names",
			`const a = 1; const {q} = args; return mcp.demo.add({a, b: q})`,
			`const a = 5; const {q} = args; return mcp.demo.add({a, b: q})`},
		{"negative numbers",
			`return mcp.demo.add({a: -1, b: 2})`,
			`return mcp.demo.add({a: -40, b: 0x10})`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := read(t, tc.a), read(t, tc.b)
			if a == nil || b == nil {
				t.Fatalf("no shape: %v %v", a, b)
			}
			if a.Fingerprint != b.Fingerprint {
				t.Errorf("fingerprints differ: %s %s", a.Fingerprint, b.Fingerprint)
			}
		})
	}
}

// TestFingerprintDiffers: what the fingerprint keeps.
func TestFingerprintDiffers(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"another tool", `return mcp.demo.kv_get({key: "n"})`, `return mcp.demo.kv_set({key: "n"})`},
		{"another server", `return mcp.demo.kv_get({key: "n"})`, `return mcp.other.kv_get({key: "n"})`},
		{"another property", `return mcp.demo.kv_get({key: "n"})`, `return mcp.demo.kv_get({name: "n"})`},
		{"shorthand property names", `const city = 1; return mcp.demo.f({city})`, `const town = 1; return mcp.demo.f({town})`},
		{"shorthand destructuring", `const {city} = await mcp.demo.g({}); return city`, `const {town} = await mcp.demo.g({}); return town`},
		{"a return broken by a line", "await mcp.demo.f({}); return 1", "await mcp.demo.f({}); return\n1"},
		{"a global", `return mcp.demo.f({a: Math.max(1, 2)})`, `return mcp.demo.f({a: Math.min(1, 2)})`},
		{"an args key", `return mcp.demo.f({a: args.x})`, `return mcp.demo.f({a: args.y})`},
		{"an index", `return mcp.demo.f({a: args["x"]})`, `return mcp.demo.f({a: args["y"]})`},
		{"a tool named by index", `return mcp["demo"]["f"]({})`, `return mcp["demo"]["g"]({})`},
		{"string against number", `return mcp.demo.f({a: "1"})`, `return mcp.demo.f({a: 1})`},
		{"an operator", `return mcp.demo.f({a: 1 + 2})`, `return mcp.demo.f({a: 1 - 2})`},
		{"a statement", `await mcp.demo.f({}); return 1`, `await mcp.demo.f({}); await mcp.demo.f({}); return 1`},
		{"a regular expression", `return mcp.demo.f({a: /x+/.test("y")})`, `return mcp.demo.f({a: /z+/.test("y")})`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := read(t, tc.a), read(t, tc.b)
			if a == nil || b == nil {
				t.Fatalf("no shape: %v %v", a, b)
			}
			if a.Fingerprint == b.Fingerprint {
				t.Errorf("same fingerprint %s for different programs", a.Fingerprint)
			}
		})
	}
}

// TestLiftedLiterals: which literals are lifted, their values, where they
// stood, and the template.
func TestLiftedLiterals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   string
		values []string // "" for withheld
		names  []string
		tpl    string // the template with holes shown as #
		keys   []string
		whole  bool
	}{
		{
			name:   "object properties and a variable",
			code:   `const city = "Paris"; return mcp.weather.get({city, days: 3, unit: 'c'})`,
			values: []string{"Paris", "3", "c"}, names: []string{"city", "days", "unit"},
			tpl: `const city = #; return mcp.weather.get({city, days: #, unit: #})`,
		},
		{
			name:   "escapes are decoded",
			code:   `return mcp.demo.echo({text: "a\"b\u0041"})`,
			values: []string{`a"bA`}, names: []string{"text"},
			tpl: `return mcp.demo.echo({text: #})`,
		},
		{
			name:   "property names, indexes and regular expressions stay",
			code:   `const o = {"k": 1}; return mcp.demo.f({a: o["k"], b: /a/.source, c: [1][0]})`,
			values: []string{"1", "1"}, names: []string{"k", ""},
			tpl: `const o = {"k": #}; return mcp.demo.f({a: o["k"], b: /a/.source, c: [#][0]})`,
		},
		{
			name:   "call arguments are named after the call",
			code:   `return mcp.demo.f({a: encodeURIComponent("x y")})`,
			values: []string{"x y"}, names: []string{"encodeURIComponent"},
			tpl: `return mcp.demo.f({a: encodeURIComponent(#)})`,
		},
		{
			name: "args keys",
			code: `const {a, b: bee} = args; return mcp.demo.f({x: args.c, y: args["d"], a, bee})`,
			tpl:  `const {a, b: bee} = args; return mcp.demo.f({x: args.c, y: args["d"], a, bee})`,
			keys: []string{"a", "b", "c", "d"},
		},
		{
			name:  "args as a whole",
			code:  `return mcp.demo.f(args)`,
			tpl:   `return mcp.demo.f(args)`,
			whole: true,
		},
		{
			// A script may declare its own args (the input stays
			// globalThis.args): what it reads then is its own, not the
			// input's keys.
			name:   "an args of its own",
			code:   `const args = {q: "x"}; return mcp.demo.f({q: args.q})`,
			values: []string{"x"},
			tpl:    `const args = {q: #}; return mcp.demo.f({q: args.q})`,
		},
		{
			name:   "comments stay in the template",
			code:   "// sum two numbers\nreturn mcp.demo.add({a: 1, b: 2})",
			values: []string{"1", "2"}, names: []string{"a", "b"},
			tpl: "// sum two numbers\nreturn mcp.demo.add({a: #, b: #})",
		},
		{
			name:   "a template literal without substitutions",
			code:   "return mcp.demo.echo({text: `hi`}) + `${1}x`",
			values: []string{"hi", "1"}, names: []string{"text", ""},
			tpl: "return mcp.demo.echo({text: #}) + `${#}x`",
		},
		{
			name:   "BigInt literals are not lifted",
			code:   `return mcp.demo.f({a: 10n, b: 2})`,
			values: []string{"2"}, names: []string{"b"},
			tpl: `return mcp.demo.f({a: 10n, b: #})`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := read(t, tc.code)
			if sh == nil {
				t.Fatal("no shape")
			}
			var values []string
			for _, l := range sh.Literals {
				values = append(values, l.Value)
			}
			if !slices.Equal(values, tc.values) {
				t.Errorf("values %q, want %q", values, tc.values)
			}
			if len(tc.names) > 0 && !slices.Equal(sh.Template().Names, tc.names) {
				t.Errorf("names %q, want %q", sh.Template().Names, tc.names)
			}
			if got := showHoles(sh.Template()); got != tc.tpl {
				t.Errorf("template %q, want %q", got, tc.tpl)
			}
			if !slices.Equal(sh.ArgsKeys, tc.keys) {
				t.Errorf("args keys %q, want %q", sh.ArgsKeys, tc.keys)
			}
			if sh.ArgsWhole != tc.whole {
				t.Errorf("args whole %v, want %v", sh.ArgsWhole, tc.whole)
			}
		})
	}
}

func showHoles(t *trace.Template) string {
	var b strings.Builder
	last := 0
	for _, h := range t.Holes {
		b.WriteString(t.Code[last:h])
		b.WriteString("#")
		last = h
	}
	b.WriteString(t.Code[last:])
	return b.String()
}

// TestSecretsNeverKept: a secret-looking literal is withheld; a secret
// where no literal can be lifted stops the learning; a secret in a
// comment is masked.
func TestSecretsNeverKept(t *testing.T) {
	const key = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	known := redact.New("hunter2-deployment-header")
	for _, tc := range []struct {
		name     string
		code     string
		learned  bool // a shape at all
		template bool // with a template
		withheld []string
	}{
		{"a literal", `return mcp.pay.charge({key: "` + key + `", amount: 5})`, true, true, []string{trace.WithheldSecret, ""}},
		{"a JWT", `return mcp.api.get({auth: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig"})`, true, true, []string{trace.WithheldSecret}},
		{"a random token", `return mcp.api.get({t: "q8Zr2LkP0vXy7MnB4cTd"})`, true, true, []string{trace.WithheldSecret}},
		{"a URL with credentials", `return mcp.api.get({url: "https://bob:pa55word@example.com/x"})`, true, true, []string{trace.WithheldSecret}},
		{"a known secret", `return mcp.api.get({h: "hunter2-deployment-header"})`, true, true, []string{trace.WithheldSecret}},
		{"a long number", `return mcp.pay.charge({card: 4111111111111111})`, true, true, []string{trace.WithheldSecret}},
		{"a long value", `return mcp.api.get({q: "` + strings.Repeat("word ", 20) + `"})`, true, true, []string{trace.WithheldLong}},
		{"ordinary words", `return mcp.api.get({q: "the quick brown fox", city: "Paris", id: "user_profile_v2"})`, true, true, []string{"", "", ""}},
		{"a date and a path", `return mcp.api.get({d: "2026-11-25T10:00:00Z", p: "/home/user/data/file2024.txt"})`, true, true, []string{"", ""}},
		// Where the fingerprint keeps a string, a secret in it keeps the
		// template from ever being made (an args key, kept as it is,
		// keeps the pattern from being made).
		{"in a property name", `return mcp.api.get({"` + key + `": 1})`, true, false, []string{""}},
		{"in an args key", `return mcp.api.get({a: args["` + key + `"]})`, false, false, nil},
		{"in a template with substitutions", "return mcp.api.get({a: `Bearer " + key + "${args.x}`})", true, false, nil},
		{"in a regular expression", `return mcp.api.get({a: /` + key + `/.test("x")})`, true, false, []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := analysis.Parse(tc.code)
			if err != nil {
				t.Fatal(err)
			}
			sh := Read(p, known)
			if (sh != nil) != tc.learned {
				t.Fatalf("learned %v, want %v", sh != nil, tc.learned)
			}
			if sh == nil {
				return
			}
			tpl := sh.Template()
			if (tpl != nil) != tc.template {
				t.Fatalf("template %v, want one: %v", tpl != nil, tc.template)
			}
			var withheld []string
			for _, l := range sh.Literals {
				withheld = append(withheld, l.Withheld)
				if l.Withheld != "" && l.Value != "" {
					t.Errorf("withheld literal kept its value %q", l.Value)
				}
				if l.Withheld == trace.WithheldSecret && l.Hash != "" {
					t.Errorf("a secret kept a hash")
				}
			}
			if !slices.Equal(withheld, tc.withheld) {
				t.Errorf("withheld %q, want %q", withheld, tc.withheld)
			}
			for _, secret := range []string{key, "pa55word", "hunter2", "4111111111111111", "eyJhbGci", "q8Zr2LkP0vXy7MnB4cTd"} {
				if tpl != nil && strings.Contains(tpl.Code, secret) {
					t.Errorf("template holds %q: %s", secret, tpl.Code)
				}
				for _, l := range sh.Literals {
					if strings.Contains(l.Value, secret) {
						t.Errorf("a literal holds %q", secret)
					}
				}
			}
		})
	}

	t.Run("a comment", func(t *testing.T) {
		sh := read(t, "// key: "+key+"\n// token q8Zr2LkP0vXy7MnB4cTd\nreturn mcp.pay.charge({amount: 5})")
		if sh == nil {
			t.Fatal("no shape")
		}
		for _, s := range append([]string{sh.Template().Code}, sh.Template().Comments...) {
			if strings.Contains(s, key) || strings.Contains(s, "q8Zr2LkP0vXy7MnB4cTd") {
				t.Errorf("comment kept a secret: %q", s)
			}
		}
		if !strings.Contains(sh.Template().Code, redact.Mask) {
			t.Errorf("comment not masked: %q", sh.Template().Code)
		}
	})
}

// TestNotLearned: code the learning loop leaves alone.
func TestNotLearned(t *testing.T) {
	many := "return mcp.demo.f([" + strings.Repeat("1,", MaxLiterals+1) + "])"
	long := "return mcp.demo.f({})" + strings.Repeat(" ", MaxCodeBytes)
	for name, code := range map[string]string{"too many literals": many, "too long": long} {
		if sh := read(t, code); sh != nil {
			t.Errorf("%s: learned", name)
		}
	}
	if Read(nil, nil) != nil {
		t.Error("a nil tree learned")
	}
}

func TestLooksSecret(t *testing.T) {
	for _, tc := range []struct {
		s      string
		secret bool
	}{
		{"AKIAIOSFODNN7EXAMPLE", true},
		{"ghp_16C7e42F292c6912E7710c838347Ae178B4a", true},
		{"xoxb-123456789012-abcdefghij", true},
		{"AIzaSyD-1234567890abcdefghijklmnopqrstu", true},
		{"Bearer abcdefghijklmnop", true},
		{"-----BEGIN RSA PRIVATE KEY-----", true},
		{"https://api.example.com/x?api_key=abcdef123", true},
		{"password=hunter22", true},
		{"d41d8cd98f00b204e9800998ecf8427e", true}, // 32 hex digits
		{"Zx81vQm2Lp9TtR4wYb6N", true},
		{"hello world", false},
		{"internationalization", false},
		{"SomeLongCamelCaseIdentifierName", false},
		{"550e8400", false},
		{"report-2026-11-25.pdf", false},
		{"user_profile_v2_backup", false},
		{"https://example.com/docs/getting-started", false},
		{"abc", false},
		{"backup2024report", false},
		{"Version12Release34", false},
		{"ABC123DEF456GHI789", false},
		{"a94a8fe5ccb19ba61c4c0873d391e987982fbbd3", true},
	} {
		if got := LooksSecret(tc.s, nil); got != tc.secret {
			t.Errorf("LooksSecret(%q) = %v, want %v (entropy %.2f)", tc.s, got, tc.secret, entropy(tc.s))
		}
	}
}
