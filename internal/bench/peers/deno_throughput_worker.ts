// The guest side of deno_throughput.ts: runs one script as an async
// function body with `mcp.demo.<tool>` as calls to the host over
// postMessage, then reports the result.
let nextID = 0;
const waiting = new Map<number, (result: unknown) => void>();

function call(tool: string, args: unknown): Promise<unknown> {
  const id = nextID++;
  return new Promise((resolve) => {
    waiting.set(id, resolve);
    self.postMessage({ kind: "call", id, tool, args });
  });
}

self.onmessage = async ({ data }: MessageEvent) => {
  if (data.kind === "result") {
    const resolve = waiting.get(data.id)!;
    waiting.delete(data.id);
    resolve(data.result);
    return;
  }
  const demo: Record<string, (args: unknown) => Promise<unknown>> = {};
  for (const tool of data.tools as string[]) demo[tool] = (args) => call(tool, args);
  try {
    const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor;
    const value = await new AsyncFunction("mcp", data.code)({ demo });
    self.postMessage({ kind: "done", ok: true, value });
  } catch (err) {
    self.postMessage({ kind: "done", ok: false, error: String(err) });
  }
};
