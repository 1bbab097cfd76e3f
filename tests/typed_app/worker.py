"""The app's worker: the agent beside the app's own work, with stores of its own."""

import asyncio

from temporalio.client import Client
from temporalio.worker import Worker

from durable_agent import (
    Admission,
    AgentPlugin,
    McpConfig,
    ProviderLimits,
    SqliteMessageStore,
    SqliteResultStore,
    Stores,
)


async def main() -> None:
    plugin = AgentPlugin(
        tools=["activities"],  # the app's tools, as --tools names them
        stores=Stores(
            messages=SqliteMessageStore("app-data/messages.db"),
            results=SqliteResultStore("app-data/results.db"),
        ),
        mcp=McpConfig(),
        admission=Admission(providers={"openai": ProviderLimits(concurrency=4)}),
    )
    client = await Client.connect("localhost:7233", plugins=[plugin])
    async with Worker(client, task_queue="orders"):
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
