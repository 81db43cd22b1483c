// PML Sandbox guest prelude.
//
// Evaluated once per process before the memory snapshot. It is a function
// the C glue calls with the native bindings (`tool`, `builtin`, `timer`,
// `setup`, `mcp`, `log`, `fault`, `resolve`); those stay in this closure
// and never reach user code (but for `mcp`, the global's getter). It
// returns the entry points the glue calls: setup, finish and fail for every
// execution, hostError and badArgs on a call's rare paths.
//
// Tool calls themselves are the glue's (native.tool makes each tool's
// function): it serialises the arguments, keeps the promise in a table of
// its own and settles it with the host's answer, so a call runs no
// JavaScript of this file unless it fails.
//
// User code runs in the same realm and may replace any built-in method
// (Array.prototype.push, Map.prototype.set, Function.prototype.call...) or
// define setters on prototypes. So everything this file does while a
// script runs goes through intrinsics captured here, before any user code,
// and keeps its internal objects (call jobs, resolvers, the native
// bindings) in objects without prototypes, where no script-defined setter
// or method can see them.
(function (native) {
  "use strict";

  // uncurry(f)(self, ...args) is f.call(self, ...args), bound now.
  const uncurry = Function.prototype.bind.bind(Function.prototype.call);
  const weakMapGet = uncurry(WeakMap.prototype.get);
  const weakMapSet = uncurry(WeakMap.prototype.set);
  const WeakMapCtor = WeakMap;
  const ErrorCtor = Error;
  const StringCtor = String;
  const NumberCtor = Number;
  const numberParseInt = Number.parseInt;
  const mathMax = Math.max;
  const jsonStringify = JSON.stringify;
  const ObjectCreate = Object.create;
  const ObjectFreeze = Object.freeze;
  const ObjectKeys = Object.keys;
  const ObjectSetPrototypeOf = Object.setPrototypeOf;
  const defineProperty = Object.defineProperty;
  const getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
  const ProxyCtor = Proxy;
  const promiseReject = Promise.reject.bind(Promise);
  const MapCtor = Map;
  const globalObject = globalThis;

  // Arrays the prelude keeps its jobs in. A write past an array's end looks
  // for a setter on Array.prototype, where a script may have put one; so
  // jobs are only ever stored into slots that already exist. put() grows
  // an array by defining its new slots (as undefined; a definition consults
  // no setter) before storing. Arrays made here stay ordinary arrays, which
  // QuickJS keeps dense and fast.
  function slots(n) {
    const a = [];
    for (let i = 0; i < n; i++) a[i] = undefined; // before any user code
    return a;
  }
  const slotDescriptor = { value: undefined, writable: true, enumerable: true, configurable: true };
  function put(a, i, v) {
    if (i >= a.length) {
      for (let j = a.length, end = i * 2 + 16; j < end; j++) defineProperty(a, j, slotDescriptor);
    }
    a[i] = v;
  }

  // Errors the host (or this prelude on its behalf) created, each with the
  // id under which the host keeps the original. A failing script's error
  // keeps its code only when the host finds it unchanged (see fail).
  let hostErrorIds = new WeakMapCtor();
  function define(o, k, v) {
    defineProperty(o, k, { value: v, writable: true, enumerable: true, configurable: true });
  }

  // The wrapper `(async function (args) {` shares line 1 with the user's
  // first line; stacks are rewritten so columns match the user's code, and
  // prelude frames (our internals) are dropped.
  const WRAP_COLS = 24;
  // The global a session's script hands its top-level bindings to
  // (internal/script.ScopeRegistrar).
  const SCOPE_REGISTRAR = "__pml_scope";
  const MAX_FRAMES = 32;
  // Only captured string methods here: this runs on the failure path,
  // after the script may have replaced any built-in.
  const stringSplit = uncurry(String.prototype.split);
  const stringIncludes = uncurry(String.prototype.includes);
  const stringIndexOf = uncurry(String.prototype.indexOf);
  const stringSlice = uncurry(String.prototype.slice);
  const FIRST_LINE = "main.js:1:";
  function cleanStack(stack) {
    const lines = stringSplit(typeof stack === "string" ? stack : "", "\n");
    let out = "";
    let kept = 0, dropped = 0;
    for (let i = 0; i < lines.length; i++) {
      let line = lines[i];
      if (line === "" || stringIncludes(line, "prelude.js") || stringIncludes(line, "(native)")) continue;
      if (kept >= MAX_FRAMES) { dropped++; continue; }
      const at = stringIndexOf(line, FIRST_LINE);
      if (at >= 0) {
        const rest = stringSlice(line, at + FIRST_LINE.length);
        const col = numberParseInt(rest, 10);
        if (col > 0) line = stringSlice(line, 0, at) + FIRST_LINE + mathMax(1, col - WRAP_COLS) + stringSlice(rest, StringCtor(col).length);
      }
      out += (kept++ ? "\n" : "") + line;
    }
    if (dropped) out += "\n    ... " + dropped + " more frames";
    return out;
  }

  // hostError turns an error document the host delivered under id into
  // the Error the script sees.
  function hostError(e, id) {
    const err = new ErrorCtor(StringCtor(e.message || e.code || "tool call failed"));
    define(err, "code", e.code || "INTERNAL");
    if (e.tool) define(err, "tool", e.tool);
    if (e.limit) define(err, "limit", e.limit);
    define(err, "retryable", !!e.retryable);
    if (e.details !== undefined) define(err, "details", e.details);
    weakMapSet(hostErrorIds, err, id);
    return err;
  }

  // preludeError is an error this prelude raises for the host (a missing
  // tool, arguments that are not JSON...): the host keeps the original
  // first, so it is checked like any other.
  function preludeError(e) {
    return hostError(e, native.fault(jsonStringify(e)));
  }

  function levenshtein(a, b) {
    if (a === b) return 0;
    let prev = [];
    for (let j = 0; j <= b.length; j++) prev[j] = j;
    for (let i = 1; i <= a.length; i++) {
      const cur = [i];
      for (let j = 1; j <= b.length; j++) {
        const cost = a[i - 1] === b[j - 1] ? 0 : 1;
        cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
      }
      prev = cur;
    }
    return prev[b.length];
  }

  function nearest(name, candidates) {
    const lower = name.toLowerCase();
    return candidates
      .map((c) => [levenshtein(lower, c.toLowerCase()), c])
      .filter(([d, c]) => d <= Math.max(2, Math.floor(c.length / 2)) || c.toLowerCase().includes(lower) || lower.includes(c.toLowerCase()))
      .sort((x, y) => x[0] - y[0] || (x[1] < y[1] ? -1 : 1))
      .slice(0, 3)
      .map(([, c]) => c);
  }

  function notFound(what, candidates) {
    const near = nearest(what, candidates);
    let msg = "mcp." + what + " is not a tool of this execution";
    if (near.length) msg += "; did you mean " + near.map((n) => "mcp." + n).join(", ") + "?";
    else if (candidates.length === 0) msg += "; this execution has no tools";
    return preludeError({ code: "TOOL_NOT_FOUND", message: msg, tool: what.replace(".", ":"), details: { suggestions: near.map((n) => n.replace(".", ":")) } });
  }

  // Names a guarded object answers with undefined instead of throwing, so
  // `await mcp.x`, JSON.stringify(mcp) and console.log(mcp) behave.
  const quiet = new Set(["then", "toJSON", "inspect", "constructor", "prototype", "__proto__", "valueOf", "toString"]);

  // A guarded object keeps its tools as own properties, found directly; a
  // Proxy one step up the prototype chain sees only the misses, so a wrong
  // name throws TOOL_NOT_FOUND at once while every hit stays a plain
  // property read. When the host resolves names (resolveKey set), a miss
  // asks it first: a name the run's list lacks, reached dynamically
  // (mcp[name]), may still be a capability, resolved as the script reaches
  // it.
  function missing(describe, candidates, resolveKey) {
    return new ProxyCtor(ObjectCreate(null), {
      get(t, key) {
        if (typeof key === "symbol" || quiet.has(key)) return undefined;
        if (resolveKey !== undefined) {
          const v = resolveKey(key);
          if (v !== undefined) return v;
        }
        throw notFound(describe(key), candidates());
      },
    });
  }

  function guard(target, describe, candidates, resolveKey) {
    const obj = ObjectCreate(missing(describe, candidates, resolveKey));
    const keys = ObjectKeys(target);
    for (let i = 0; i < keys.length; i++) defineProperty(obj, keys[i], own(target[keys[i]]));
    return ObjectFreeze(obj);
  }

  // own(v) describes a plain data property: a descriptor without a
  // prototype, so no getter a script put on Object.prototype ("get",
  // "value"...) is read as part of it.
  function own(v) {
    return { __proto__: null, value: v, writable: true, enumerable: true, configurable: true };
  }
  // append(a, v) is a.push(v) that no script can intercept.
  function append(a, v) {
    defineProperty(a, a.length, own(v));
  }

  // Calls cross to the host by tool index (the position in this run's tool
  // list), not by name: no strings to convert per call. Negative indexes are
  // the host's built-ins.
  const SEARCH = -2, LIST = -3, DESCRIBE = -4;

  // "server:tool" by tool index, for the run's error messages (an object
  // without prototype: no script-defined setter sees it).
  let toolLabels = ObjectCreate(null);

  // badArgs is the glue's call for arguments that are not JSON (it threw
  // exc, or gave undefined): the rejected promise the tool call returns.
  function badArgs(index, a, exc) {
    const tool = toolLabels[index];
    if (exc !== undefined) {
      let why;
      try { why = StringCtor(exc && exc.message); } catch (_) { why = "unknown error"; }
      return promiseReject(preludeError({ code: "INVALID_ARGUMENTS", tool, message: "arguments are not JSON-serialisable: " + why }));
    }
    return promiseReject(preludeError({ code: "INVALID_ARGUMENTS", tool, message: "arguments must be a JSON value, got " + typeof a }));
  }

  // buildMCP makes the mcp object from the run's tools, [server, name,
  // server, name, …], a call's index being the tool's position. The glue
  // builds it when the script first reads `mcp` (a script that never does
  // pays nothing for its tools), so it may run after the script replaced
  // any built-in: it calls no method of an array or object it did not
  // capture, and defines properties rather than assigning them. It is one
  // pass with no intermediate copies: each server's object is filled as a
  // plain object, then put over its miss-catching proxy and frozen. With resolving set,
  // misses ask the host (native.resolve), which appends what it finds to
  // the run's tool list and answers its index; each name found is kept, so
  // it is asked once per run.
  function buildMCP(tools, resolving) {
    const servers = ObjectCreate(null);
    const names = ObjectCreate(null);
    const all = [];
    toolLabels = ObjectCreate(null);
    // The glue makes each tool's function, named for the tool.
    const toolFn = (index, server, name) => {
      toolLabels[index] = server + ":" + name;
      return native.tool(index, name);
    };
    for (let i = 0; i + 1 < tools.length; i += 2) {
      const server = StringCtor(tools[i]), name = StringCtor(tools[i + 1]), index = i >> 1;
      let fns = servers[server];
      if (fns === undefined) {
        fns = servers[server] = ObjectCreate(null);
        names[server] = [];
      }
      append(names[server], name);
      append(all, server + "." + name);
      fns[name] = toolFn(index, server, name);
    }
    function lazyTool(server) {
      if (!resolving) return undefined;
      const found = ObjectCreate(null);
      return (key) => {
        const name = StringCtor(key);
        let fn = found[name];
        if (fn === undefined) {
          const index = native.resolve(server, name);
          if (index < 0) return undefined;
          fn = found[name] = toolFn(index, server, name);
        }
        return fn;
      };
    }
    const lazyServers = ObjectCreate(null);
    function lazyServer(key) {
      const server = StringCtor(key);
      let obj = lazyServers[server];
      if (obj === undefined) {
        if (native.resolve(server, "") < 0) return undefined;
        obj = lazyServers[server] = ObjectFreeze(ObjectCreate(missing((k) => server + "." + k, () => [], lazyTool(server))));
      }
      return obj;
    }
    const serverNames = ObjectKeys(servers);
    for (let i = 0; i < serverNames.length; i++) {
      const server = serverNames[i];
      const list = names[server];
      ObjectSetPrototypeOf(servers[server], missing((k) => server + "." + k, () => list.map((n) => server + "." + n), lazyTool(server)));
      ObjectFreeze(servers[server]);
    }
    return guard(servers, (k) => k, () => all.length ? all : [], resolving ? lazyServer : undefined);
  }

  // console.* formatting: strings as they are, everything else inspected
  // safely (cycles, functions, BigInt, symbols never throw).
  function inspect(v, depth, seen) {
    switch (typeof v) {
      case "string": return depth === 0 ? v : jsonStringify(v);
      case "number": case "boolean": case "undefined": return String(v);
      case "bigint": return String(v) + "n";
      case "symbol": return v.toString();
      case "function": return "[Function " + (v.name || "anonymous") + "]";
    }
    if (v === null) return "null";
    if (v instanceof Error) return v.stack ? String(v.name) + ": " + v.message + "\n" + v.stack : String(v);
    if (seen.includes(v)) return "[Circular]";
    if (depth > 4) return Array.isArray(v) ? "[Array]" : "[Object]";
    seen.push(v);
    let out;
    try {
      if (Array.isArray(v)) {
        const parts = [];
        for (let i = 0; i < v.length && i < 100; i++) parts.push(inspect(v[i], depth + 1, seen));
        if (v.length > 100) parts.push("... " + (v.length - 100) + " more");
        out = "[" + parts.join(", ") + "]";
      } else if (v instanceof Date) {
        out = isNaN(v) ? "Invalid Date" : v.toISOString();
      } else if (v instanceof Map) {
        out = "Map(" + v.size + ")";
      } else if (v instanceof Set) {
        out = "Set(" + v.size + ")";
      } else {
        const keys = ObjectKeys(v);
        const parts = [];
        for (let i = 0; i < keys.length && i < 100; i++) parts.push(jsonStringify(keys[i]) + ": " + inspect(v[keys[i]], depth + 1, seen));
        if (keys.length > 100) parts.push("... " + (keys.length - 100) + " more");
        out = "{" + parts.join(", ") + "}";
      }
    } catch (e) {
      out = "[Uninspectable]";
    }
    seen.pop();
    return out;
  }

  let logging = true;
  function makeLogger(level) {
    return function (...xs) {
      if (!logging) return;
      let line = "";
      for (let i = 0; i < xs.length; i++) {
        if (i) line += " ";
        line += inspect(xs[i], 0, []);
      }
      logging = native.log(level, line);
    };
  }

  // Timers are host-side sleeps (server ""), so they share the one event loop
  // with tool calls and never run after the script has finished.
  // Timer handles are consecutive integers; a cleared or fired timer's slot
  // holds false. A run may start maxTimers of them (the host's cap, from
  // the configuration); the setTimeout that would cross it throws.
  let timerSeq = 0;
  let maxTimers = 10000;
  const timers = slots(16);
  const TypeErrorCtor = TypeError;
  function setTimeoutImpl(fn, ms, ...rest) {
    if (typeof fn !== "function") throw new TypeErrorCtor("setTimeout: callback is not a function");
    if (timerSeq >= maxTimers) {
      throw preludeError({ code: "LIMIT_EXCEEDED", limit: "timers", message: "more than " + maxTimers + " timers in one execution" });
    }
    const handle = ++timerSeq;
    const delay = mathMax(0, NumberCtor(ms) || 0);
    put(timers, handle, true);
    const fire = () => {
      if (timers[handle]) {
        timers[handle] = false;
        fn(...rest);
      }
    };
    const drop = () => { timers[handle] = false; };
    native.timer("{\"ms\":" + delay + "}", fire, drop);
    return handle;
  }
  function clearTimeoutImpl(handle) {
    if (typeof handle === "number" && handle > 0 && handle <= timerSeq) timers[handle] = false;
  }

  // Built-ins (server "") are served by the host like tools but are not
  // queued behind the in-flight cap.
  function builtinCall(index, a) {
    return native.builtin(index, jsonStringify(a));
  }

  // Globals that do not depend on the run are defined once, before the
  // snapshot, so restoring an instance restores them for free. They are
  // configurable: a session's script may declare its own `tools` or
  // `console` at top level, and the next execution of the session finds
  // the script's (as a REPL's would). Nothing of the prelude reads them.
  const hidden = { enumerable: false, configurable: true, writable: false };
  defineProperty(globalObject, "tools", {
    value: ObjectFreeze({
      search: (query, limit) => builtinCall(SEARCH, { query: String(query === undefined ? "" : query), limit: Number(limit) || 10 }),
      list: () => builtinCall(LIST, {}),
      describe: () => builtinCall(DESCRIBE, {}),
    }),
    ...hidden,
  });
  defineProperty(globalObject, "console", {
    value: ObjectFreeze({ log: makeLogger(0), info: makeLogger(1), warn: makeLogger(2), error: makeLogger(3), debug: makeLogger(0) }),
    ...hidden,
  });
  defineProperty(globalObject, "setTimeout", { value: setTimeoutImpl, ...hidden });
  defineProperty(globalObject, "clearTimeout", { value: clearTimeoutImpl, ...hidden });
  // `mcp` is each run's own (its tools, narrowed per request), and a
  // session's executions share one global object: a getter no script can
  // replace reads the run's (the glue's, which holds it: no JavaScript
  // runs for a script's every `mcp.`).
  defineProperty(globalObject, "mcp", { get: native.mcp, enumerable: false, configurable: false });

  // Sessions (see internal/script's Persist). The host adds, at the top
  // of a session's script, one call handing over the script's top-level
  // bindings: per name, [read] or [read, write]. Once the execution has
  // succeeded, keep() makes each a global that reads and writes the
  // binding, so the next execution of the session finds it; one whose
  // declaration never ran (an early return) is left as it was. Only the
  // first call of a run counts: the host's, made before any of the
  // script's own code.
  let session = false;
  let scope = null;
  defineProperty(globalObject, SCOPE_REGISTRAR, {
    value: function (table) {
      if (session && scope === null && table !== null && typeof table === "object") scope = table;
    },
    enumerable: false, configurable: false, writable: false,
  });
  function constSetter(name) {
    return function () { throw new TypeErrorCtor("'" + name + "' is read-only"); };
  }
  function keep() {
    const table = scope;
    scope = null;
    if (table === null) return;
    const names = ObjectKeys(table);
    for (let i = 0; i < names.length; i++) {
      const name = names[i];
      const pair = table[name];
      const get = pair[0], set = pair[1];
      if (typeof get !== "function") continue;
      try { get(); } catch (_) { continue; } // never initialised: nothing to keep
      const d = getOwnPropertyDescriptor(globalObject, name);
      if (d !== undefined && !d.configurable) continue;
      defineProperty(globalObject, name, {
        get, set: typeof set === "function" ? set : constSetter(name), enumerable: true, configurable: true,
      });
    }
  }

  // reset forgets what a previous execution of a session left in this
  // realm: its timers (its calls in flight are the glue's, which forgets
  // them itself: their promises never settle; the host reported them), and
  // its host errors, which keep no code of theirs past their execution.
  function reset() {
    for (let i = 0; i < timers.length; i++) timers[i] = false;
    timerSeq = 0;
    logging = true;
    hostErrorIds = new WeakMapCtor();
    scope = null;
  }

  // ran: this realm has run a script before (a session's next execution
  // restored it); a fresh sandbox has nothing to forget.
  let ran = false;
  const argsDescriptor = { writable: true, enumerable: false, configurable: true };
  defineProperty(globalObject, "args", { value: null, ...argsDescriptor });
  function setup(cfg) {
    const fresh = !ran;
    if (ran) reset();
    ran = true;
    if (cfg.max_timers > 0) maxTimers = cfg.max_timers;
    session = cfg.session === true;
    // The mcp object is built when the script first reads it, from the
    // tool list the glue keeps (the host sends it beside this document).
    native.setup([], cfg.resolve === true, cfg.in_flight > 0 ? cfg.in_flight : 0);
    if (cfg.globals) {
      for (const k of ObjectKeys(cfg.globals)) defineProperty(globalObject, k, { value: cfg.globals[k], ...hidden });
    }
    const args = cfg.args === undefined ? null : cfg.args;
    // The input is also globalThis.args, for a script that declares its
    // own `args` (which then runs without the parameter). A session's
    // earlier script may have made that name its own for good (not
    // configurable): the parameter still holds the input then. A fresh
    // sandbox without input finds it as the snapshot defined it (null).
    if (!fresh || args !== null) {
      try {
        defineProperty(globalObject, "args", { value: args, ...argsDescriptor });
      } catch (_) {}
    }
    return args;
  }

  function invalidResult(message) {
    return preludeError({ code: "INVALID_RESULT", message: "the script's return value cannot be sent as JSON: " + message });
  }

  function finish(value) {
    if (value === undefined) {
      if (session) keep();
      return '{"ok":true,"value":null}';
    }
    if (typeof value === "function") throw invalidResult("it is a function");
    if (typeof value === "symbol") throw invalidResult("it is a symbol");
    let json;
    try {
      json = jsonStringify(value, function (k, v) {
        switch (typeof v) {
          case "function": throw invalidResult("property " + jsonStringify(k) + " is a function");
          case "symbol": throw invalidResult("property " + jsonStringify(k) + " is a symbol");
          case "bigint": throw invalidResult("property " + jsonStringify(k) + " is a BigInt (convert it with String() or Number())");
        }
        return v;
      });
    } catch (e) {
      if (e !== null && typeof e === "object" && weakMapGet(hostErrorIds, e) !== undefined) throw e;
      const m = e instanceof TypeError ? StringCtor(e.message) : "";
      if (m === "circular reference") throw invalidResult("it contains a circular reference");
      if (m === "Do not know how to serialize a BigInt") throw invalidResult("it contains a BigInt (convert it with String() or Number())");
      throw e;
    }
    if (session) keep();
    if (json === undefined) return '{"ok":true,"value":null}';
    return '{"ok":true,"value":' + json + "}";
  }

  // fail turns the script's failure into the output document. An error
  // the host delivered keeps its code only if the host finds it unchanged:
  // the document carries the id the host kept the original under and the
  // fields as the script left them, and the host compares the two (a
  // script that edits e.code = "TIMEOUT" and rethrows gets SCRIPT_ERROR).
  function fail(reason) {
    let e;
    try {
      e = describeFailure(reason);
    } catch (_) {
      // A getter or override of the script's threw while we read its error.
      e = { code: "SCRIPT_ERROR", message: "Uncaught exception (reading it threw again)" };
    }
    return jsonStringify({ ok: false, error: e });
  }

  function describeFailure(reason) {
    let e;
    const id = reason !== null && typeof reason === "object" ? weakMapGet(hostErrorIds, reason) : undefined;
    if (id !== undefined) {
      e = { host_error: id, code: reason.code, message: reason.message };
      if (reason.tool !== undefined) e.tool = reason.tool;
      if (reason.limit !== undefined) e.limit = reason.limit;
      if (reason.retryable !== undefined) e.retryable = reason.retryable;
      if (reason.details !== undefined) e.details = reason.details;
      const st = cleanStack(reason.stack);
      if (st) e.stack = st;
    } else if (reason instanceof ErrorCtor) {
      const name = StringCtor(reason.name || "Error");
      const message = StringCtor(reason.message);
      e = { code: "SCRIPT_ERROR", message: name + ": " + message, stack: cleanStack(reason.stack) };
      if (name === "InternalError" && message === "out of memory") {
        e = { code: "LIMIT_EXCEEDED", limit: "memory", message: "the script ran out of memory", stack: e.stack };
      } else if (name === "InternalError" && message === "stack overflow") {
        e = { code: "LIMIT_EXCEEDED", limit: "stack", message: "the script overflowed its stack (too deep recursion)", stack: e.stack };
      }
    } else {
      e = { code: "SCRIPT_ERROR", message: "Uncaught " + inspect(reason, 1, []) };
    }
    return e;
  }

  return { setup, finish, fail, hostError, badArgs, buildMCP };
})
