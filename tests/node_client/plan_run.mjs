// Start a plan-mode agent run from Node with @temporalio/client, approve its plan with the
// decide_plan update once the status query shows it waiting, and print the result as JSON.
// Everything it sends and reads is what `durable-agent contract` describes; the input is what
// `durable-agent --plan --print-input` printed. Usage: node plan_run.mjs ADDRESS QUEUE ID < input
import { readFileSync } from 'node:fs';
import { Client, Connection } from '@temporalio/client';

const [address, taskQueue, workflowId] = process.argv.slice(2);
const input = JSON.parse(readFileSync(0, 'utf8'));
const connection = await Connection.connect({ address });
const client = new Client({ connection, namespace: 'default' });

const handle = await client.workflow.start('AgentWorkflow', {
  taskQueue,
  workflowId,
  args: [input],
});
let status;
for (let tries = 0; tries < 300; tries++) {
  status = await handle.query('status');
  if (status.plan && status.plan.status === 'awaiting_approval') break;
  await new Promise((resolve) => setTimeout(resolve, 100));
}
if (!status.plan || status.plan.status !== 'awaiting_approval') {
  throw new Error(`no plan waited: ${JSON.stringify(status)}`);
}
const decided = await handle.executeUpdate('decide_plan', {
  args: [{ approve: true, version: status.plan.version }],
});
const result = await handle.result();
console.log(JSON.stringify({ waited: status.plan, decided, result }));
await connection.close();
