"""docs/guardrails.md's complete example, run as it stands there against the session's dev
server: the model reads what the page says it reads in the card number's place, the card
number is in no model request, and the trace shows the verdicts the page shows."""

from __future__ import annotations

import json
import re

from temporalio.client import Client

from durable_agent.cli.tables import trace_table
from tests.doc_examples import example_module, section
from tests.helpers import run_agent


async def test_the_documented_example_does_what_the_page_says(
    client: Client, task_queue: str
) -> None:
    example = example_module("guardrails.md")

    run = await run_agent(client, task_queue, example.agent_input)

    assert run.result is not None, run.error
    reads, shown = (
        block.split("```", 1)[0] for block in section("guardrails.md").split("```text\n")[1:3]
    )
    assert run.tool_results()["call_1_1"] == reads.rstrip("\n")
    assert "4111" not in json.dumps([m.model_dump() for m in run.transcript])
    history = await run.handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert [n for n in scheduled if n.startswith("guardrail:")] == [
        "guardrail:on_topic",
        "guardrail:no_card_numbers",
        "guardrail:no_card_numbers",
    ]
    table = trace_table(run.trace).splitlines()
    assert [latency_free(line) for line in table[-2:]] == shown.splitlines()


def latency_free(line: str) -> str:
    """The line as the page shows it: a check's latency differs from run to run."""
    return re.sub(r", \d+ms\)", ", 0ms)", line)
