"""docs/code-mode.md's complete example, run as it stands there against the session's dev
server: the model reads what the page says it reads, the history holds the calls and legs the
page counts, and the trace shows the script with its calls under it."""

from __future__ import annotations

import functools
import types
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.cli.tables import trace_table
from tests.helpers import run_agent

DOC = Path(__file__).resolve().parent.parent / "docs" / "code-mode.md"


def section() -> str:
    return DOC.read_text().split("\n## A complete example\n", 1)[1].split("\n## ", 1)[0]


@functools.cache
def documented_example() -> types.ModuleType:
    """The section's code, as a module of its own. Once a process: its @tool registers."""
    code = section().split("```python\n", 1)[1].split("```", 1)[0]
    module = types.ModuleType("code_mode_example")
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


async def test_the_documented_example_does_what_the_page_says(
    client: Client, task_queue: str
) -> None:
    example = documented_example()
    example.CREDITS.clear()

    run = await run_agent(client, task_queue, example.agent_input)

    assert run.result is not None, run.error
    assert run.result.steps == 2
    reads = section().split("```text\n")[1].split("```", 1)[0]
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
    shown = section().split("```text\n")[2].split("```", 1)[0].splitlines()
    table = trace_table(run.trace).splitlines()
    at = table.index(shown[0])
    assert table[at + 1 : at + 3] == shown[1:3]
    last = [line for line in table if line.startswith("  script_1.21 ")]
    assert len(last) == 1 and last[0].split()[:3] == shown[-1].split()[:3]
    assert last[0].endswith('{"email": "a@b.com", "amount": 41.0}')
