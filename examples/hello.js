// The body of an async function: `args` holds the caller's input and
// `return` gives the result. Tools are the only way out of the sandbox.
const [echoed, sum] = await Promise.all([
  mcp.demo.echo({ hello: "world" }),
  mcp.demo.add({ a: 2, b: 3 }),
]);
console.log("two tool calls ran concurrently");
return { echoed, sum };
