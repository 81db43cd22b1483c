package guest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pml-sandbox/pml/internal/guest"
)

// answerHost answers every call with the same bytes, valid JSON or not.
type answerHost struct{ answer json.RawMessage }

func (h answerHost) CallTool(context.Context, guest.Call) (json.RawMessage, error) {
	return h.answer, nil
}

// answerScript receives the answer of a call and JSON.parse of the same
// text (args) and fails unless the two are the same value in every way a
// script can tell: type, Object.is, arithmetic on numbers, prototype,
// Array.isArray, extensibility, own keys in order and each property's
// descriptor; or, for text that is not JSON, unless both throw the same
// error. It returns what the call gave: {ok, json} or {ok, name, message}.
const answerScript = `
const text = args;
let want, got;
globalThis.watching = true;
try { want = {ok: true, v: JSON.parse(text)} } catch (e) { want = {ok: false, e} }
try { got = {ok: true, v: await mcp.demo.echo()} } catch (e) { got = {ok: false, e} }
globalThis.watching = false;
let diffs = "", ndiffs = 0;
const note = (s) => { diffs += s + "\n"; ndiffs++ };
const show = (x) => typeof x === "number" && Object.is(x, -0) ? "-0" : String(x);
function same(a, b, path) {
  if (ndiffs > 20) return;
  if (typeof a !== typeof b) return note(path + ": typeof " + typeof a + " vs " + typeof b);
  if (a === null || b === null || typeof a !== "object") {
    if (!Object.is(a, b)) note(path + ": " + show(a) + " vs " + show(b));
    if (typeof a === "number") {
      const ops = [x => -x, x => x + 1, x => x - 1, x => x * 3, x => x / 7, x => x % 5, x => x * -1,
        x => x | 0, x => x >>> 0, x => x ** 2, x => String(x), x => x.toFixed(2), x => Number.isInteger(x),
        x => Number.isSafeInteger(x), x => Math.abs(x), x => 1 / x, x => x === 0, x => [x].indexOf(0)];
      ops.forEach((op, i) => { if (!Object.is(op(a), op(b))) note(path + ": op " + i + " on " + show(a) + ": " + show(op(a)) + " vs " + show(op(b))) });
    }
    return;
  }
  const pa = Object.getPrototypeOf(a), pb = Object.getPrototypeOf(b);
  if (pa !== pb) note(path + ": prototypes differ");
  if (pa !== (Array.isArray(a) ? Array.prototype : Object.prototype)) note(path + ": not a plain object or array");
  if (Array.isArray(a) !== Array.isArray(b)) note(path + ": Array.isArray differs");
  if (Object.isExtensible(a) !== Object.isExtensible(b)) note(path + ": extensibility differs");
  const ka = Reflect.ownKeys(a), kb = Reflect.ownKeys(b);
  if (JSON.stringify(ka) !== JSON.stringify(kb)) note(path + ": own keys " + JSON.stringify(ka) + " vs " + JSON.stringify(kb));
  if (JSON.stringify(Object.keys(a)) !== JSON.stringify(Object.keys(b))) note(path + ": Object.keys differ");
  for (const k of ka) {
    const da = Object.getOwnPropertyDescriptor(a, k), db = Object.getOwnPropertyDescriptor(b, k);
    if (!db) { note(path + ": no " + String(k)); continue }
    for (const f of ["writable", "enumerable", "configurable"])
      if (da[f] !== db[f]) note(path + "[" + String(k) + "]: " + f + " " + da[f] + " vs " + db[f]);
    if ("get" in da || "get" in db) note(path + "[" + String(k) + "]: an accessor");
    same(da.value, db.value, path + "[" + JSON.stringify(k) + "]");
  }
}
if (got.ok !== want.ok) {
  note("call " + (got.ok ? "fulfilled" : "rejected: " + got.e) + ", JSON.parse " + (want.ok ? "returned" : "threw: " + want.e));
} else if (got.ok) {
  if (JSON.stringify(got.v) !== JSON.stringify(want.v)) note("JSON.stringify: " + JSON.stringify(got.v) + " vs " + JSON.stringify(want.v));
  same(got.v, want.v, "$");
} else {
  if (!(got.e instanceof SyntaxError)) note("rejected with " + got.e);
  if (got.e.name !== want.e.name || got.e.message !== want.e.message) note("error " + got.e + " vs " + want.e);
}
if (globalThis.setterHits) note("a setter on a prototype ran " + globalThis.setterHits + " times");
if (ndiffs) throw new Error(diffs);
return got.ok ? {ok: true, json: JSON.stringify(got.v)} : {ok: false, name: got.e.name, message: got.e.message};
`

type answerOutcome struct {
	OK      bool   `json:"ok"`
	JSON    string `json:"json"`
	Name    string `json:"name"`
	Message string `json:"message"`
}

// runAnswer runs answerScript with text as the call's answer (setup runs
// first) and returns what the call gave the script.
func runAnswer(t testing.TB, setup, text string) answerOutcome {
	t.Helper()
	args, err := json.Marshal(text)
	if err != nil {
		t.Fatal(err)
	}
	r := engine.Run(context.Background(), guest.Request{
		Code:   setup + "\n" + answerScript,
		Args:   args,
		Tools:  guest.DemoTools(),
		Host:   answerHost{json.RawMessage(text)},
		Limits: guest.Limits{Timeout: 30 * time.Second},
	})
	if !r.OK {
		t.Fatalf("answer %.200q: %s", text, r.Err)
	}
	var o answerOutcome
	if err := json.Unmarshal(r.Value, &o); err != nil {
		t.Fatalf("answer %.200q: result %s: %v", text, r.Value, err)
	}
	return o
}

// manyKeys is an object of n keys, k0 to k(n-1), with values from base.
func manyKeys(n, base int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, base+i)
	}
	b.WriteByte('}')
	return b.String()
}

func nested(open, leaf, close string, depth int) string {
	return strings.Repeat(open, depth) + leaf + strings.Repeat(close, depth)
}

// answerCases are tool answers the glue reads itself (small plain JSON)
// and answers it leaves to JS_ParseJSON, side by side.
var answerCases = []struct {
	name, text string
	want       string // JSON.stringify of the value; "" to check only that it matches JSON.parse
	fails      bool   // not JSON: the call rejects with a SyntaxError
}{
	{name: "typical", text: `{"words":3,"lines":1,"chars":13}`, want: `{"words":3,"lines":1,"chars":13}`},
	{name: "nested", text: `{"a":{"b":[1,2,{"c":[true,false,null]}],"d":{}},"e":[[],[[]],{"f":"g"}]}`},
	{name: "empty object", text: `{}`, want: `{}`},
	{name: "empty array", text: `[]`, want: `[]`},
	{name: "scalars at top", text: `3`, want: `3`},
	{name: "string at top", text: `"just a string"`, want: `"just a string"`},
	{name: "true", text: `true`, want: `true`},
	{name: "false", text: ` false `, want: `false`},
	{name: "null", text: `null`, want: `null`},
	{name: "duplicate keys", text: `{"a":1,"b":2,"a":3}`, want: `{"a":3,"b":2}`},
	{name: "duplicate key with another type", text: `{"a":{"x":1},"b":[],"a":[1,2],"b":"s"}`, want: `{"a":[1,2],"b":"s"}`},
	{name: "__proto__ key", text: `{"__proto__":{"polluted":1},"a":1}`, want: `{"__proto__":{"polluted":1},"a":1}`},
	{name: "__proto__ null", text: `{"__proto__":null}`, want: `{"__proto__":null}`},
	{name: "constructor and toString keys", text: `{"constructor":1,"toString":"x","hasOwnProperty":null,"length":2,"then":3}`},
	{name: "digit keys", text: `{"b":1,"0":"zero","10":"ten","007":"bond","a":2,"1":"one","4294967295":"big","4294967294":"max index","-1":"minus","1.5":"frac"}`},
	{name: "digit keys, 2^31", text: `{"2147483647":1,"2147483648":2,"2147483646":3}`},
	{name: "empty key", text: `{"":1,"a":{"":[]}}`, want: `{"":1,"a":{"":[]}}`},
	{name: "ints", text: `[0,1,-1,9,10,99,2147483647,2147483648,-2147483648,-2147483649,4294967295,4294967296]`,
		want: `[0,1,-1,9,10,99,2147483647,2147483648,-2147483648,-2147483649,4294967295,4294967296]`},
	{name: "15 digits", text: `[999999999999999,-999999999999999,100000000000000,123456789012345]`,
		want: `[999999999999999,-999999999999999,100000000000000,123456789012345]`},
	{name: "16 digits", text: `[1000000000000000,-9999999999999999,1234567890123456]`},
	{name: "2^53 and 2^53+1", text: `[9007199254740992,9007199254740993,-9007199254740993]`},
	{name: "long ints", text: `[123456789012345678901234567890,1e400]`},
	{name: "minus zero", text: `-0`, want: `0`},
	{name: "minus zero inside", text: `{"z":-0,"a":[-0,0,-0]}`, want: `{"z":0,"a":[0,0,0]}`},
	{name: "zero", text: `0`, want: `0`},
	{name: "fractions", text: `[0.5,-0.5,1.0,-0.0,3.14159,0.1,100.000]`},
	{name: "exponents", text: `[1e2,1E2,1e+2,1e-2,-1e0,0e0,2.5e-3,1e21,1e-7]`},
	{name: "not JSON numbers", text: `[-01]`},
	{name: "strings", text: `{"s":"printable ASCII: !#$%&'()*+,-./0123456789:;<=>?@AZ[]^_` + "`" + `az{|}~ end"}`},
	{name: "strings with escapes", text: `["a\"b","c\\d","e\/f","\b\f\n\r\t","\u0041\u00e9\u2603","\ud83d\ude00","\ud800","x\u0000y"]`},
	{name: "escaped key", text: `{"a\u0062":1,"\n":2}`},
	{name: "unicode", text: `{"é":"ü","snow":"☃","emoji":"😀","mixed":"abc☃def"}`},
	{name: "DEL", text: `["` + "\x7f" + `"]`},
	{name: "whitespace everywhere", text: " \t\r\n{ \"a\" \n:\r [ 1 ,\t2 , { } , [ ] ] ,\"b\":\ttrue ,\n\"c\" : null , \"d\" : \"s\" } \r\n\t", want: `{"a":[1,2,{},[]],"b":true,"c":null,"d":"s"}`},
	{name: "depth at the cap", text: nested(`[`, `1`, `]`, 32)},
	{name: "depth at the cap, objects", text: nested(`{"a":`, `0`, `}`, 32)},
	{name: "depth past the cap", text: nested(`[`, `1`, `]`, 33)},
	{name: "depth far past the cap", text: nested(`{"a":[`, `{}`, `]}`, 100)},
	{name: "answer of 4095 bytes", text: `{"s":"` + strings.Repeat("x", 4095-8) + `"}`},
	{name: "answer of 4096 bytes", text: `{"s":"` + strings.Repeat("x", 4096-8) + `"}`},
	{name: "answer past 4 KiB", text: `[` + strings.TrimSuffix(strings.Repeat(`{"i":12345,"name":"item","ok":true},`, 200), ",") + `]`},
	{name: "same keys twice", text: `[{"a":1,"b":"x"},{"a":2,"b":"y"},{"b":3,"a":4},{"a":5},{"a":6,"b":7,"c":8}]`,
		want: `[{"a":1,"b":"x"},{"a":2,"b":"y"},{"b":3,"a":4},{"a":5},{"a":6,"b":7,"c":8}]`},
	{name: "same keys, then repeated", text: `[{"a":1,"b":2},{"a":3,"a":4},{"a":5,"b":6,"a":7},{"a":8,"b":9}]`,
		want: `[{"a":1,"b":2},{"a":4},{"a":7,"b":6},{"a":8,"b":9}]`},
	{name: "same digit keys twice", text: `[{"0":1,"1a":2,"x":3},{"0":4,"1a":5,"x":6}]`},
	{name: "same empty key twice", text: `[{"":1},{"":2},{"":3,"a":4}]`, want: `[{"":1},{"":2},{"":3,"a":4}]`},
	{name: "same keys nested", text: `{"a":{"a":{"a":1}},"b":{"a":{"a":2}}}`, want: `{"a":{"a":{"a":1}},"b":{"a":{"a":2}}}`},
	{name: "16 keys twice", text: `[` + manyKeys(16, 0) + `,` + manyKeys(16, 1) + `]`},
	{name: "17 keys twice", text: `[` + manyKeys(17, 0) + `,` + manyKeys(17, 1) + `]`},
	{name: "40 keys, a repeat past 16", text: `[` + manyKeys(40, 0) + `,{"k0":1,"k1":2,"k2":3,"k3":4,"k4":5,"k5":6,"k6":7,"k7":8,"k8":9,"k9":10,"k10":11,"k11":12,"k12":13,"k13":14,"k14":15,"k15":16,"k16":17,"k3":18,"k17":[{"k0":1}]}]`},
	{name: "long keys twice", text: `[{"` + strings.Repeat("k", 64) + `":1,"` + strings.Repeat("l", 65) + `":2},{"` + strings.Repeat("k", 64) + `":3,"` + strings.Repeat("l", 65) + `":4}]`},
	{name: "same keys past the cache", text: `[` + strings.Repeat(`{"a":1},{"b":1},{"c":1},{"d":1},{"e":1},{"f":1},{"g":1},{"h":1},{"i":1},{"j":1},`, 3) + `{"a":2}]`},
	{name: "17 keys, the 17th value left to JS_ParseJSON", text: strings.TrimSuffix(manyKeys(16, 0), "}") + `,"k16":"a\u0041"}`},
	{name: "18 keys, the 18th value left to JS_ParseJSON", text: strings.TrimSuffix(manyKeys(17, 0), "}") + `,"k17":1.5}`},
	{name: "17 keys, the 17th value malformed", text: strings.TrimSuffix(manyKeys(16, 0), "}") + `,"k16":[1,]}`, fails: true},
	{name: "18 keys, the 18th value malformed", text: strings.TrimSuffix(manyKeys(17, 0), "}") + `,"k17":tru}`, fails: true},
	{name: "trailing comma", text: `{"a":1,}`, fails: true},
	{name: "trailing comma in array", text: `[1,2,]`, fails: true},
	{name: "unterminated object", text: `{"a":1`, fails: true},
	{name: "unterminated string", text: `{"a":"xyz`, fails: true},
	{name: "unterminated array", text: `[1,[2`, fails: true},
	{name: "trailing garbage", text: `{"a":1} x`, fails: true},
	{name: "two values", text: `1 2`, fails: true},
	{name: "missing colon", text: `{"a" 1}`, fails: true},
	{name: "missing value", text: `{"a":}`, fails: true},
	{name: "single quotes", text: `{'a':1}`, fails: true},
	{name: "bare key", text: `{a:1}`, fails: true},
	{name: "leading zero", text: `[01]`, fails: true},
	{name: "leading plus", text: `+1`, fails: true},
	{name: "truex", text: `[truex]`, fails: true},
	{name: "nul", text: `[tru`, fails: true},
	{name: "raw newline in string", text: "[\"a\nb\"]", fails: true},
	{name: "lone minus", text: `-`, fails: true},
	{name: "whitespace only", text: ` `, fails: true},
	{name: "NaN", text: `NaN`, fails: true},
	{name: "comment", text: `[1/*c*/]`, fails: true},
	{name: "vertical tab", text: "[1,\v2]", fails: true},
	{name: "embedded NUL", text: "[1,\x002]", fails: true},
}

// A tool's answer reaches the script as JSON.parse of its text would make
// it, whichever reader builds it: the glue's own for small plain JSON, or
// JS_ParseJSON; and text that is not JSON rejects the call with the
// SyntaxError JSON.parse throws.
func TestToolAnswerIsJSONParse(t *testing.T) {
	for _, c := range answerCases {
		t.Run(c.name, func(t *testing.T) {
			o := runAnswer(t, "", c.text)
			if o.OK == c.fails {
				t.Fatalf("ok = %v (%s %s), want %v", o.OK, o.Name, o.Message, !c.fails)
			}
			if c.fails && o.Name != "SyntaxError" {
				t.Fatalf("rejected with %s: %s, want a SyntaxError", o.Name, o.Message)
			}
			if c.want != "" && o.JSON != c.want {
				t.Fatalf("got %s, want %s", o.JSON, c.want)
			}
		})
	}
}

// JSON.parse defines properties: a setter a script put on Object.prototype
// or Array.prototype never runs for an answer's keys, and a frozen
// prototype does not stop them.
func TestToolAnswerDefinesProperties(t *testing.T) {
	for _, setup := range []string{
		`globalThis.setterHits = 0; for (const k of ["a", "b", "0", "__proto__"]) Object.defineProperty(Object.prototype, k, {set() { if (globalThis.watching) globalThis.setterHits++ }, get() { return "inherited" }, configurable: true});` +
			` Object.defineProperty(Array.prototype, "0", {set() { if (globalThis.watching) globalThis.setterHits++ }, configurable: true});`,
		`Object.freeze(Object.prototype); Object.freeze(Array.prototype);`,
	} {
		for _, text := range []string{`{"a":1,"b":[1,2],"0":3,"__proto__":4}`, `[[1],{"a":{"b":2}}]`} {
			o := runAnswer(t, setup, text)
			if !o.OK {
				t.Fatalf("%s: rejected: %s", text, o.Message)
			}
		}
	}
}

// FuzzAnswer hands arbitrary text to a script as a tool's answer: what
// the script receives is JSON.parse of that text, or the call rejects with
// the error JSON.parse throws. (Text that is not UTF-8 cannot reach
// JSON.parse unchanged, and the glue's own reader takes only ASCII; it is
// skipped.)
func FuzzAnswer(f *testing.F) {
	for _, c := range answerCases {
		f.Add([]byte(c.text))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		if len(text) == 0 || !utf8.Valid(text) {
			t.Skip()
		}
		o := runAnswer(t, "", string(text))
		if json.Valid(text) && !o.OK {
			t.Fatalf("valid JSON %.200q rejected: %s: %s", text, o.Name, o.Message)
		}
		// The same answer again, after the first was changed every way
		// a kept shape must not feel: the glue may make the second's
		// objects with shapes kept from the first.
		if again := runAnswer(t, answerFirstMutated, string(text)); again != o {
			t.Fatalf("answer %.200q: %+v after a first answer was changed, %+v alone", text, again, o)
		}
	})
}

// answerFirstMutated, run before answerScript, takes the same answer once
// and changes each object in it: a property added and one deleted, then
// frozen.
const answerFirstMutated = `{
  const change = (v, d) => {
    if (v === null || typeof v !== "object" || d > 40) return;
    for (const k of Object.keys(v)) change(v[k], d + 1);
    const keys = Object.keys(v);
    if (keys.length) delete v[keys[0]];
    v.added = 1;
    Object.freeze(v);
  };
  try { change(await mcp.demo.echo(), 0) } catch (e) {}
}`

// The glue makes answer objects whose keys it has seen in an earlier
// answer with the shape it kept from it: whatever a script does to one
// answer (add, delete or redefine a property, freeze it, change its
// prototype) the next answer with the same keys is still JSON.parse's,
// across more key sets than the glue keeps.
func TestToolAnswerShapesKept(t *testing.T) {
	code := `
const templates = [{words: 3, lines: 1, chars: 13}, {a: 1}, {a: 1, b: 2}, {b: 1, a: 2}, {x: {y: {z: 1}}, a: [{a: 1}]}];
for (let i = 0; i < 10; i++) templates.push({["k" + i]: i, common: "c"});
const mutations = [
  (v) => { v.extra = 1 },
  (v) => { delete v[Object.keys(v)[0]] },
  (v) => { Object.freeze(v) },
  (v) => { Object.setPrototypeOf(v, null) },
  (v) => { Object.defineProperty(v, Object.keys(v)[0], {enumerable: false, writable: false}) },
  (v) => { Object.defineProperty(v, Object.keys(v)[0], {get() { return 1 }}) },
  (v) => { Object.preventExtensions(v) },
  (v) => { for (const k of Object.keys(v)) delete v[k]; v.z = 1 },
];
function describe(v) {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  return (Object.getPrototypeOf(v) === Object.prototype ? "O" : Object.getPrototypeOf(v) === Array.prototype ? "A" : "?") +
    (Object.isExtensible(v) ? "" : "!") + "{" +
    Reflect.ownKeys(v).map((k) => {
      const d = Object.getOwnPropertyDescriptor(v, k);
      return String(k) + (d.writable ? "w" : "") + (d.enumerable ? "e" : "") + (d.configurable ? "c" : "") + ("get" in d ? "get" : "") + ":" + describe(d.value);
    }).join(",") + "}";
}
const kept = [];
let n = 0;
for (let round = 0; round < 4; round++) {
  for (const t of templates) {
    const v = await mcp.demo.echo(t);
    const got = describe(v), want = describe(JSON.parse(JSON.stringify(t)));
    if (got !== want) throw new Error("call " + n + ": " + got + " vs " + want);
    mutations[n % mutations.length](v);
    if (v.a && typeof v.a === "object") mutations[(n + 3) % mutations.length](v.a[0]);
    kept.push(v);
    n++;
  }
}
return n`
	r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: guest.DemoHost{}})
	if !r.OK {
		t.Fatal(r.Err)
	}
	jsonEq(t, r.Value, `60`)
}

// A call's promise is resolved with its answer as a promise's resolve
// function would: an answer that is a thenable (a then a script put on
// Object.prototype or Array.prototype, a getter there, which runs once per
// answer) is followed, and one that is not (its own then not a function,
// the prototype's deleted again) is the value; each as a promise resolved
// with JSON.parse of the same text.
func TestToolAnswerThenable(t *testing.T) {
	code := `
const log = [];
async function both(what, args) {
  let got, want;
  try { got = await mcp.demo.echo(args) } catch (e) { got = "threw " + e }
  try { want = await new Promise((r) => r(JSON.parse(JSON.stringify(args)))) } catch (e) { want = "threw " + e }
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) throw new Error(what + ": " + g + " vs " + w);
  log.push(what + "=" + g);
}
await both("plain", {a: 1});
await both("own then", {then: 1, a: 2});
await both("own then object", {then: {x: 1}});
Object.prototype.then = function (res) { res("patched " + Object.keys(this).join(",")) };
await both("Object.prototype.then", {a: 3});
await both("Object.prototype.then, array", [1, 2]);
await both("own then over it", {then: 5});
delete Object.prototype.then;
await both("deleted", {a: 4});
let hits = 0;
Object.defineProperty(Object.prototype, "then", {get() { hits++; return undefined }, configurable: true});
await both("getter", {a: 5});
const getterHits = hits;
delete Object.prototype.then;
Array.prototype.then = function (res, rej) { rej(new Error("array then")) };
await both("Array.prototype.then", [3]);
await both("object past Array.prototype.then", {a: 6});
delete Array.prototype.then;
Object.defineProperty(Object.prototype, "then", {get() { throw new Error("then getter throws") }, configurable: true});
await both("throwing getter", {a: 7});
delete Object.prototype.then;
await both("plain again", {a: 8});
return {log, getterHits}`
	r := engine.Run(context.Background(), guest.Request{Code: code, Tools: guest.DemoTools(), Host: guest.DemoHost{}})
	if !r.OK {
		t.Fatal(r.Err)
	}
	jsonEq(t, r.Value, `{"log":["plain={\"a\":1}","own then={\"then\":1,\"a\":2}","own then object={\"then\":{\"x\":1}}",`+
		`"Object.prototype.then=\"patched a\"","Object.prototype.then, array=\"patched 0,1\"","own then over it={\"then\":5}",`+
		`"deleted={\"a\":4}","getter={\"a\":5}","Array.prototype.then=\"threw Error: array then\"",`+
		`"object past Array.prototype.then={\"a\":6}","throwing getter=\"threw Error: then getter throws\"","plain again={\"a\":8}"],"getterHits":2}`)
}
