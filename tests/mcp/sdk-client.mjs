#!/usr/bin/env node
// Test client built on the official MCP TypeScript SDK. The Rust tests drive it
// to check that toolsearch (and the reference servers) interoperate with the
// client most real hosts use, rather than only with our own client code.
//
// Usage:
//   node sdk-client.mjs stdio <command> [args...]
//   node sdk-client.mjs http <url>
// stdin: ONE JSON object {"calls": [{"name", "arguments"}...], "repeat": N}
// stdout: ONE JSON object {"server", "tools", "results", "call_us"}, exit 0;
//         or {"error": "..."} and exit 1 if connecting/listing fails.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

// Print exactly one JSON document: the Rust side parses all of stdout.
function emit(obj, code) {
  process.stdout.write(JSON.stringify(obj) + "\n", () => process.exit(code));
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString("utf8").trim();
  return text ? JSON.parse(text) : {};
}

function makeTransport(mode, rest) {
  if (mode === "stdio" && rest.length >= 1) {
    // env: the SDK's default child env is a short allow-list (HOME, PATH, ...);
    // tests pass settings such as MEMORY_FILE_PATH or TOOLSEARCH_* through ours.
    // stderr: inherit so server logs show up in the test output, not in our JSON.
    return new StdioClientTransport({
      command: rest[0],
      args: rest.slice(1),
      env: process.env,
      stderr: "inherit",
    });
  }
  if (mode === "http" && rest.length === 1) {
    return new StreamableHTTPClientTransport(new URL(rest[0]));
  }
  throw new Error("usage: sdk-client.mjs stdio <command> [args...] | http <url>");
}

async function main() {
  const [mode, ...rest] = process.argv.slice(2);
  let client, transport, input;
  try {
    input = await readStdin();
    transport = makeTransport(mode, rest);
    client = new Client({ name: "toolsearch-sdk-test-client", version: "0.0.0" });
    await client.connect(transport);
  } catch (err) {
    return emit({ error: String(err?.message ?? err) }, 1);
  }

  // List every page: a server (or gateway) may paginate tools/list.
  const tools = [];
  try {
    let cursor;
    do {
      const page = await client.listTools(cursor ? { cursor } : {});
      for (const t of page.tools) {
        tools.push({ name: t.name, description: t.description, inputSchema: t.inputSchema });
      }
      cursor = page.nextCursor;
    } while (cursor);
  } catch (err) {
    await client.close().catch(() => {});
    return emit({ error: `listTools: ${err?.message ?? err}` }, 1);
  }

  const calls = input.calls ?? [];
  const repeat = Math.max(1, Number(input.repeat ?? 1));
  const results = new Array(calls.length);
  const callUs = calls.map(() => []);
  for (let r = 0; r < repeat; r++) {
    for (const [i, call] of calls.entries()) {
      // Time the whole SDK round trip (serialize, transport, parse, validate).
      const start = process.hrtime.bigint();
      let result;
      try {
        result = await client.callTool({ name: call.name, arguments: call.arguments ?? {} });
      } catch (err) {
        // A thrown call (JSON-RPC error, schema violation, timeout) is data for
        // the test, not a reason to abort the remaining calls.
        result = { thrown: String(err?.message ?? err) };
      }
      callUs[i].push(Number((process.hrtime.bigint() - start) / 1000n));
      if (r === repeat - 1) results[i] = result;
    }
  }

  const server = client.getServerVersion() ?? null; // read before close()
  // HTTP: DELETE the session so the server frees it; close() alone does not.
  if (mode === "http") await transport.terminateSession().catch(() => {});
  await client.close().catch(() => {});
  emit({ server, tools, results, call_us: callUs }, 0);
}

main().catch((err) => emit({ error: String(err?.message ?? err) }, 1));
