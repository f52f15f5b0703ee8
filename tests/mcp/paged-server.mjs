#!/usr/bin/env node
// A stdio MCP server that lists its five tools two a page, for the test that the client
// follows nextCursor (the reference servers answer tools/list in one page). A call with
// `{"size": N}` answers N characters of text, for the bound on one message's line.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const tools = [0, 1, 2, 3, 4].map((i) => ({
  name: `paged_tool_${i}`,
  description: `Paged tool number ${i}`,
  inputSchema: { type: "object", properties: {} },
}));
const server = new Server({ name: "paged", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async (request) => {
  const start = Number(request.params?.cursor ?? 0);
  const end = Math.min(start + 2, tools.length);
  return { tools: tools.slice(start, end), ...(end < tools.length ? { nextCursor: String(end) } : {}) };
});
server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const size = Number(request.params.arguments?.size ?? 0);
  const text = size > 0 ? "x".repeat(size) : `${request.params.name} ran`;
  return { content: [{ type: "text", text }] };
});
await server.connect(new StdioServerTransport());
