#!/usr/bin/env node
// Drives toolsearch's gateway with the official OpenAI SDK, as an existing agent would:
// only the base URL changes. The Rust side (tests/gateway_sdk.rs) starts the mock
// provider (with fixtures/scenarios/client-tool.json) and a gateway, runs this, and checks
// what it reports here together with what the mock recorded.
//
// Usage: node drive.mjs <gateway base URL, e.g. http://127.0.0.1:1234/v1>
// stdout: ONE JSON object, one key per step; a step that throws reports
//         {"error": {"name", "status", "message"}} in its place. Exit 0 unless the SDK
//         itself cannot be loaded.
import { gatewayClient } from "./client.mjs";

const client = gatewayClient(0);

const pickFile = {
  type: "function",
  name: "pick_file",
  description: "Ask the user to pick a file",
  parameters: {
    type: "object",
    properties: { pattern: { type: "string" } },
    required: ["pattern"],
  },
  strict: false,
};
const pickFileChat = {
  type: "function",
  function: {
    name: pickFile.name,
    description: pickFile.description,
    parameters: pickFile.parameters,
  },
};

const report = {};

async function step(name, fn) {
  try {
    report[name] = await fn();
  } catch (e) {
    report[name] = {
      error: { name: e?.constructor?.name, status: e?.status, message: String(e?.message ?? e) },
    };
  }
}

await step("plain", async () => {
  const r = await client.responses.create({ model: "sdk-model", input: "hello there" });
  return { id: r.id, status: r.status, text: r.output_text, totalTokens: r.usage?.total_tokens ?? null };
});

await step("streamed", async () => {
  const stream = await client.responses.create({
    model: "sdk-model",
    input: "stream this",
    stream: true,
  });
  const types = [];
  let deltas = "";
  let deltaEvents = 0;
  let completed = null;
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.output_text.delta") {
      deltas += event.delta;
      deltaEvents += 1;
    }
    if (event.type === "response.completed") completed = event.response;
  }
  return { types, deltas, deltaEvents, completedText: completed?.output_text ?? null };
});

await step("retrieved", async () => {
  // As the SDK writes an array in a query (`include[]=a&include[]=b`), plain and streamed.
  const r = await client.responses.create({ model: "sdk-model", input: "keep this" });
  const include = ["message.output_text.logprobs", "reasoning.encrypted_content"];
  const again = await client.responses.retrieve(r.id, { include });
  const types = [];
  for await (const event of await client.responses.retrieve(r.id, { include, stream: true })) {
    types.push(event.type);
  }
  return { same: again.output_text === r.output_text, text: again.output_text, types };
});

await step("streamHelper", async () => {
  // The SDK's own accumulator checks the events' order and identities.
  const stream = client.responses.stream({ model: "sdk-model", input: "helper stream" });
  const final = await stream.finalResponse();
  return { status: final.status, text: final.output_text };
});

await step("continued", async () => {
  const first = await client.responses.create({ model: "sdk-model", input: "my name is Ada" });
  const second = await client.responses.create({
    model: "sdk-model",
    input: "what is my name",
    previous_response_id: first.id,
  });
  return { first: first.output_text, second: second.output_text };
});

await step("unknownPrevious", async () => {
  await client.responses.create({
    model: "sdk-model",
    input: "hello",
    previous_response_id: "resp_0000000000000000000000000000dead",
  });
  return { unexpected: "no error" };
});

await step("forwarded", async () => {
  // Every field the issue names, and a client tool the choice names.
  const r = await client.responses.create({
    model: "sdk-forward-model",
    input: "pick a file",
    tools: [pickFile],
    tool_choice: { type: "function", name: "pick_file" },
    temperature: 0.25,
    store: false,
    user: "sdk-user",
    parallel_tool_calls: false,
    max_output_tokens: 77,
  });
  const calls = r.output.filter((i) => i.type === "function_call");
  // Not stored: continuing it is a 404.
  let continued = null;
  try {
    await client.responses.create({ model: "sdk-model", input: "x", previous_response_id: r.id });
  } catch (e) {
    continued = e.status;
  }
  return { status: r.status, calls: calls.map((c) => ({ name: c.name, arguments: JSON.parse(c.arguments) })), continuedStatus: continued };
});

await step("clientTool", async () => {
  const first = await client.responses.create({
    model: "sdk-model",
    input: "pick a file",
    tools: [pickFile],
  });
  const call = first.output.find((i) => i.type === "function_call");
  const second = await client.responses.create({
    model: "sdk-model",
    previous_response_id: first.id,
    tools: [pickFile],
    input: [{ type: "function_call_output", call_id: call.call_id, output: "notes.txt" }],
  });
  return { call: { name: call.name, arguments: JSON.parse(call.arguments) }, answer: second.output_text };
});

await step("clientToolStreamed", async () => {
  const stream = client.responses.stream({
    model: "sdk-model",
    input: "pick a file",
    tools: [pickFile],
  });
  const argumentEvents = [];
  stream.on("response.function_call_arguments.done", (e) => argumentEvents.push(e.arguments));
  const final = await stream.finalResponse();
  const call = final.output.find((i) => i.type === "function_call");
  return { name: call?.name, arguments: call ? JSON.parse(call.arguments) : null, argumentEvents };
});

await step("chat", async () => {
  const c = await client.chat.completions.create({
    model: "sdk-model",
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "hello chat" },
    ],
  });
  return {
    object: c.object,
    text: c.choices[0].message.content,
    finish: c.choices[0].finish_reason,
    totalTokens: c.usage?.total_tokens ?? null,
  };
});

await step("chatStreamed", async () => {
  const stream = await client.chat.completions.create({
    model: "sdk-model",
    messages: [{ role: "user", content: "stream chat" }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let chunks = 0;
  let finish = null;
  let totalTokens = null;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) totalTokens = chunk.usage.total_tokens;
    const choice = chunk.choices[0];
    if (choice?.delta?.content) text += choice.delta.content;
    if (choice?.finish_reason) finish = choice.finish_reason;
  }
  return { text, chunks, finish, totalTokens };
});

await step("chatStreamHelper", async () => {
  const stream = client.chat.completions.stream({
    model: "sdk-model",
    messages: [{ role: "user", content: "helper chat" }],
  });
  const final = await stream.finalChatCompletion();
  return { text: final.choices[0].message.content };
});

await step("chatClientTool", async () => {
  const messages = [{ role: "user", content: "pick a file" }];
  const first = await client.chat.completions.create({
    model: "sdk-model",
    messages,
    tools: [pickFileChat],
  });
  const message = first.choices[0].message;
  const call = message.tool_calls?.[0];
  messages.push(message, { role: "tool", tool_call_id: call.id, content: "notes.txt" });
  const second = await client.chat.completions.create({
    model: "sdk-model",
    messages,
    tools: [pickFileChat],
  });
  return {
    finish: first.choices[0].finish_reason,
    call: { name: call.function.name, arguments: JSON.parse(call.function.arguments) },
    answer: second.choices[0].message.content,
  };
});

await step("chatClientToolStreamed", async () => {
  const stream = client.chat.completions.stream({
    model: "sdk-model",
    messages: [{ role: "user", content: "pick a file" }],
    tools: [pickFileChat],
  });
  const final = await stream.finalChatCompletion();
  const call = final.choices[0].message.tool_calls?.[0];
  return {
    finish: final.choices[0].finish_reason,
    name: call?.function?.name,
    arguments: call ? JSON.parse(call.function.arguments) : null,
  };
});

await step("models", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  return { ids };
});

await step("badRequest", async () => {
  await client.responses.create({ model: "sdk-model", input: "x", temperature: "hot" });
  return { unexpected: "no error" };
});

process.stdout.write(JSON.stringify(report) + "\n");
