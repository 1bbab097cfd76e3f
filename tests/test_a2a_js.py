"""A2A's other clients: the official JavaScript one (`@a2a-js/sdk` from npm) against real serve
processes, and both of docs/agent-protocols.md's examples, run as the page has them."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import types
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_agent.demo import tools as demo_tools
from tests import a2a_served
from tests.doc_examples import DOCS
from tests.helpers import npm_installed, tsc_compiled
from tests.serve_process import TOKEN

JS_CLIENT = Path(__file__).parent / "a2a_js_client"
PAGE = DOCS / "agent-protocols.md"

# The module's serve processes and worker (tests/a2a_served.py).
queue, worker = a2a_served.queue, a2a_served.worker
plain, gated = a2a_served.plain, a2a_served.gated


def a2a_section() -> str:
    return PAGE.read_text().split("\n## A2A\n", 1)[1].split("\n## ", 1)[0]


def example(fence: str) -> str:
    """The section's first block fenced as `fence`."""
    return a2a_section().split(f"```{fence}\n", 1)[1].split("\n```", 1)[0] + "\n"


@pytest.fixture(scope="module")
def js_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/a2a_js_client with @a2a-js/sdk installed from npm, and the page's TypeScript
    example as ask.ts, compiled by tsc (strict) to ask.js against the SDK's declarations, in a
    directory of their own (the checkout gets no node_modules)."""
    where = tmp_path_factory.mktemp("a2a-js-client")
    (where / "ask.ts").write_text(example("ts"))
    npm_installed(JS_CLIENT, where, ("package.json", "tsconfig.json", "checks.mjs"))
    return tsc_compiled(where)


async def node(where: Path, *words: str) -> str:
    env = {**os.environ, "AGENT_API_TOKEN": TOKEN}
    ran = await asyncio.create_subprocess_exec(
        shutil.which("node") or "node",
        *words,
        cwd=where,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(ran.communicate(), timeout=90)
    assert ran.returncode == 0, err.decode()
    return out.decode()


def base(api: httpx.AsyncClient) -> str:
    return str(api.base_url).rstrip("/")


async def test_the_js_client_runs_follows_up_reads_cancels_and_is_refused_without_the_token(
    plain: httpx.AsyncClient, gated: httpx.AsyncClient, js_client: Path
) -> None:
    said: dict[str, Any] = json.loads(await node(js_client, "checks.mjs", base(plain), base(gated)))
    first, second = said["first"], said["second"]
    assert (first["state"], first["answer"]) == ("TASK_STATE_COMPLETED", ["The first answer."])
    assert first["id"] == f"{first['contextId']}#1"
    assert (second["id"], second["answer"]) == (f"{first['contextId']}#2", ["The second answer."])
    assert said["got"] == first
    assert said["unknown"].startswith("JsonRpcTaskNotFoundError: no task ")
    assert said["waiting"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert said["waitingFor"]["calls"][0]["tool"] == "cancel_order"
    assert said["waitingFor"]["calls"][0]["arguments"] == {"order_id": 104998, "reason": "asked"}
    assert said["resubscribed"] == ["TASK_STATE_INPUT_REQUIRED"]
    assert said["cancelled"]["state"] == "TASK_STATE_CANCELED"
    assert [c["tool"] for c in demo_tools.applied_calls()] == ["issue_refund", "undo issue_refund"]
    for refused in (said["noToken"], said["wrongToken"]):
        assert "401" in refused


async def test_the_pages_typescript_example_type_checks_approves_what_waits_and_prints_the_answer(
    gated: httpx.AsyncClient, js_client: Path
) -> None:
    printed = await node(js_client, "ask.js", base(gated), "Refund and cancel, please.")
    lines = printed.splitlines()
    assert lines[0] == "Tool calls wait for approval: cancel_order (call_2_1)"
    assert lines[-1] == "Done."
    assert demo_tools.get_order(104998)["status"] == "cancelled"


async def test_the_pages_python_example_approves_what_waits_and_answers(
    gated: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    module = types.ModuleType("agent_protocols_a2a_example")
    exec(compile(example("python"), str(PAGE), "exec"), module.__dict__)
    answer = await module.ask(base(gated), TOKEN, "Refund and cancel, please.")
    assert answer == "Done."
    assert capsys.readouterr().out.startswith("Tool calls wait for approval: cancel_order")
    assert demo_tools.get_order(104998)["status"] == "cancelled"
