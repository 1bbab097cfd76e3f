"""MCP servers' tools in runs: a real server (tests/mcp_server_for_tests.py) on the real `mcp` SDK,
over stdio and streamable HTTP, on the session's dev server."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer

from durable_agent.activities.mcp_config import McpConfig, load_mcp_config
from durable_agent.activities.mcp_tools import McpTools, exposed_name
from durable_agent.client.agent_client import AgentClient
from durable_agent.encryption import payload_codec
from durable_agent.serving.dev_server import free_port
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.errors import AgentConfigurationError
from durable_agent.workflows.inputs import AgentInput, AgentResult
from durable_agent.workflows.paging import TracePageRequest
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.transcript import Transcript
from tests.helpers import TEST_WORKER_OPTIONS, Run, call, eventually, scripted_input, turn

SERVER = Path(__file__).parent / "mcp_server_for_tests.py"
SECRET = "sk-test-" + uuid.uuid4().hex
FAST_RETRY = {"maximum_attempts": 3, "initial_interval_seconds": 0.05}


def stdio_server(journal: Path, **extra: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": [str(SERVER), "stdio"],
        "env": {
            "MCP_TEST_JOURNAL": str(journal),
            "MCP_TEST_TOKEN": "${MCP_TEST_SECRET}",
            "MCP_TEST_EXPECTED_TOKEN": SECRET,
            "MCP_TEST_CRASH_MARKER": str(journal.with_suffix(".crashed")),
        },
        "retry": FAST_RETRY,
        **extra,
    }


def config_of(servers: dict[str, Any], tmp_path: Path) -> McpConfig:
    """Through a file, as a worker reads it."""
    path = tmp_path / f"mcp-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return load_mcp_config(path)


def journal_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(autouse=True)
def secret_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_SECRET", SECRET)


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal.jsonl"


@pytest.fixture
def http_server(journal: Path) -> Iterator[str]:
    """The test server over streamable HTTP; its URL."""
    with serving_http(journal, free_port()) as url:
        yield url


@contextmanager
def serving_http(journal: Path, port: int) -> Iterator[str]:
    """The test server over streamable HTTP on `port` while the block runs; its URL."""
    env = {**os.environ, "MCP_TEST_JOURNAL": str(journal), "MCP_TEST_EXPECTED_TOKEN": SECRET}
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, "the HTTP test server exited"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("the HTTP test server did not listen")


@asynccontextmanager
async def mcp_worker(client: Client, task_queue: str, config: McpConfig) -> AsyncIterator[McpTools]:
    hub = McpTools(config)
    try:
        async with build_worker(client, task_queue, mcp=hub, **TEST_WORKER_OPTIONS):
            yield hub
    finally:
        await hub.close()


async def run_with(client: Client, task_queue: str, agent_input: AgentInput) -> Run:
    handle = await client.start_workflow(
        AgentWorkflow.run, agent_input, id=f"test-mcp-{uuid.uuid4()}", task_queue=task_queue
    )
    result: AgentResult | None = None
    error = None
    try:
        result = await handle.result()
    except WorkflowFailureError as failure:
        error = failure.cause
    transcript = await handle.query(AgentWorkflow.transcript)
    trace = await handle.query(AgentWorkflow.trace)
    assert Transcript(messages=transcript).is_complete()
    return Run(handle, result, error, transcript, trace)  # type: ignore[arg-type]


async def history_text(run: Run) -> str:
    return (await run.handle.fetch_history()).to_json()


def scheduled_types(history: Any) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_a_call_over_stdio_end_to_end(
    client: Client, task_queue: str, journal: Path, tmp_path: Path, caplog: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    config = config_of({"shop": stdio_server(journal)}, tmp_path)
    script = [
        turn(call("shop__lookup", "c1", key="order-7"), call("shop__stats", "c2")),
        turn(text="done"),
    ]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    results = run.tool_results()
    assert results["c1"] == '{"result": "order-7: found"}'
    assert results["c2"] == '{"orders": 3, "refunds": 1}'
    # Each call its own activity, typed by server and tool.
    history = await run.handle.fetch_history()
    assert {"shop__lookup", "shop__stats"} <= set(scheduled_types(history))
    # The idempotency key went in _meta: the run's, and the call's.
    calls = [e for e in journal_of(journal) if e.get("tool") == "lookup"]
    assert len(calls) == 1
    key = calls[0]["meta"]["idempotencyKey"]
    assert key.startswith(f"{run.handle.id}/") and key.endswith("/c1")
    # The secret reached the server (it checks it) and nowhere else.
    assert SECRET not in history.to_json()
    assert all(SECRET not in record.getMessage() for record in caplog.records)


async def test_http_headers_stay_out_of_the_history(
    client: Client, task_queue: str, http_server: str, tmp_path: Path, journal: Path
) -> None:
    server = {
        "url": http_server,
        "headers": {"Authorization": "Bearer ${MCP_TEST_SECRET}"},
        "retry": FAST_RETRY,
    }
    config = config_of({"docs": server}, tmp_path)
    script = [turn(call("docs__lookup", "c1", key="faq")), turn(text="done")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script, tools=["docs__lookup"]))
    assert run.result is not None, run.error
    # The server answers only with the right token in its header.
    assert run.tool_results()["c1"] == '{"result": "faq: found"}'
    assert SECRET not in await history_text(run)
    assert [e["tool"] for e in journal_of(journal)] == ["lookup"]


async def test_is_error_reaches_the_model_and_is_not_retried(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    config = config_of({"shop": stdio_server(journal)}, tmp_path)
    script = [turn(call("shop__refuse", "c1", reason="closed on sundays")), turn(text="ok")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    assert run.tool_results()["c1"] == "Error executing tool refuse: refused: closed on sundays"
    record = run.trace[0].tool_calls[0]
    assert (record.outcome, record.attempts) == ("error", 1)
    assert len([e for e in journal_of(journal) if e.get("tool") == "refuse"]) == 1


async def test_read_only_hint_decides_the_scheduling(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    """lookup says readOnlyHint; record says nothing, so it changes data: it runs alone, after
    the call before it and before the one after it. The config can say otherwise."""

    def order(history: Any) -> list[tuple[str, str]]:
        names = {}
        steps = []
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                name = e.activity_task_scheduled_event_attributes.activity_type.name
                names[e.event_id] = name
                if name.startswith("shop__"):
                    steps.append(("scheduled", name))
            elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                name = names[e.activity_task_completed_event_attributes.scheduled_event_id]
                if name.startswith("shop__"):
                    steps.append(("completed", name))
        return steps

    script = [
        turn(
            call("shop__lookup", "c1", key="a"),
            call("shop__record", "c2", note="n"),
            call("shop__lookup", "c3", key="b"),
        ),
        turn(text="done"),
    ]
    config = config_of({"shop": stdio_server(journal)}, tmp_path)
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    assert order(await run.handle.fetch_history()) == [
        ("scheduled", "shop__lookup"),
        ("completed", "shop__lookup"),
        ("scheduled", "shop__record"),
        ("completed", "shop__record"),
        ("scheduled", "shop__lookup"),
        ("completed", "shop__lookup"),
    ]
    # Read-only by the config: the three are scheduled together.
    overridden = config_of({"shop": stdio_server(journal, read_only={"record": True})}, tmp_path)
    async with mcp_worker(client, task_queue, overridden):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    assert [kind for kind, _ in order(await run.handle.fetch_history())][:3] == ["scheduled"] * 3


async def test_a_side_effecting_mcp_call_waits_for_approval(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    from durable_agent.workflows.decisions import ToolCallDecision
    from durable_agent.workflows.inputs import ToolApprovalPolicy

    config = config_of({"shop": stdio_server(journal)}, tmp_path)
    script = [turn(call("shop__record", "c1", note="n")), turn(text="done")]
    agent_input = scripted_input(script, tool_approval=ToolApprovalPolicy())
    async with mcp_worker(client, task_queue, config):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"test-mcp-{uuid.uuid4()}", task_queue=task_queue
        )

        async def waiting() -> bool:
            status = await handle.query(AgentWorkflow.status)
            return status.status == "awaiting_approval"

        await eventually(waiting, what="the record call to wait for a person")
        assert [e for e in journal_of(journal) if e.get("tool") == "record"] == []
        await handle.signal(
            "decide_tool_call", ToolCallDecision(call_id="c1", approve=False, reason="not now")
        )
        await handle.result()
    assert [e for e in journal_of(journal) if e.get("tool") == "record"] == []


async def test_replay_does_not_contact_the_server(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    config = config_of({"shop": stdio_server(journal)}, tmp_path)
    script = [turn(call("shop__lookup", "c1", key="a")), turn(text="done")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    # The worker and its server are gone; the history has what the run was offered.
    before = journal_of(journal)
    history = await run.handle.fetch_history()
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=payload_codec.data_converter())
    await replayer.replay_workflow(history)
    assert journal_of(journal) == before


async def test_a_server_killed_mid_call_is_restarted_and_the_call_retried(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    config = config_of({"shop": stdio_server(journal)}, tmp_path)
    script = [turn(call("shop__crash_once", "c1")), turn(text="done")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
    assert run.result is not None, run.error
    assert run.tool_results()["c1"] == '{"result": "survived"}'
    assert run.trace[0].tool_calls[0].attempts == 2
    pids = [e["pid"] for e in journal_of(journal) if e.get("tool") == "crash_once"]
    assert len(pids) == 2 and pids[0] != pids[1]


async def test_a_server_down_at_start_fails_the_run_in_one_line(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    down = {"url": f"http://127.0.0.1:{free_port()}/mcp", "retry": FAST_RETRY}
    config = config_of({"gone": down}, tmp_path)
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input([turn(text="never")]))
    assert run.error is not None
    message = run.error.message
    assert message.startswith("MCP server gone is unreachable: "), message
    assert "\n" not in message


async def test_an_optional_server_down_is_left_out(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    down = {"url": f"http://127.0.0.1:{free_port()}/mcp", "optional": True}
    config = config_of({"gone": down, "shop": stdio_server(journal)}, tmp_path)
    script = [turn(call("shop__lookup", "c1", key="a")), turn(text="done")]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script))
        page = await run.handle.query(AgentWorkflow.trace_page, TracePageRequest())
        events = [item.data async for item in AgentClient(client).run(run.handle.id).events()]
    assert run.result is not None, run.error
    # It says so: in the result, the trace and the progress stream.
    [notice] = run.result.tool_notices
    assert notice.startswith("MCP server gone (optional) is unreachable, so its tools are not "
                             "offered: "), notice  # fmt: skip
    assert page.tool_notices == [notice]
    assert [e.text for e in events if e.kind == "tools_unavailable"] == [notice]


async def _approve_when_waiting(handle: Any, call_id: str, before: Any = None) -> None:
    """Wait until `call_id` waits for a person, run `before`, then approve it."""
    from durable_agent.workflows.decisions import ToolCallDecision

    async def waiting() -> bool:
        status = await handle.query(AgentWorkflow.status)
        return [a.call_id for a in status.approvals] == [call_id]

    await eventually(waiting, what=f"{call_id} to wait for a person")
    if before is not None:
        before()
    await handle.signal("decide_tool_call", ToolCallDecision(call_id=call_id, approve=True))


async def test_continue_as_new_lists_the_tools_again(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    """An optional server down when the run starts is offered once it is up, from the next run
    of the chain: the tools are listed again on continue-as-new."""
    from durable_agent.workflows.inputs import ToolApprovalPolicy

    port = free_port()
    later = {"url": f"http://127.0.0.1:{port}/mcp", "optional": True,
             "headers": {"Authorization": "Bearer ${MCP_TEST_SECRET}"}}  # fmt: skip
    config = config_of({"later": later, "shop": stdio_server(journal)}, tmp_path)
    script = [
        turn(call("shop__record", "c1", note="n")),
        turn(call("later__lookup", "c2", key="k")),
        turn(text="done"),
    ]
    agent_input = scripted_input(
        script, tool_approval=ToolApprovalPolicy(), continue_as_new_after_steps=1
    )
    with ExitStack() as stack:
        async with mcp_worker(client, task_queue, config):
            handle = await client.start_workflow(
                AgentWorkflow.run, agent_input, id=f"test-mcp-{uuid.uuid4()}",
                task_queue=task_queue,
            )  # fmt: skip
            # The server comes up while step 1's call waits for a person.
            await _approve_when_waiting(
                handle, "c1", before=lambda: stack.enter_context(serving_http(journal, port))
            )
            result = await handle.result()
            transcript = await handle.query(AgentWorkflow.transcript)
    assert result.answer == "done"
    results = {m.tool_call_id: m.content for m in transcript if m.role == "tool"}
    assert results["c2"] == '{"result": "k: found"}', results
    assert result.tool_notices == []
    assert [e["arguments"] for e in journal_of(journal) if e.get("tool") == "lookup"] == [
        {"key": "k"}
    ]


async def test_a_failed_listing_on_continue_as_new_keeps_the_tools_offered_before(
    client: Client, task_queue: str, journal: Path, tmp_path: Path
) -> None:
    """A server that must be there and is down when the run continues as new: the run has side
    effects behind it, so it goes on with the tools it was offered, and says so."""
    from durable_agent.workflows.inputs import ToolApprovalPolicy

    port = free_port()
    shop = {"url": f"http://127.0.0.1:{port}/mcp", "retry": FAST_RETRY,
            "headers": {"Authorization": "Bearer ${MCP_TEST_SECRET}"}}  # fmt: skip
    config = config_of({"shop": shop}, tmp_path)
    script = [turn(call("shop__record", "c1", note="n")), turn(text="done")]
    agent_input = scripted_input(
        script, tool_approval=ToolApprovalPolicy(), continue_as_new_after_steps=1
    )
    with ExitStack() as stack:
        stack.enter_context(serving_http(journal, port))
        async with mcp_worker(client, task_queue, config):
            handle = await client.start_workflow(
                AgentWorkflow.run, agent_input, id=f"test-mcp-{uuid.uuid4()}",
                task_queue=task_queue,
            )  # fmt: skip

            async def recorded() -> bool:
                return any(e.get("tool") == "record" for e in journal_of(journal))

            # The call runs, then its server goes away before the run hands on.
            await _approve_when_waiting(handle, "c1")
            await eventually(recorded, what="the record call to reach the server")
            stack.close()
            result = await handle.result()
    assert result.answer == "done"
    [notice] = result.tool_notices
    assert notice.startswith("the tools could not be listed again as run 2 of this workflow "
                             "started (MCP server shop is unreachable: "), notice  # fmt: skip
    assert notice.endswith("; it keeps the tools it was offered before")
    assert SECRET not in notice


def test_tool_names_keep_to_the_providers_rules() -> None:
    import re

    rule = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
    assert exposed_name("fs", "read_file") == "fs__read_file"
    dotted, underscored = exposed_name("fs", "read.file"), exposed_name("fs", "read_file")
    assert dotted != underscored and rule.match(dotted)
    long = exposed_name("server", "x" * 120)
    assert rule.match(long) and len(long) == 64
    assert long != exposed_name("server", "x" * 121)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{", "not JSON"),
        ('{"servers": {}}', 'expected {"mcpServers"'),
        ('{"mcpServers": {"a": {}}}', "mcpServers.a: Value error, give either command"),
        ('{"mcpServers": {"a": {"command": "x", "retyr": {}}}}', "mcpServers.a.retyr: Extra"),
        ('{"mcpServers": {"a_b": {"command": "x"}}}', "server name 'a_b' must be"),
        ('{"mcpServers": {"a": {"command": "x", "env": {"K": "${NOPE_UNSET}"}}}}', "no NOPE_UNSET"),
    ],
)
def test_a_bad_config_is_one_line(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(content)
    with pytest.raises(AgentConfigurationError) as raised:
        load_mcp_config(path)
    assert expected in raised.value.message
    assert "\n" not in raised.value.message


def test_the_worker_refuses_a_bad_config_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"a": {"url": "http://x", "command": "y"}}}')
    done = subprocess.run(
        [sys.executable, "worker.py", "--mcp-config", str(path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("worker.py: error: MCP config "), done.stderr


def test_server_keys_of_ours_reach_the_specs(tmp_path: Path, journal: Path) -> None:
    from mcp.types import Tool

    from durable_agent.activities.mcp_tools import tool_spec

    config = config_of(
        {"shop": stdio_server(journal, timeout_seconds=5, needs_approval=True)}, tmp_path
    )
    spec = tool_spec(
        "shop", config.servers["shop"], Tool(name="lookup", input_schema={"type": "object"})
    )
    assert (spec.timeout_seconds, spec.needs_approval, spec.side_effects) == (5, True, True)
    # No hint: it changes data, so one attempt (tests/test_mcp_side_effects.py).
    assert spec.retry == RetrySettings(**{**FAST_RETRY, "maximum_attempts": 1})


async def test_a_reference_server_from_pypi(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """mcp-server-time, started as its README says (`python -m mcp_server_time`)."""
    server = {
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        "retry": FAST_RETRY,
    }
    config = config_of({"time": server}, tmp_path)
    hub = McpTools(config)
    try:
        specs = {s.name: s for s in await hub.list_server("time")}
    finally:
        await hub.close()
    assert {"time__get_current_time", "time__convert_time"} <= set(specs)
    script = [
        turn(call("time__get_current_time", "c1", timezone="Europe/Paris")),
        turn(text="done"),
    ]
    async with mcp_worker(client, task_queue, config):
        run = await run_with(client, task_queue, scripted_input(script, tools=list(specs)))
    assert run.result is not None, run.error
    answer = json.loads(run.tool_results()["c1"])
    assert answer["timezone"] == "Europe/Paris", answer


def test_the_cli_runs_with_an_mcp_server(tmp_path: Path, journal: Path) -> None:
    """`starter.py PROMPT --mcp-config FILE`: the embedded worker serves the server's tools."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"shop": stdio_server(journal)}}))
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"calls": [{"name": "shop__lookup", "arguments": {"key": "k9"}}]},
                {"text": "k9 is found"},
            ]
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TEMPORAL_ADDRESS", "OPENAI_API_KEY")}
    env["AGENT_DEMO_DB"] = str(tmp_path / "demo.db")
    done = subprocess.run(
        [sys.executable, "starter.py", "find k9", "--provider", "scripted", "--script",
         str(script), "--mcp-config", str(config), "--json"],
        cwd=Path(__file__).parent.parent, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == "k9 is found"
    assert [e["arguments"] for e in journal_of(journal) if e.get("tool") == "lookup"] == [
        {"key": "k9"}
    ]
    assert SECRET not in done.stdout + done.stderr
    bad = subprocess.run(
        [sys.executable, "starter.py", "find k9", "--mcp-config", str(tmp_path / "none.json")],
        cwd=Path(__file__).parent.parent, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "starter.py: error: MCP config "
        + str(tmp_path / "none.json")
        + ": No such file or directory (see --help)"
    ], bad.stderr
