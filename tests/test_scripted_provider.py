"""The scripted provider as a user meets it: through the client and through `--script` on the
command line (in a subprocess), against the session's dev server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_agent.cli import starter as starter_cli
from durable_agent.client.agent_client import AgentClient
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import AgentInput, ModelSettings, ScriptedTurn
from tests.helpers import TEST_WORKER_OPTIONS

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Where is my latest order? My email is a@b.com."


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


async def test_a_script_run_from_the_command_line_is_not_labelled_the_demo(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    script: list[dict[str, Any]] = [
        {"calls": [{"name": "search_orders", "arguments": {"email": "a@b.com"}}]},
        {"text": "Your latest order is #1042."},
    ]
    path = tmp_path / "order.json"
    path.write_text(json.dumps(script))
    address = temporal_env.client.service_client.config.target_host
    following = ("--address", address, "--task-queue", task_queue, "--json", "--trace")
    async with build_worker(temporal_env.client, task_queue, **TEST_WORKER_OPTIONS):
        code, out, err = await starter(PROMPT, "--script", str(path), *following)
    assert code == 0, err
    printed = json.loads(out)
    assert printed["answer"] == "Your latest order is #1042."
    assert [step["model"] for step in printed["trace"]] == ["scripted", "scripted"]
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
