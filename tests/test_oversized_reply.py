"""A model reply over Temporal's payload limit is paid once and cut to fit, never failed: without
the bound the activity's result is refused (PayloadsTooLarge), and every retry pays again."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from temporalio.client import Client

from durable_agent.activities.result_store import result_store
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.transcript import AssistantMessage
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import FAST_MODEL_RETRY, TRUSTED, run_agent

HUGE = 3_000_000
"""Characters: over the 2 MB a payload may be."""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


def openai_input(tools: list[str] | None = None) -> AgentInput:
    return AgentInput(
        prompt="Write it all out.",
        tools=tools or [],
        model=ModelSettings(provider="openai", model="gpt-test", retry=FAST_MODEL_RETRY),
        tool_approval=TRUSTED,
    )


async def test_a_huge_answer_is_paid_once_and_kept_whole(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    text = "START" + "z" * HUGE + "END"
    fake.script = [Reply(text), Reply(text)]
    run = await run_agent(client, task_queue, openai_input())

    assert run.result is not None, run.error
    assert len(fake.requests) == 1, "the reply was paid for once"
    answer = run.result.answer
    assert answer.startswith("START") and answer.endswith("END") and len(answer) <= 64_000
    ref = re.search(r"the whole reply is kept as (r-[0-9a-f]+)", answer)
    assert ref is not None, answer[:200]
    kept = result_store().get(ref[1])
    assert kept is not None and AssistantMessage.model_validate_json(kept).content == text


async def test_huge_tool_arguments_do_not_run_the_tool_and_the_model_is_told(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    arguments = json.dumps({"label": "w" * HUGE})
    fake.script = [
        Reply("Writing.", tool_calls=[("call_a", "write_thing", arguments)]),
        Reply("ok"),
    ]
    run = await run_agent(client, task_queue, openai_input(tools=["write_thing"]))

    assert run.result is not None and run.result.answer == "ok", run.error
    assert len(fake.requests) == 2
    result = run.tool_results()["call_a"]
    assert "must be a JSON object" in result and "did not run" in result
    sent = fake.requests[1].body["messages"]
    asked = next(m for m in sent if m["role"] == "assistant")
    assert "call again with smaller arguments" in asked["tool_calls"][0]["function"]["arguments"]
