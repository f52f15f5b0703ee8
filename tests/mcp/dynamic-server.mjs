#!/usr/bin/env node
// A stdio MCP server whose tool list changes at run time, for the tests of
// notifications/tools/list_changed: calling `add_tool {name}` registers a tool `name`
// that answers "NAME_OK"; the SDK then sends list_changed to the client.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "dynamic", version: "1.0.0" });

server.registerTool(
  "add_tool",
  {
    description: "Register a new tool with the given name",
    inputSchema: { name: z.string() },
  },
  async ({ name }) => {
    server.registerTool(
      name,
      { description: `A tool added at run time: ${name}`, inputSchema: {} },
      async () => ({ content: [{ type: "text", text: `${name.toUpperCase()}_OK` }] }),
    );
    return { content: [{ type: "text", text: `added ${name}` }] };
  },
);

await server.connect(new StdioServerTransport());
