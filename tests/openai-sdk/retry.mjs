#!/usr/bin/env node
// One `responses.create` with the SDK's own retries on (2, its default), for
// tests/gateway_sdk.rs to count how often the gateway's provider was asked: the SDK
// retries a 5xx on its own unless the answer says `x-should-retry: false`.
//
// Usage: node retry.mjs <gateway base URL>
// stdout: ONE JSON object: {"status", "shouldRetry", "message"} of the error, or {"text"}.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.argv[2],
  apiKey: "sk-test-not-a-real-key",
  maxRetries: 2,
  timeout: 60_000,
});

try {
  const r = await client.responses.create({ model: "m", input: "search, then fail" });
  console.log(JSON.stringify({ text: r.output_text }));
} catch (e) {
  console.log(
    JSON.stringify({
      status: e.status ?? null,
      shouldRetry: e.headers?.get?.("x-should-retry") ?? null,
      message: String(e.message ?? e),
    }),
  );
}
