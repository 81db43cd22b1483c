package guest_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/guest"
)

// rawArgsHost answers every call with the bytes the script's arguments
// arrived as, in a JSON string.
type rawArgsHost struct{}

func (rawArgsHost) CallTool(ctx context.Context, c guest.Call) (json.RawMessage, error) {
	return json.Marshal(string(c.Args))
}

// The glue serialises a call's arguments itself when it can (plain
// objects, dense arrays, Latin-1 strings, numbers) and leaves the rest to
// JSON.stringify: either way the host must receive exactly what
// JSON.stringify makes of them, and a script's toJSON, getters, proxies
// and prototype changes must run (or be seen) as JSON.stringify runs them,
// once each.
func TestCallArgsAreJSONStringify(t *testing.T) {
	cases := []string{
		`({i: 1})`,
		`({a: "x", b: true, c: false, d: null, e: -0, f: 1.5, g: 1e21, h: -2147483648, i: 2147483647, j: 2147483648, k: NaN, l: Infinity, m: 5e-7})`,
		`({s: "quote \" backslash \\ newline \n tab \t cr \r bs \b ff \f nul \u0000 us \u001f del \u007f latin é ÿ"})`,
		`({s: "wide: ☃ 😀 lone \ud800 end \udfff"})`,
		`({"é": 1, "a b": 2, "": 3})`,
		`[1, "two", [3, [4, {five: 5}]], {}, []]`,
		`"a string"`, `42`, `3.25`, `true`, `null`,
		`({b: 1, a: 2, 10: "ten", 2: "two", "01": "zero-one", "4294967295": "big"})`,
		`({u: undefined, f() {}, s: Symbol("x"), n: 1})`,
		`[undefined, function () {}, Symbol("y")]`,
		`(() => { const a = [1, 2, 3]; a.length = 5; return a })()`,
		`(() => { const a = [1, 2]; a.extra = "not serialised"; return a })()`,
		`(() => { const o = {a: 1}; Object.defineProperty(o, "hidden", {value: 2, enumerable: false}); o[Symbol("s")] = 3; return o })()`,
		`(() => { const o = {a: 1, b: 2, c: 3}; delete o.b; o.d = 4; return o })()`,
		`({get g() { return "got" }, v: 1})`,
		`({toJSON() { return {replaced: true} }})`,
		`({d: new Date(0), n: new Number(3), s: new String("boxed"), b: new Boolean(false)})`,
		`new Proxy({a: 1}, {get: (t, k) => k === "a" ? "proxied" : t[k]})`,
		`Object.create({inherited: 1}, {own: {value: 2, enumerable: true}})`,
		`(() => { class P { constructor() { this.x = 1 } } return new P() })()`,
		`(() => { let o = {leaf: 1}; for (let i = 0; i < 40; i++) o = {o}; return o })()`,
		`(() => { let a = [1]; for (let i = 0; i < 40; i++) a = [a]; return a })()`,
		`({big: "x".repeat(20000)})`,
		`Array.from({length: 3000}, (_, i) => ({i, s: "v" + i}))`,
		`(() => { const o = Object.create(null); o.a = 1; return o })()`,
		`({m: new Map([[1, 2]]), r: /x/g, t: new Uint8Array(2)})`,
	}
	for _, expr := range cases {
		code := "const v = " + expr + ";\nconst want = JSON.stringify(v);\nconst got = await mcp.demo.echo(v);\n" +
			"if (got !== want) throw new Error('sent ' + got + ' for ' + want);\nreturn got.length"
		r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: rawArgsHost{}})
		if !r.OK {
			t.Errorf("%s: %s", expr, r.Err)
		}
	}
}

// A toJSON, a getter or a proxy trap on the way runs as often as
// JSON.stringify would run it (once), whatever path the glue takes; and a
// toJSON put on Object.prototype or Array.prototype is honoured.
func TestCallArgsRunScriptCodeOnce(t *testing.T) {
	cases := []struct{ setup, arg string }{
		{`let n = 0; const v = {a: 1, get g() { n++; return 2 }};`, `v`},
		{`let n = 0; const v = {a: [1, {toJSON() { n++; return "t" }}]};`, `v`},
		{`let n = 0; const v = new Proxy({a: 1}, {ownKeys(t) { n++; return Reflect.ownKeys(t) }});`, `v`},
		{`let n = 0; Object.prototype.toJSON = function () { n++; return "proto" }; const v = {a: 1};`, `v`},
		{`let n = 0; Array.prototype.toJSON = function () { n++; return "array" }; const v = {a: [1, 2]};`, `v`},
		{`let n = 0; Object.defineProperty(Object.prototype, "toJSON", {get() { n++; return undefined }, configurable: true}); const v = {a: 1};`, `v`},
	}
	for _, c := range cases {
		code := c.setup + "\nconst got = await mcp.demo.echo(" + c.arg + ");\nif (n !== 1) throw new Error('ran ' + n + ' times');\nreturn got"
		r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: rawArgsHost{}})
		if !r.OK {
			t.Errorf("%s: %s", c.setup, r.Err)
			continue
		}
		if strings.Contains(string(r.Value), "undefined") {
			t.Errorf("%s: %s", c.setup, r.Value)
		}
	}
}

// The glue keeps the shapes of the argument objects it writes (and the
// empty object's) alive from one call to the next; whatever a script then
// does to its arguments, a new object of the same keys is a plain one,
// and each call's arguments are written as JSON.stringify writes them.
func TestArgsShapesKept(t *testing.T) {
	code := `
function describe(v) {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  return (Object.getPrototypeOf(v) === Object.prototype ? "O" : "?") + (Object.isExtensible(v) ? "" : "!") + "{" +
    Reflect.ownKeys(v).map((k) => {
      const d = Object.getOwnPropertyDescriptor(v, k);
      return String(k) + (d.writable ? "w" : "") + (d.enumerable ? "e" : "") + (d.configurable ? "c" : "") + ("get" in d ? "get" : "") + ":" + describe(d.value);
    }).join(",") + "}";
}
const mutations = [
  (a) => { a.extra = 1 },
  (a) => { delete a.text },
  (a) => { Object.freeze(a) },
  (a) => { Object.setPrototypeOf(a, {inherited: 1}) },
  (a) => { Object.defineProperty(a, "text", {enumerable: false}) },
  (a) => { Object.defineProperty(a, "n", {get() { return 1 }}) },
  (a) => { a[Symbol("s")] = 1; Object.preventExtensions(a) },
  (a) => { a.sub.more = true },
];
const seen = [];
for (let i = 0; i < 24; i++) {
  const a = {text: "one two three", n: i, sub: {}};
  if (i % 3 === 1) a[Symbol.iterator] = 1;
  const v = await mcp.demo.echo(a);
  const want = JSON.stringify(a);
  if (JSON.stringify(v) !== want) throw new Error("call " + i + ": " + JSON.stringify(v) + " vs " + want);
  mutations[i % mutations.length](a);
  const b = {text: "x", n: 0, sub: {}};
  const d = describe(b);
  if (d !== 'O{textwec:"x",nwec:0,subwec:O{}}') throw new Error("call " + i + ": a new literal is " + d);
  seen.push(a);
  const e = {};
  if (describe(e) !== "O{}") throw new Error("call " + i + ": {} is " + describe(e));
}
return seen.map((a) => Object.keys(a).join("+")).join(" ")`
	r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: guest.DemoHost{}})
	if !r.OK {
		t.Fatal(r.Err)
	}
	var got string
	if err := json.Unmarshal(r.Value, &got); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("text+n+sub+extra n+sub text+n+sub text+n+sub n+sub text+n+sub text+n+sub text+n+sub ", 3)
	if got != strings.TrimSpace(want) {
		t.Fatalf("keys after the mutations: %q, want %q", got, want)
	}
}
