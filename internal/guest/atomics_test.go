package guest_test

import (
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/guest"
)

// atomicsScript runs every Atomics operation on each integer TypedArray,
// over a SharedArrayBuffer and over an ArrayBuffer, and the errors the
// standard asks for.
const atomicsScript = `
const out = {};
out.type = typeof Atomics;
out.tag = Object.prototype.toString.call(Atomics);
const kinds = { Int8Array, Uint8Array, Int16Array, Uint16Array, Int32Array, Uint32Array };
for (const shared of [true, false]) {
  for (const [name, T] of Object.entries(kinds)) {
    const a = new T(shared ? new SharedArrayBuffer(4 * T.BYTES_PER_ELEMENT) : new ArrayBuffer(4 * T.BYTES_PER_ELEMENT));
    out[(shared ? "shared " : "") + name] = [Atomics.store(a, 0, 5), Atomics.add(a, 0, 300), Atomics.sub(a, 0, 7),
      Atomics.and(a, 0, 0xff0f), Atomics.or(a, 0, 0x80), Atomics.xor(a, 0, 3), Atomics.exchange(a, 0, -1),
      Atomics.compareExchange(a, 0, a[0], 42), Atomics.compareExchange(a, 0, 1, 2), Atomics.load(a, 0)];
  }
  for (const [name, T] of Object.entries({ BigInt64Array, BigUint64Array })) {
    const a = new T(shared ? new SharedArrayBuffer(16) : new ArrayBuffer(16));
    out[(shared ? "shared " : "") + name] = [Atomics.store(a, 1, 5n), Atomics.add(a, 1, 2n ** 63n), Atomics.sub(a, 1, 1n),
      Atomics.exchange(a, 1, -1n), Atomics.compareExchange(a, 1, a[1], 7n), Atomics.load(a, 1)].map(String);
  }
}
out.lockFree = [1, 2, 3, 4, 8].map(n => Atomics.isLockFree(n));
const err = f => { try { return String(f()) } catch (e) { return e.constructor.name } };
const sab = new Int32Array(new SharedArrayBuffer(8));
out.errors = {
  float: err(() => Atomics.add(new Float64Array(2), 0, 1)),
  clamped: err(() => Atomics.add(new Uint8ClampedArray(2), 0, 1)),
  range: err(() => Atomics.load(sab, 2)),
  notShared: err(() => Atomics.wait(new Int32Array(2), 0, 0, 0)),
  notifyShared: err(() => Atomics.notify(sab, 0, 1)),
  notifyUnshared: err(() => Atomics.notify(new Int32Array(2), 0)),
  notifyUint8: err(() => Atomics.notify(new Uint8Array(new SharedArrayBuffer(4)), 0)),
};
return out`

// atomicsWant is what Node 22 (V8) answers atomicsScript with.
const atomicsWant = `{"type":"object","tag":"[object Atomics]",
"shared Int8Array":[5,5,49,42,10,-118,-119,-1,42,42],"shared Uint8Array":[5,5,49,42,10,138,137,255,42,42],
"shared Int16Array":[5,5,305,298,266,394,393,-1,42,42],"shared Uint16Array":[5,5,305,298,266,394,393,65535,42,42],
"shared Int32Array":[5,5,305,298,266,394,393,-1,42,42],"shared Uint32Array":[5,5,305,298,266,394,393,4294967295,42,42],
"shared BigInt64Array":["5","5","-9223372036854775803","-9223372036854775804","-1","7"],
"shared BigUint64Array":["5","5","9223372036854775813","9223372036854775812","18446744073709551615","7"],
"Int8Array":[5,5,49,42,10,-118,-119,-1,42,42],"Uint8Array":[5,5,49,42,10,138,137,255,42,42],
"Int16Array":[5,5,305,298,266,394,393,-1,42,42],"Uint16Array":[5,5,305,298,266,394,393,65535,42,42],
"Int32Array":[5,5,305,298,266,394,393,-1,42,42],"Uint32Array":[5,5,305,298,266,394,393,4294967295,42,42],
"BigInt64Array":["5","5","-9223372036854775803","-9223372036854775804","-1","7"],
"BigUint64Array":["5","5","9223372036854775813","9223372036854775812","18446744073709551615","7"],
"lockFree":[true,true,false,true,true],
"errors":{"float":"TypeError","clamped":"TypeError","range":"RangeError","notShared":"TypeError","notifyShared":"0","notifyUnshared":"0","notifyUint8":"TypeError"}}`

// TestAtomics: the Atomics object is there and every operation works as
// the standard (and V8) has it, on shared and unshared buffers alike.
func TestAtomics(t *testing.T) {
	r := run(t, atomicsScript)
	mustOK(t, r)
	jsonEq(t, r.Value, atomicsWant)
}

// TestAtomicsWaitNeverBlocks: the sandbox is one agent that cannot
// suspend, so Atomics.wait throws a TypeError at once, whatever its
// timeout and whether or not the value matches (the standard checks
// AgentCanSuspend before it compares), however long the deadline. (A
// loop of such waits ends at its deadline: TestDeadlineIsAbsolute.)
func TestAtomicsWaitNeverBlocks(t *testing.T) {
	for _, code := range []string{
		"Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1e12)",
		"Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0)",
		"Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 1, Infinity)",
		"Atomics.wait(new BigInt64Array(new SharedArrayBuffer(8)), 0, 0n, 1e12)",
	} {
		r := run(t, "try { return String("+code+") } catch (e) { return e.constructor.name + ': ' + e.message }",
			func(r *guest.Request) { r.Limits.Timeout = time.Minute })
		mustOK(t, r)
		jsonEq(t, r.Value, `"TypeError: cannot block in this thread"`)
	}
}
