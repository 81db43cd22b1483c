// A client's user, as the official MCP TypeScript SDK's client sees it:
// runs one execute_code against the server at argv[2] with the code in
// argv[3], answering every question the server asks (elicitation): it
// declines a call that mentions "keep-me" and approves the others. Prints
// {asked, result, isError} as JSON. integration/elicit_test.go runs it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, code] = process.argv.slice(2);
const client = new Client({ name: "pml-elicit-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  if (request.params.message.includes("keep-me")) {
    return { action: "decline" };
  }
  return { action: "accept", content: { decision: "approve" } };
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const result = await client.callTool({ name: "execute_code", arguments: { code } });
console.log(JSON.stringify({ asked, result: result.structuredContent, isError: result.isError ?? false }));
await client.close();
