// PML Sandbox guest prelude.
//
// Evaluated once per process before the memory snapshot. It is a function
// the C glue calls with the native bindings (`start`, `log`); those stay in
// this closure and never reach user code. It returns the entry points the
// glue calls for every execution: setup, settle, finish, fail.
(function (native) {
  "use strict";

  const hostErrors = new WeakSet();
  const jsonStringify = JSON.stringify;
  const ObjectCreate = Object.create;
  const ObjectFreeze = Object.freeze;
  const ObjectKeys = Object.keys;
  const defineProperty = Object.defineProperty;
  const ProxyCtor = Proxy;
  const PromiseCtor = Promise;
  const MapCtor = Map;
  const globalObject = globalThis;
  const hasOwn = Object.hasOwn;

  // Tool calls in flight are capped; calls beyond the cap wait in `queue`
  // so Promise.all over many calls just works, `cap` at a time.
  let cap = 16;
  let inflight = 0;
  const queue = [];
  let queueHead = 0;
  // Call ids are small consecutive integers: an array is the cheapest map.
  const pending = [];

  // The wrapper `(async function (args) {` shares line 1 with the user's
  // first line; stacks are rewritten so columns match the user's code, and
  // prelude frames (our internals) are dropped.
  const WRAP_COLS = 24;
  const MAX_FRAMES = 32;
  function cleanStack(stack) {
    const out = [];
    let dropped = 0;
    for (const line of String(stack || "").split("\n")) {
      if (line === "" || line.includes("prelude.js") || line.includes("(native)")) continue;
      if (out.length >= MAX_FRAMES) { dropped++; continue; }
      out.push(line.replace(/main\.js:1:(\d+)/, (m, c) => "main.js:1:" + Math.max(1, Number(c) - WRAP_COLS)));
    }
    if (dropped) out.push("    ... " + dropped + " more frames");
    return out.join("\n");
  }

  function hostError(e) {
    const err = new Error(String(e.message || e.code || "tool call failed"));
    err.code = e.code || "INTERNAL";
    if (e.tool) err.tool = e.tool;
    if (e.limit) err.limit = e.limit;
    err.retryable = !!e.retryable;
    if (e.details !== undefined) err.details = e.details;
    hostErrors.add(err);
    return err;
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
    return hostError({ code: "TOOL_NOT_FOUND", message: msg, tool: what.replace(".", ":"), details: { suggestions: near.map((n) => n.replace(".", ":")) } });
  }

  // Names a guarded object answers with undefined instead of throwing, so
  // `await mcp.x`, JSON.stringify(mcp) and console.log(mcp) behave.
  const quiet = new Set(["then", "toJSON", "inspect", "constructor", "prototype", "__proto__", "valueOf", "toString"]);

  // A guarded object keeps its tools as own properties, found directly; a
  // Proxy one step up the prototype chain sees only the misses, so a wrong
  // name throws TOOL_NOT_FOUND at once while every hit stays a plain
  // property read.
  function guard(target, describe, candidates) {
    const misses = new ProxyCtor(ObjectCreate(null), {
      get(t, key) {
        if (typeof key === "symbol" || quiet.has(key)) return undefined;
        throw notFound(describe(key), candidates());
      },
    });
    const obj = ObjectCreate(misses);
    for (const k of ObjectKeys(target)) obj[k] = target[k];
    return ObjectFreeze(obj);
  }

  // Calls cross to the host by tool index (the position in this run's tool
  // list), not by name: no strings to convert per call. Negative indexes are
  // the host's built-ins.
  const SLEEP = -1, SEARCH = -2, LIST = -3, DESCRIBE = -4;

  function startJob(job) {
    inflight++;
    const id = native.start(job.index, job.args);
    pending[id] = job;
  }

  function invoke(index, server, tool, a) {
    let args;
    if (a === undefined) {
      args = "{}";
    } else {
      try {
        args = jsonStringify(a);
      } catch (e) {
        return PromiseCtor.reject(hostError({ code: "INVALID_ARGUMENTS", tool: server + ":" + tool, message: "arguments are not JSON-serialisable: " + e.message }));
      }
      if (args === undefined) {
        return PromiseCtor.reject(hostError({ code: "INVALID_ARGUMENTS", tool: server + ":" + tool, message: "arguments must be a JSON value, got " + typeof a }));
      }
    }
    return new PromiseCtor((resolve, reject) => {
      const job = { index, args, resolve, reject, uncapped: false };
      if (inflight < cap) startJob(job);
      else queue.push(job);
    });
  }

  function buildMCP(tools) {
    const servers = ObjectCreate(null);
    const byServer = new MapCtor();
    const all = [];
    tools.forEach((t, index) => {
      if (!byServer.has(t.server)) byServer.set(t.server, []);
      byServer.get(t.server).push({ ...t, index });
      all.push(t.server + "." + t.name);
    });
    for (const [server, list] of byServer) {
      const fns = ObjectCreate(null);
      for (const t of list) {
        const name = t.name, index = t.index;
        const fn = (a) => invoke(index, server, name, a);
        defineProperty(fn, "name", { value: name });
        if (t.description) defineProperty(fn, "description", { value: t.description });
        fns[name] = fn;
      }
      servers[server] = guard(fns, (k) => server + "." + k, () => list.map((t) => server + "." + t.name));
    }
    return guard(servers, (k) => k, () => all.length ? all : []);
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
  let timerSeq = 0;
  const timers = new MapCtor();
  function setTimeoutImpl(fn, ms, ...rest) {
    if (typeof fn !== "function") throw new TypeError("setTimeout: callback is not a function");
    const handle = ++timerSeq;
    const delay = Math.max(0, Number(ms) || 0);
    const job = {
      index: SLEEP, args: jsonStringify({ ms: delay }), uncapped: true,
      resolve() {
        if (timers.delete(handle)) fn(...rest);
      },
      reject() { timers.delete(handle); },
    };
    timers.set(handle, job);
    const id = native.start(job.index, job.args);
    pending[id] = job;
    return handle;
  }
  function clearTimeoutImpl(handle) { timers.delete(handle); }

  // Built-ins (server "") are served by the host like tools but are not
  // queued behind the in-flight cap.
  function builtinCall(index, a) {
    return new PromiseCtor((resolve, reject) => {
      const job = { index, args: jsonStringify(a), resolve, reject, uncapped: true };
      const id = native.start(job.index, job.args);
      pending[id] = job;
    });
  }

  // Globals that do not depend on the run are defined once, before the
  // snapshot, so restoring an instance restores them for free.
  const hidden = { enumerable: false, configurable: false, writable: false };
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

  function setup(cfg) {
    if (cfg.in_flight > 0) cap = cfg.in_flight;
    defineProperty(globalObject, "mcp", { value: buildMCP(cfg.tools || []), ...hidden });
    if (cfg.globals) {
      for (const k of ObjectKeys(cfg.globals)) defineProperty(globalObject, k, { value: cfg.globals[k], ...hidden });
    }
    return cfg.args === undefined ? null : cfg.args;
  }

  function settle(id, ok, value) {
    const job = pending[id];
    if (job === undefined) return;
    pending[id] = undefined;
    if (!job.uncapped) {
      inflight--;
      while (queueHead < queue.length && inflight < cap) {
        const next = queue[queueHead];
        queue[queueHead++] = undefined;
        startJob(next);
      }
      if (queueHead === queue.length) { queue.length = 0; queueHead = 0; }
    }
    if (ok) job.resolve(value);
    else job.reject(value instanceof Error ? value : hostError(value));
  }

  function invalidResult(message) {
    return hostError({ code: "INVALID_RESULT", message: "the script's return value cannot be sent as JSON: " + message });
  }

  function finish(value) {
    if (value === undefined) return '{"ok":true,"value":null}';
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
      if (hostErrors.has(e)) throw e;
      if (e instanceof TypeError && /circular/i.test(e.message)) throw invalidResult("it contains a circular reference");
      if (e instanceof TypeError && /bigint/i.test(e.message)) throw invalidResult("it contains a BigInt (convert it with String() or Number())");
      throw e;
    }
    if (json === undefined) return '{"ok":true,"value":null}';
    return '{"ok":true,"value":' + json + "}";
  }

  function fail(reason) {
    let e;
    if (reason !== null && typeof reason === "object" && hostErrors.has(reason)) {
      e = { code: reason.code, message: reason.message };
      if (reason.tool) e.tool = reason.tool;
      if (reason.limit) e.limit = reason.limit;
      if (reason.retryable) e.retryable = true;
      if (reason.details !== undefined) e.details = reason.details;
      const st = cleanStack(reason.stack);
      if (st) e.stack = st;
    } else if (reason instanceof Error) {
      const name = String(reason.name || "Error");
      const message = String(reason.message);
      e = { code: "SCRIPT_ERROR", message: name + ": " + message, stack: cleanStack(reason.stack) };
      if (name === "InternalError" && message === "out of memory") {
        e = { code: "LIMIT_EXCEEDED", limit: "memory", message: "the script ran out of memory", stack: e.stack };
      } else if (name === "InternalError" && message === "stack overflow") {
        e = { code: "LIMIT_EXCEEDED", limit: "stack", message: "the script overflowed its stack (too deep recursion)", stack: e.stack };
      } else if (name === "InternalError" && message === "interrupted") {
        e = { code: "TIMEOUT", message: "execution deadline exceeded" };
      }
    } else {
      e = { code: "SCRIPT_ERROR", message: "Uncaught " + inspect(reason, 1, []) };
    }
    return jsonStringify({ ok: false, error: e });
  }

  return { setup, settle, finish, fail };
})
