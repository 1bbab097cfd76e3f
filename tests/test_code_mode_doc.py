"""docs/code-mode.md's complete example, run as it stands there against the session's dev
server: the model reads what the page says it reads, the history holds the calls and legs the
page counts, and the trace shows the script with its calls under it."""

from __future__ import annotations

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.cli.tables import trace_table
from tests.doc_examples import example_module, section
from tests.helpers import run_agent


async def test_the_documented_example_does_what_the_page_says(
    client: Client, task_queue: str
) -> None:
    example = example_module("code-mode.md")
    example.CREDITS.clear()

    run = await run_agent(client, task_queue, example.agent_input)

    assert run.result is not None, run.error
    assert run.result.steps == 2
    reads = section("code-mode.md").split("```text\n")[1].split("```", 1)[0]
    assert run.tool_results()["script_1"] == reads.rstrip("\n")
    assert example.CREDITS == [{"email": "a@b.com", "amount": 41.0}]
    history = await run.handle.fetch_history()
    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled.count("lookup_order") == 20
    assert scheduled.count("credit_customer") == 1
    assert scheduled.count("run_script") == 3
    shown = section("code-mode.md").split("```text\n")[2].split("```", 1)[0].splitlines()
    table = trace_table(run.trace).splitlines()
    at = table.index(shown[0])
    assert table[at + 1 : at + 3] == shown[1:3]
    last = [line for line in table if line.startswith("  script_1.21 ")]
    assert len(last) == 1 and last[0].split()[:3] == shown[-1].split()[:3]
    assert last[0].endswith('{"email": "a@b.com", "amount": 41.0}')
