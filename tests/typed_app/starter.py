"""The app starts a run, answers its callback, reviews what waits, and reads the outcome."""

import asyncio

from temporalio.client import Client

from activities import Location
from durable_agent import (
    AgentClient,
    AgentInput,
    AgentPlugin,
    AgentRunFailed,
    Limits,
    ModelSettings,
    ToolApprovalPolicy,
    waiting_runs,
)


async def main() -> None:
    client = await Client.connect("localhost:7233", plugins=[AgentPlugin()])
    agents = AgentClient(client, task_queue="orders")
    run = await agents.start(
        AgentInput(
            prompt="Cancel order 1042 and tell the customer.",
            tools=["get_invoice", "cancel_order", "send_email", "user_location"],
            model=ModelSettings(provider="openai", model="gpt-4o-mini"),
            limits=Limits(max_steps=10, max_cost_usd=0.50),
            tool_approval=ToolApprovalPolicy(predicates=["small_refunds", "known_orders"]),
        )
    )
    for waiting in await waiting_runs(agents):
        print(waiting.workflow_id, [call.call_id for call in waiting.calls])
    for callback in await run.pending_callbacks():
        await run.answer_callback(callback.call_id, Location(city="Lisbon", accuracy_m=5000))
    try:
        result = await run.result()
        print(result.answer, result.steps, result.usage.cost_usd)
    except AgentRunFailed as failed:
        print(failed.type, failed.message, failed.details.compensations)


if __name__ == "__main__":
    asyncio.run(main())
