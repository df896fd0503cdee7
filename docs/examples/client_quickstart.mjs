// Start a run, stream it, approve what it asks, stream to done (Node 20+, `npm install @tether/client`).
import { TetherClient } from "@tether/client";

const client = new TetherClient({
  baseUrl: process.env.TETHER_URL ?? "http://127.0.0.1:8080",
  token: process.env.TETHER_TOKEN, // `make run` prints one for alice
});

const conversation = await client.createConversation({ title: "quickstart" });
const run = await client.startRun(conversation.id, "restart payment-api-2 in prod", { stream: true });

// Events arrive in order, each once, even across reconnects; the loop ends with the run.
for await (const event of run) {
  if (event.type === "tool_started") console.log(`→ ${event.tool} ${event.argsSummary}`);
  if (event.type === "interrupt") {
    console.log(`? ${event.payload.title}: ${event.payload.target} (${event.payload.risk} risk)`);
    await client.approve(run.runId, event.interruptId);
  }
  if (event.type === "interrupt_resolved") console.log(`✓ ${event.decision} by ${event.resolvedBy}`);
  if (event.type === "text_delta") process.stdout.write(event.delta);
  if (event.type === "done") console.log(`\ndone (${event.usage.outputTokens} tokens out)`);
  if (event.type === "error") throw new Error(`${event.code}: ${event.message}`);
}
