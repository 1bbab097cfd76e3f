"""The scripted provider as docs/providers.md describes it and a user meets it: through the
client, and through `--script` on the command line (in a subprocess, with docs/cli.md's
example), against the session's dev server."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_agent.activities.providers import scripted
from durable_agent.cli import starter as starter_cli
from durable_agent.client.agent_client import AgentClient, AgentRunFailed
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from durable_agent.workflows.transcript import AssistantMessage
from tests.helpers import TEST_WORKER_OPTIONS, call, turn

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Where is my latest order? My email is a@b.com."


def section(page: str, heading: str) -> str:
    """A docs page's section, from its heading to the next heading of any level."""
    text = (REPO / "docs" / page).read_text()
    assert heading in text, f"docs/{page} has no {heading!r}"
    return re.split(r"\n#+ ", text.split(heading, 1)[1], maxsplit=1)[0]


def reference() -> str:
    return section("providers.md", "\n## The scripted model\n")


async def starter(*argv: str, timeout: float = 60) -> tuple[int, str, str]:
    """starter.py in a child process, as a user runs it: (exit code, stdout, stderr)."""
    hidden = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *argv,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


# --- the reference -------------------------------------------------------------------------------


def test_the_reference_names_every_field_of_a_turn_and_a_call() -> None:
    """A field added to ScriptedTurn or ScriptedCall fails this until its row is written."""
    text = reference()
    for model in (ScriptedTurn, ScriptedCall):
        rows = re.findall(r"^\| `(\w+)` \|", text.split(f"| `{model.__name__}` |", 1)[1], re.M)
        assert set(model.model_fields) <= set(rows), (model.__name__, rows)


async def test_placeholders_fill_the_text_from_the_newest_result(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    script = [
        turn(call("get_order", order_id=1042)),
        turn(text="Order {last_tool_result.id} is {last_tool_result.status}. {braces} stay"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(
            AgentInput(prompt="hi", tools=["get_order"], model=ModelSettings(script=script))
        )
        result = await run.result()
    assert result.answer == "Order 1042 is delivered. {braces} stay"


async def test_a_run_that_asks_for_a_reply_the_script_has_not_fails_as_documented(
    client: Client, task_queue: str
) -> None:
    quoted = re.search(r"`ScriptedModelMismatch`: `([^`]*)\.\.\.`", reference())
    assert quoted, "the reference quotes no ScriptedModelMismatch"
    agents = AgentClient(client, task_queue)
    # Two replies, as the quoted message has; the first is empty, so the loop asks again.
    script = [turn(), turn(call("get_order", order_id=1042), expect="Your reply was empty")]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(
            AgentInput(prompt="hi", tools=["get_order"], model=ModelSettings(script=script))
        )
        with pytest.raises(AgentRunFailed) as failed:
            await run.result()
    assert failed.value.type == "ScriptedModelMismatch"
    documented = " ".join(quoted.group(1).split())  # as the page wraps it
    assert failed.value.message.startswith(documented), failed.value.message
    assert failed.value.details.steps == 2  # failed at once: no retry, no third step


async def test_tokens_are_four_characters_each_of_what_the_request_carries(
    client: Client, task_queue: str, scripted_requests: None
) -> None:
    agents = AgentClient(client, task_queue)
    script = [turn(call("get_order", order_id=1042), text="Looking."), turn(text="Delivered.")]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(
            AgentInput(
                prompt="Where is order 1042?",
                system="You are terse.",
                tools=["get_order"],
                model=ModelSettings(script=script),
            )
        )
        result = await run.result()
        transcript = await run.transcript()
        requests = scripted.recorded_requests(run.id)
    replies = [m for m in transcript if isinstance(m, AssistantMessage)]
    for request, record, reply in zip(requests, result.step_records, replies, strict=True):
        sent = (
            len(request.system or "")
            + len(json.dumps([m.model_dump(mode="json") for m in request.messages]))
            + len(json.dumps([t.model_dump(mode="json") for t in request.tools]))
        )
        assert record.usage.input_tokens == math.ceil(sent / 4)
        assert record.usage.output_tokens == math.ceil(len(reply.model_dump_json()) / 4)
        assert record.usage.cached_input_tokens == 0 and record.usage.cost_usd is None


# --- the model's name ----------------------------------------------------------------------------


async def test_a_script_reports_the_model_it_was_given_and_otherwise_scripted(
    client: Client, task_queue: str
) -> None:
    """Not the demo's `scripted-demo`: a user's script is not the demo."""
    agents = AgentClient(client, task_queue)
    script = [ScriptedTurn(text="hi")]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        unnamed = await agents.start(
            AgentInput(prompt="hi", model=ModelSettings(provider="scripted", script=script))
        )
        named = await agents.start(
            AgentInput(prompt="hi", model=ModelSettings(model="order-bot-v2", script=script))
        )
        results = [await unnamed.result(), await named.result()]
    assert [r.step_records[0].model for r in results] == ["scripted", "order-bot-v2"]


def test_a_provider_without_a_model_gets_its_own_default() -> None:
    """Not the scripted demo's name, which no real provider knows."""
    assert ModelSettings(provider="anthropic").model == "claude-sonnet-4-6"
    assert ModelSettings(provider="openai").model == "gpt-4o-mini"
    assert ModelSettings().model == "scripted"


# --- the command line ----------------------------------------------------------------------------


async def test_the_documented_script_runs_from_the_command_line_as_scripted(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """docs/cli.md's order.json and command, as they stand there, in a child process."""
    example = section("cli.md", "\n### A script for the scripted model\n")
    script = example.split("```json\n", 1)[1].split("```", 1)[0]
    (command,) = example.split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()
    program, *argv = shlex.split(command)
    assert program == "starter.py" and "order.json" in argv
    path = tmp_path / "order.json"
    path.write_text(script)
    argv = [str(path) if word == "order.json" else word for word in argv]
    address = temporal_env.client.service_client.config.target_host
    async with build_worker(temporal_env.client, task_queue, **TEST_WORKER_OPTIONS):
        code, out, err = await starter(
            *argv, "--address", address, "--task-queue", task_queue, "--json"
        )
    assert code == 0, err
    printed = json.loads(out)
    assert printed["answer"].startswith("Order #1042 went by UPS: Delivered "), printed
    assert "at 14:20 UTC (yesterday)." in printed["answer"]
    trace = printed["trace"]
    assert [step["model"] for step in trace] == ["scripted"] * 3
    assert [c["id"] for c in trace[1]["tool_calls"]] == ["track-1042"]
    given = {"input_tokens": 3000, "output_tokens": 40}
    assert {key: trace[1]["usage"][key] for key in given} == given
    # The demo keeps its own name.
    code, out, err = await starter(PROMPT, "--print-input")
    assert code == 0, err
    assert json.loads(out)["model"]["model"] == "scripted-demo"


def test_a_script_that_is_not_a_list_of_turns_is_refused_saying_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "order.json"
    path.write_text('[{"text": "hi"}, {"calls": [{"arguments": {}}]}]')

    assert starter_cli.main([PROMPT, "--script", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"starter.py: error: --script {path}: reply 2, calls.0.name: Field required (see --help)\n"
    )
