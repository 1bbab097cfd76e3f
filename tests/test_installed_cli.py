"""The installed `durable-agent` command in a subprocess, as a pip user meets it (issue 48): it
names itself as it was typed, so what it tells a person to paste can be pasted; a run against a
user's worker (`--address`) plays no part of the demo, and a user's worker creates nothing of
it; `--tool` chooses a run's tools among the worker's; `stats` counts every run once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.client import Client

from durable_agent.activities.providers import scripted
from durable_agent.client.agent_client import AgentRunFailed
from durable_agent.demo import script as demo
from durable_agent.workflows.model_settings import ScriptedTurn
from tests.helpers import call, eventually, turn
from tests.serve_process import CLI
from tests.test_agent_client import serving

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Where is my latest order? My email is a@b.com."


async def durable_agent(*argv: str) -> tuple[int, str, str]:
    """The installed command to its end: (exit status, stdout, stderr)."""
    done = await asyncio.create_subprocess_exec(
        CLI,
        *argv,
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(done.communicate(), 90)
    assert done.returncode is not None
    return done.returncode, out.decode(), err.decode()


def script_file(tmp_path: Path, *turns: ScriptedTurn) -> str:
    path = tmp_path / f"script-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps([t.model_dump(mode="json") for t in turns]))
    return str(path)


# The program's name ------------------------------------------------------------------------


async def test_the_command_names_itself_as_it_was_typed() -> None:
    code, out, err = await durable_agent("--help")
    assert code == 0 and out.startswith("usage: durable-agent [OPTIONS] [PROMPT]"), out
    code, out, err = await durable_agent("calls", "--help")
    assert code == 0 and out.startswith("usage: durable-agent calls "), out
    code, out, err = await durable_agent("worker", "--help")
    assert code == 0 and out.startswith("usage: durable-agent worker "), out

    code, out, err = await durable_agent(PROMPT, "--nope")
    assert (code, out) == (2, "")
    assert err.startswith("durable-agent: error: No such option '--nope'"), err
    code, out, err = await durable_agent("approve-call", "agent-1")
    assert (code, err) == (
        2,
        "durable-agent approve-call: error: Missing argument 'CALL_ID' (see --help)\n",
    )
    code, out, err = await durable_agent("contract", "--nope")
    assert code == 2 and err.startswith("durable-agent contract: error: No such option"), err
    code, out, err = await durable_agent(PROMPT, "--no-wait", "--trace", "--address", "x:1")
    assert code == 2 and "use `durable-agent trace WORKFLOW_ID` later" in err, err

    # The checkout's script and `python -m` say what was typed there.
    for typed, name in (
        ([sys.executable, "starter.py"], "starter.py"),
        (
            [sys.executable, "-m", "durable_agent.cli.starter"],
            "python -m durable_agent.cli.starter",
        ),
    ):
        done = await asyncio.create_subprocess_exec(
            *typed, "--nope", cwd=REPO, stderr=asyncio.subprocess.PIPE
        )
        _, err_bytes = await done.communicate()
        assert done.returncode == 2
        assert err_bytes.decode().startswith(f"{name}: error: No such option '--nope'")


async def test_the_command_a_waiting_call_names_can_be_pasted(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A run started against a worker prints how to decide its call that waits: that line,
    pasted, decides it."""
    address = client.service_client.config.target_host
    script = script_file(
        tmp_path,
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(text="Cancelled.", expect='"cancelled": true'),
    )
    async with serving(client, task_queue):
        following = await asyncio.create_subprocess_exec(
            CLI,
            "Cancel 104999.",
            "--script",
            script,
            "--address",
            address,
            "--task-queue",
            task_queue,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert following.stderr is not None
        said: list[str] = []
        async with asyncio.timeout(60):
            while not said or not said[-1].startswith("decide with: "):
                line = await following.stderr.readline()
                assert line, "".join(said)
                said.append(line.decode())
        hint = said[-1].removeprefix("decide with: ")
        approve = shlex.split(hint.split(" [--remember]")[0])
        assert approve[:2] == ["durable-agent", "approve-call"], hint
        assert ", or durable-agent deny-call " in hint, hint
        code, _, err = await durable_agent(*approve[1:])
        assert code == 0, err
        answer, rest = await asyncio.wait_for(following.communicate(), 60)
    assert following.returncode == 0, "".join(said) + rest.decode()
    assert answer.decode() == "Cancelled.\n"


# The demo stays the demo's ----------------------------------------------------------------


async def test_a_run_against_a_users_worker_has_no_system_prompt_unless_given(
    tmp_path: Path,
) -> None:
    script = script_file(tmp_path, turn(text="hello"))
    against = ("--address", "127.0.0.1:7233")

    async def system_of(*argv: str) -> str | None:
        code, out, err = await durable_agent(*argv, "--print-input", PROMPT)
        assert code == 0, err
        system: str | None = json.loads(out).get("system")
        return system

    # A user's agent is not the demo's shop assistant.
    assert await system_of(*against, "--script", script) is None
    assert await system_of(*against, "--provider", "openai") is None
    assert await system_of(*against, "--provider", "anthropic", "--system", "Be terse.") == (
        "Be terse."
    )
    # The demo's runs keep it: self-contained on the demo's tools, or its scripted conversation.
    assert await system_of() == demo.SUPPORT_DEMO_SYSTEM
    assert await system_of("--provider", "openai") == demo.SUPPORT_DEMO_SYSTEM
    assert await system_of(*against) == demo.SUPPORT_DEMO_SYSTEM
    assert await system_of("--tools", "tests.retail_toolkit", "--script", script) is None


@asynccontextmanager
async def worker(address: str, task_queue: str, cwd: Path, *argv: str) -> AsyncIterator[str]:
    """`durable-agent worker` in `cwd`, with no AGENT_DEMO_DB, until it serves; then what it
    logged."""
    env = {k: v for k, v in os.environ.items() if k != "AGENT_DEMO_DB"}
    env["PYTHONPATH"] = str(REPO)  # where the tests' tool modules are
    process = await asyncio.create_subprocess_exec(
        CLI,
        "worker",
        "--address",
        address,
        "--task-queue",
        task_queue,
        *argv,
        cwd=cwd,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    said: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not said or f"task queue {task_queue}" not in said[-1]:
                line = await process.stderr.readline()
                assert line, "".join(said)
                said.append(line.decode())
        yield "".join(said)
    finally:
        process.terminate()
        await process.communicate()


async def test_a_worker_of_a_users_tools_creates_nothing_of_the_demo(
    client: Client, tmp_path: Path
) -> None:
    address = client.service_client.config.target_host
    users, demos = tmp_path / "app", tmp_path / "demo"
    users.mkdir()
    demos.mkdir()
    async with worker(
        address, f"q-{uuid.uuid4()}", users, "--tools", "tests.plugin_tools_a"
    ) as said:
        assert "serving 2 tools: alpha_lookup, read_result" in said
        assert "demo database" not in said
    assert not (users / ".agent-demo").exists()
    # A worker that serves the demo's tools (given none) has their database where it runs.
    async with worker(address, f"q-{uuid.uuid4()}", demos) as said:
        assert f"demo database {demos / '.agent-demo' / 'demo.db'}" in said
    assert (demos / ".agent-demo" / "demo.db").exists()


# Tools per run ------------------------------------------------------------------------------


async def test_tool_offers_a_run_only_the_named_tools_of_its_worker(
    client: Client, task_queue: str, tmp_path: Path, scripted_requests: None
) -> None:
    address = client.service_client.config.target_host
    script = script_file(
        tmp_path,
        turn(call("get_customer", email="a@b.com"), call("get_order", order_id=1042)),
        turn(text="Only the order.", expect="no tool named 'get_customer'"),
    )
    where = ("--address", address, "--task-queue", task_queue)
    async with serving(client, task_queue):
        code, out, err = await durable_agent(
            PROMPT,
            "--script",
            script,
            "--tool",
            "get_order",
            "--tool",
            "get_tracking",
            "--json",
            *where,
        )
        assert code == 0, err
        printed = json.loads(out)
        assert printed["answer"] == "Only the order."
        (request, *_) = scripted.recorded_requests(printed["workflow_id"])
        offered = {spec.name for spec in request.tools}
        assert {"get_order", "get_tracking"} <= offered and "get_customer" not in offered
        assert not offered & {"search_orders", "cancel_order", "send_email"}

        # A tool the worker does not serve fails the run at once, naming it.
        code, out, err = await durable_agent(
            PROMPT, "--script", script, "--tool", "no_such_tool", *where
        )
        assert (code, out) == (1, "")
        assert "AgentConfigurationError" in err and "no_such_tool" in err, err

    # Where it does not apply: one line, exit 2, nothing started.
    for argv, reason in (
        (["--tool", "get_order", "--script", script], "--tool chooses among the tools of the"),
        (["--tool", "get_order", *where], "the scripted demo calls the demo's tools: with --tool"),
    ):
        code, out, err = await durable_agent(PROMPT, *argv)
        assert (code, out) == (2, ""), err
        assert len(err.splitlines()) == 1 and err.startswith(f"durable-agent: error: {reason}")


# stats -------------------------------------------------------------------------------------


async def test_stats_counts_every_run_once_as_completed_failed_or_other(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    address = client.service_client.config.target_host
    label = f"s-{uuid.uuid4().hex[:8]}"
    answer = script_file(tmp_path, turn(text="done"))
    never = script_file(tmp_path, turn(call("get_order", order_id=1042)), turn(text="never"))
    waits = script_file(
        tmp_path, turn(call("cancel_order", order_id=104999, reason="asked")), turn(text="never")
    )
    where = ("--address", address, "--task-queue", task_queue, "--label", label)
    async with serving(client, task_queue) as agents:
        for _ in range(2):
            code, _, err = await durable_agent(PROMPT, "--script", answer, *where)
            assert code == 0, err
        code, _, err = await durable_agent(PROMPT, "--script", never, "--max-steps", "1", *where)
        assert code == 1, err
        # One cancelled while its call waits for a person.
        code, out, err = await durable_agent(PROMPT, "--script", waits, "--no-wait", *where)
        assert code == 0, err
        cancelled = agents.run(out.strip())
        await cancelled.handle.cancel()
        with contextlib.suppress(AgentRunFailed):
            await cancelled.result()

    async def all_four() -> bool:
        code, out, err = await durable_agent("stats", "--label", label, "--address", address)
        assert code == 0, err
        return f"{label}  " in out and out.split(f"{label}  ")[1].split()[:3] == ["2", "1", "1"]

    await eventually(all_four, timeout=30, interval=0.5)
    code, out, err = await durable_agent("stats", "--label", label, "--address", address)
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["label", "completed", "failed", "other"], out
    assert row.split()[:7] == [label, "2", "1", "1", "1", "1", "1"], out
    code, out, err = await durable_agent("stats", "--label", label, "--json", "--address", address)
    (group,) = json.loads(out)["groups"]
    counts = {key: group[key] for key in ("runs", "completed", "failed", "other")}
    assert counts == {"runs": 4, "completed": 2, "failed": 1, "other": 1}
