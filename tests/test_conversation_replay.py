"""A conversation that continued as new while it waited between turns replays, whatever queries
reached it as it started (versioning.CONTINUED_WAIT_SETTLES).

Its new run lists the tools by local activity, then waits. A status query that came while that
activity ran made the server close the task early, and the wait's patch (`drops-unknown-signals`)
was recorded in the next task; a replay asks it in the first, so it failed with a nondeterminism
error, every time, here: after a worker restart such a run's task would fail for good. The wait
now begins after a timer, in a task of its own."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from temporalio.client import Client

from durable_agent.client.agent_client import AgentClient, AgentRun
from durable_agent.serving.worker import build_worker
from tests.helpers import TEST_WORKER_OPTIONS, call, chain_histories, scripted_input, turn
from tests.test_replay import replayer

ATTEMPTS = 3
"""Each attempt failed on the code before the fix (12 of 12 in a row)."""


async def test_a_continued_conversation_queried_as_it_starts_replays(
    client: Client, task_queue: str
) -> None:
    failures = []
    for attempt in range(ATTEMPTS):
        script = [turn(call("count_me", key=f"k-{uuid.uuid4()}")), turn(text="one")]
        agent_input = scripted_input(
            script,
            tools=["count_me"],
            conversation=True,
            prompt="first",
            continue_as_new_after_steps=2,
        )
        async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
            run = await AgentClient(client, task_queue).start(
                agent_input, workflow_id=f"talk-{uuid.uuid4()}"
            )
            first_run = run.handle.first_execution_run_id
            querying = asyncio.Event()
            querying.set()

            async def query(run: AgentRun, querying: asyncio.Event) -> None:
                while querying.is_set():  # a console, a CLI, a service reading the run's status
                    with contextlib.suppress(Exception):  # between runs of the chain, say
                        await run.status()
                    await asyncio.sleep(0.005)

            queries = [asyncio.create_task(query(run, querying)) for _ in range(3)]
            for _ in range(400):  # until the second run of the chain has started, and waits
                if (await run.handle.describe()).run_id != first_run:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)
            querying.clear()
            await asyncio.gather(*queries)
            assert (await run.status()).status != "failed"
            await run.end()
            histories = await chain_histories(client, run.id, first_run)
        assert len(histories) == 2, "the conversation continued as new once"
        for index, history in enumerate(histories):
            replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
            if replayed.replay_failure is not None:
                failures.append((attempt, index, str(replayed.replay_failure)[:300]))
    assert failures == []
