// A capability: save it with `pml capability save math:sum examples/sum.js`
// and call it from any script as `await mcp.math.sum({xs: [1, 2, 3]})`.
return args.xs.reduce((a, b) => a + b, 0);
