// The one SDK client both scripts use: the official OpenAI client pointed at the gateway
// named on the command line, with a key the gateway does not check.
import OpenAI from "openai";

export function gatewayClient(maxRetries) {
  return new OpenAI({
    baseURL: process.argv[2],
    apiKey: "sk-test-not-a-real-key",
    maxRetries,
    timeout: 60_000,
  });
}
