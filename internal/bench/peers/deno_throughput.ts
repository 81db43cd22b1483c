// The Deno Worker peer of `pml bench`'s serve figures, run by the Deno that
// ../shared/peers/run installs. Per request it does what one POST /execute
// does in the sandbox: a fresh Worker (permissions "none") runs the script,
// and the host answers its tool calls over postMessage. Unlike pml serve it
// has no HTTP in front of it and no MCP server behind it: the tool is
// answered in process, so the comparison leans the peer's way.
//
// Usage: deno run --unstable-worker-options --allow-read --v8-flags=--expose-gc
//          deno_throughput.ts CLIENTS WARM_MS DURATION_MS HELD
// Prints one JSON line: throughput_return_rps, throughput_one_call_rps,
// memory_per_concurrent_execution_kib.
const [clients, warmMs, durationMs, held] = Deno.args.map(Number);
const workerURL = new URL("./deno_throughput_worker.ts", import.meta.url).href;

type Reply = (result: unknown) => void;
type Answer = (tool: string, args: unknown, reply: Reply) => void;

// request runs code in a fresh Worker, answering its tool calls with answer.
function request(code: string, answer: Answer): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const w = new Worker(workerURL, { type: "module", deno: { permissions: "none" } } as WorkerOptions);
    w.onerror = (e) => {
      e.preventDefault();
      w.terminate();
      reject(new Error(e.message));
    };
    w.onmessage = ({ data }) => {
      if (data.kind === "call") {
        answer(data.tool, data.args, (result) => w.postMessage({ kind: "result", id: data.id, result }));
        return;
      }
      w.terminate();
      if (data.ok) resolve(data.value);
      else reject(new Error(data.error));
    };
    w.postMessage({ kind: "run", code, tools: ["echo", "sleep"] });
  });
}

const echo: Answer = (_tool, args, reply) => reply(args);

// phase keeps `clients` requests going for ms and returns requests per
// second: those answered over the time until the last was answered.
async function phase(code: string, want: unknown, ms: number): Promise<number> {
  let n = 0;
  const start = performance.now();
  const end = start + ms;
  await Promise.all(Array.from({ length: clients }, async () => {
    while (performance.now() < end) {
      const got = await request(code, echo);
      if (got !== want) throw new Error(`${code} gave ${got}`);
      n++;
    }
  }));
  return n / ((performance.now() - start) / 1000);
}

async function throughput(code: string, want: unknown): Promise<number> {
  await phase(code, want, warmMs);
  return phase(code, want, durationMs);
}

function rssAfterGC(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return Deno.memoryUsage().rss;
}

// memoryPerWorker holds `held` Workers, each awaiting a sleep its host
// answers only once all of them are waiting, and returns the rise of the
// process's resident memory over idle per Worker, in KiB.
async function memoryPerWorker(): Promise<number> {
  const idle = rssAfterGC();
  const sleeping: Reply[] = [];
  let during = 0;
  const hold: Answer = (tool, args, reply) => {
    if (tool !== "sleep") return reply(args);
    sleeping.push(reply);
    if (sleeping.length === held) {
      during = rssAfterGC();
      for (const r of sleeping) r({ slept_ms: 0 });
    }
  };
  const code = "await mcp.demo.echo({}); await mcp.demo.sleep({ms: 30000}); return 1";
  await Promise.all(Array.from({ length: held }, () => request(code, hold)));
  return (during - idle) / 1024 / held;
}

const ret = await throughput("return 1+1", 2);
const oneCall = await throughput("return (await mcp.demo.echo({x: 1})).x", 1);
const mem = await memoryPerWorker();
console.log(JSON.stringify({
  peer: "deno-worker-bridge",
  deno: Deno.version.deno,
  throughput_return_rps: +ret.toFixed(1),
  throughput_one_call_rps: +oneCall.toFixed(1),
  memory_per_concurrent_execution_kib: Math.round(mem),
}));
