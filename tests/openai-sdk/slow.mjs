#!/usr/bin/env node
// A streamed `responses.create` and a streamed `chat.completions.create` through a client
// whose timeout (2 s, no retries) is shorter than the turn, for tests/gateway_sdk.rs: the
// SDK times a request out until its answer's headers come, so a gateway that holds a
// streamed answer back until the turn has text fails a long turn.
//
// Usage: node slow.mjs <gateway base URL>
// stdout: ONE JSON object: {"responses": text or {"error"}, "chat": text or {"error"}}.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.argv[2],
  apiKey: "sk-test-not-a-real-key",
  maxRetries: 0,
  timeout: 2_000,
});

async function responses() {
  const stream = await client.responses.create({ model: "m", input: "slow", stream: true });
  let text = "";
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") text += event.delta;
  }
  return text;
}

async function chat() {
  const stream = await client.chat.completions.create({
    model: "m",
    messages: [{ role: "user", content: "slow" }],
    stream: true,
  });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
  return text;
}

async function attempt(f) {
  try {
    return await f();
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
}

console.log(JSON.stringify({ responses: await attempt(responses), chat: await attempt(chat) }));
