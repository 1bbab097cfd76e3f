// node checks.mjs PLAIN_URL GATED_URL (with $AGENT_API_TOKEN set): what tests/test_a2a_js.py
// asserts, printed as one JSON object. Each step is a call of the official client.
import { randomUUID } from "node:crypto";
import { Role, TaskState } from "@a2a-js/sdk";
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";

const [plainUrl, gatedUrl] = process.argv.slice(2);

function clientOf(url, token) {
  function withToken(target, init = {}) {
    const headers = new Headers(init.headers);
    if (token) headers.set("Authorization", `Bearer ${token}`);
    return fetch(target, { ...init, headers });
  }
  const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: withToken })],
  });
  return new ClientFactory(options).createFromUrl(url);
}

const text = (value, more = {}) => ({
  messageId: randomUUID(),
  role: Role.ROLE_USER,
  parts: [{ content: { $case: "text", value } }],
  ...more,
});
const shown = (task) => ({
  id: task.id,
  contextId: task.contextId,
  state: TaskState[task.status.state],
  answer: task.artifacts.map((a) => a.parts[0].content.value),
});

const said = {};
const plain = await clientOf(plainUrl, process.env.AGENT_API_TOKEN);
const first = await plain.sendMessage({ message: text("Where is order 1042?") });
said.first = shown(first);
const second = await plain.sendMessage({
  message: text("And order 1043?", { contextId: first.contextId }),
});
said.second = shown(second);
said.got = shown(await plain.getTask({ id: first.id }));
try {
  await plain.getTask({ id: `${first.contextId}#9` });
  said.unknown = "found";
} catch (error) {
  said.unknown = `${error.constructor.name}: ${error.message}`;
}

const gated = await clientOf(gatedUrl, process.env.AGENT_API_TOKEN);
const waiting = await gated.sendMessage({ message: text("Refund and cancel, please.") });
said.waiting = shown(waiting);
said.waitingFor = waiting.status.message.parts[1].content.value;
const resubscribed = [];
for await (const { payload } of gated.resubscribeTask({ id: waiting.id })) {
  resubscribed.push(payload.$case === "task" ? TaskState[payload.value.status.state] : payload.$case);
}
said.resubscribed = resubscribed;
said.cancelled = shown(await gated.cancelTask({ id: waiting.id }));

for (const [name, token] of [["noToken", ""], ["wrongToken", "wrong-token-0123456789"]]) {
  const refused = await clientOf(plainUrl, token);
  try {
    await refused.sendMessage({ message: text("Where is order 1042?") });
    said[name] = "sent";
  } catch (error) {
    said[name] = String(error.message);
  }
}
console.log(JSON.stringify(said));
