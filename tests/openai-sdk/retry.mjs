#!/usr/bin/env node
// One `responses.create` with the SDK's own retries on (2, its default), for
// tests/gateway_sdk.rs to count how often the gateway's provider was asked: the SDK
// retries a 5xx on its own unless the answer says `x-should-retry: false`.
//
// Usage: node retry.mjs <gateway base URL>
// stdout: ONE JSON object: {"status", "shouldRetry", "message"} of the error, or {"text"}.
import { gatewayClient } from "./client.mjs";

const client = gatewayClient(2);

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
