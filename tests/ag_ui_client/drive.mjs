// One AG-UI thread driven by @ag-ui/client's HttpAgent, which checks the order of the events
// itself (verifyEvents) and keeps the thread's messages. Arguments: the endpoint's URL, then
// the token. Each line on stdin is a run to make:
//   {"user": "text", "tools": [...], "context": [...]}   a user's message
//   {"tool": {"toolCallId": "...", "content": "..."}, "tools": [...]}   a client tool's result
//   {"resume": [{"interruptId": "...", "status": "resolved", "payload": {...}}]}
// Each event is printed as {"event": ...} as it comes, then {"done": ...} or {"error": ...}.
import { HttpAgent } from "@ag-ui/client";
import { createInterface } from "node:readline";

const [url, token, threadId] = process.argv.slice(2);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const agent = new HttpAgent({ url, headers, threadId });
const say = (line) => process.stdout.write(JSON.stringify(line) + "\n");
let next = 0;

for await (const line of createInterface({ input: process.stdin })) {
  const asked = JSON.parse(line);
  if (asked.user !== undefined) {
    agent.addMessage({ id: `user-${next++}`, role: "user", content: asked.user });
  }
  if (asked.tool !== undefined) {
    agent.addMessage({ id: `tool-${next++}`, role: "tool", ...asked.tool });
  }
  try {
    const { result, newMessages } = await agent.runAgent(
      { tools: asked.tools ?? [], context: asked.context ?? [], resume: asked.resume },
      { onEvent: ({ event }) => say({ event }) },
    );
    say({ done: { result, newMessages, interrupts: agent.pendingInterrupts } });
  } catch (error) {
    say({ error: String(error.message ?? error), status: error.status ?? null });
  }
}
