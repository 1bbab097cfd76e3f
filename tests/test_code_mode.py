"""Code mode on a real dev server: a scripted model's run_code call runs its tools as
activities, each as a direct call runs (its trace record tied to the run_code call), and a
script past a limit is stopped with a one-line reason the model reads."""

from __future__ import annotations

import json
import textwrap
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

import tests.tools_for_tests as test_tools
from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import CallbackTool, CodeMode, Limits, ToolApprovalPolicy
from tests.helpers import (
    TEST_WORKER_OPTIONS,
    call,
    eventually,
    run_agent,
    scripted_input,
    turn,
)
from tests.test_approval_display import cli

LOOKUPS = textwrap.dedent(
    """
    import asyncio
    ids = [104999, 104998, 104997]
    orders = await asyncio.gather(*(get_order(order_id=i) for i in ids))
    first = await get_order(order_id=100000)
    total = sum(o["total"]["amount"] for o in orders) + first["total"]["amount"]
    print("orders:", len(orders) + 1)
    {"total": round(total, 2), "statuses": sorted({o["status"] for o in orders})}
    """
)


async def activity_types(run) -> list[str]:  # type: ignore[no-untyped-def]
    history = await run.handle.fetch_history()
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_a_script_runs_each_of_its_calls_as_the_tools_activity(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("run_code", id="script_1", code=LOOKUPS)),
        turn(text="Four orders, totalled.", expect="orders: 4"),
    ]
    agent_input = scripted_input(script, tools=["get_order"], code_mode=CodeMode())

    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None, run.error
    result = run.tool_results()["script_1"]
    printed, value = result.split("\n", 1)
    assert printed == "orders: 4"
    assert json.loads(value)["statuses"] == ["processing"]
    assert json.loads(value)["total"] > 0
    # One activity a call, named after its tool; the script's legs in between.
    types = await activity_types(run)
    assert types.count("get_order") == 4
    assert types.count("run_script") == 3  # start, after the gather, after the last call
    # The trace: the script's calls, each tied to it, then the run_code call itself.
    records = run.trace[0].tool_calls
    assert [(r.name, r.id, r.script, r.outcome) for r in records] == [
        ("get_order", "script_1.1", "script_1", "ok"),
        ("get_order", "script_1.2", "script_1", "ok"),
        ("get_order", "script_1.3", "script_1", "ok"),
        ("get_order", "script_1.4", "script_1", "ok"),
        ("run_code", "script_1", None, "ok"),
    ]
    assert json.loads(records[3].arguments) == {"order_id": 100000}
    # The model saw one result, run_code's, and none of the calls inside.
    assert [m.tool_call_id for m in run.transcript if m.role == "tool"] == ["script_1"]


async def test_run_code_describes_the_tools_as_python(client: Client, task_queue: str) -> None:
    from durable_agent.workflows.script_tools import python_function, run_code_spec
    from durable_agent.workflows.specs import ToolSpec

    spec = ToolSpec(
        name="search",
        description="Find things.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": {"type": "integer", "default": 10},
                "kind": {"enum": ["a", "b"]},
            },
            "required": ["query", "kind"],
        },
    )
    assert python_function(spec).splitlines()[0] == (
        'async def search(*, query: str, limit: int = 10, kind: Literal["a", "b"]) -> Any:'
    )
    described = run_code_spec([spec], CodeMode(max_calls=7)).description
    assert "7 calls" in described and "Args:\n        query: What to look for." in described


STOPPED = {
    "an endless loop": (
        "while True:\n    pass",
        CodeMode(max_cpu_seconds=0.5),
        "Error: the script was stopped: it ran out of its 0.5 s of execution time "
        "(CodeMode.max_cpu_seconds). It made 0 tool calls.",
    ),
    "a memory bomb": (
        "x = []\nwhile True:\n    x.append('a' * 100000)",
        CodeMode(max_memory_bytes=8 * 1024**2),
        "Error: the script was stopped: it used more than 8 MiB of memory "
        "(CodeMode.max_memory_bytes). It made 0 tool calls.",
    ),
    "a call flood": (
        "import asyncio\nfor i in range(100000):\n    await get_order(order_id=100000 + i % 7)",
        CodeMode(max_calls=5),
        "Error: the script was stopped: it made more than 5 tool calls (CodeMode.max_calls); "
        "the batch that passed the limit did not run. It made 5 tool calls; their effects stand.",
    ),
    "a concurrent flood": (
        "import asyncio\nawait asyncio.gather(*(get_order(order_id=100000 + i) for i in "
        "range(10**6)))",
        CodeMode(max_calls=50),
        "Error: the script was stopped: it made more than 50 tool calls (CodeMode.max_calls); "
        "the batch that passed the limit did not run. It made 0 tool calls.",
    ),
    "an exception": (
        "x = 1\nraise ValueError('no such thing')",
        CodeMode(),
        "Error: the script was stopped: line 2: ValueError: no such thing. It made 0 tool calls.",
    ),
}


async def test_a_script_past_a_limit_is_stopped_with_a_reason_the_model_reads(
    client: Client, task_queue: str
) -> None:
    for what, (code, mode, reason) in STOPPED.items():
        script = [
            turn(call("run_code", id="s", code=code)),
            turn(text="It stopped.", expect="stopped"),
        ]
        agent_input = scripted_input(script, tools=["get_order"], code_mode=mode)
        run = await run_agent(client, task_queue, agent_input)
        assert run.result is not None, (what, run.error)
        assert run.tool_results()["s"] == reason, what
        assert "\n" not in reason


APPROVALS = textwrap.dedent(
    """
    wrote = []
    for label in ["a", "b"]:
        try:
            wrote.append(await write_thing(label=label))
        except PermissionError as denied:
            print("denied", label + ":", str(denied))
    wrote
    """
)


async def test_a_gated_call_in_a_script_waits_and_its_denial_is_caught_by_the_script(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("run_code", id="script_1", code=APPROVALS)),
        turn(text="One written, one denied.", expect="not b"),
    ]
    agent_input = scripted_input(
        script, tools=["write_thing"], code_mode=CodeMode(), tool_approval=ToolApprovalPolicy()
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"code-{uuid.uuid4()}", task_queue=task_queue
        )
        agent_run = AgentRun(handle, client)

        async def waiting_for(call_id: str) -> bool:
            status = await agent_run.status()
            return [a.call_id for a in status.approvals if a.status == "awaiting_approval"] == [
                call_id
            ]

        # The script's first call waits for a person, durably; nothing else runs meanwhile.
        await eventually(lambda: waiting_for("script_1.1"), what="script_1.1 to wait")
        assert (await agent_run.status()).status == "awaiting_approval"
        # `durable-agent calls`, as a person meets it, says which script waits on the call.
        address = client.service_client.config.target_host
        (listed,) = (await cli("calls", agent_run.id, "--address", address)).splitlines()
        assert listed.startswith("script_1.1  step 1  write_thing ")
        assert listed.endswith("(in the script of script_1)")
        await agent_run.decide_tool_call("script_1.1", approve=True)
        await eventually(lambda: waiting_for("script_1.2"), what="script_1.2 to wait")
        await agent_run.decide_tool_call("script_1.2", approve=False, reason="not b")
        result = await agent_run.result()
        transcript = await agent_run.transcript()
        events = [e.data async for e in agent_run.events()]
    assert result.answer == "One written, one denied."
    content = {m.tool_call_id: m.content for m in transcript if m.role == "tool"}["script_1"]
    assert content.splitlines() == [
        "denied b: Error: a person denied this call to write_thing: not b. It did not run. Do "
        "not call it again unchanged; choose another way, or explain in your answer.",
        '["done a"]',
    ]
    records = result.step_records[0].tool_calls
    assert [(r.id, r.outcome) for r in records] == [
        ("script_1.1", "ok"),
        ("script_1.2", "denied"),
        ("script_1", "ok"),
    ]
    # The events of the script's calls name the script.
    asked = [(e.call_id, e.script) for e in events if e.kind == "approval_requested"]
    assert asked == [("script_1.1", "script_1"), ("script_1.2", "script_1")]
    finished = [e.call_id for e in events if e.kind == "tool_call_finished" and e.script]
    assert finished == ["script_1.1", "script_1.2"]


COMPENSATED = textwrap.dedent(
    """
    import asyncio
    first = await keyed_effect(label="first")
    more = await asyncio.gather(keyed_effect(label="second"), read_thing(label="look"))
    print(first["label"], more[0]["label"])
    """
)


async def test_a_failed_run_undoes_what_its_script_did(client: Client, task_queue: str) -> None:
    test_tools.undone.clear()
    script = [
        turn(call("run_code", id="script_1", code=COMPENSATED)),
        turn(call("read_thing", label="more"), expect="first second"),
        turn(text="never reached"),
    ]
    agent_input = scripted_input(
        script,
        tools=["keyed_effect", "read_thing"],
        code_mode=CodeMode(),
        limits=Limits(max_steps=2),
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentStepLimitExceeded"
    # Undone newest first, each by its own compensation, as a direct call's effects are.
    assert test_tools.undone == ["second", "first"]
    assert "keyed_effect script_1.2 undone by undo_keyed_effect" in run.failure.message
    assert "keyed_effect script_1.1 undone by undo_keyed_effect" in run.failure.message
    outcomes = {r.id: r.outcome for r in run.trace[0].tool_calls}
    assert outcomes == {
        "script_1.1": "compensated",
        "script_1.2": "compensated",
        "script_1.3": "ok",
        "script_1": "ok",
    }


async def test_the_trace_shows_the_script_then_its_calls_under_it(
    client: Client, task_queue: str
) -> None:
    from durable_agent.cli.tables import trace_table

    script = [
        turn(call("run_code", id="script_1", code=LOOKUPS)),
        turn(text="Done.", expect="orders: 4"),
    ]
    run = await run_agent(
        client, task_queue, scripted_input(script, tools=["get_order"], code_mode=CodeMode())
    )

    table = trace_table(run.trace).splitlines()
    row = next(line for line in table if line.lstrip().startswith("1 "))
    assert "run_code ok" in row and "(4 calls)" in row and "get_order" not in row
    at = table.index("script script_1 (step 1, ok):")
    assert table[at + 1 : at + 3] == ["    import asyncio", "    ids = [104999, 104998, 104997]"]
    calls = [line.split()[:3] for line in table[at:] if line.startswith("  script_1.")]
    assert calls == [[f"script_1.{n}", "get_order", "ok"] for n in (1, 2, 3, 4)]


async def test_a_tool_of_code_modes_own_name_fails_the_run_as_it_starts(
    client: Client, task_queue: str
) -> None:
    """Two tools named run_code would reach the provider as one name twice, which it refuses."""
    agent_input = scripted_input(
        [turn(text="never asked")],
        tools=["get_order"],
        callback_tools=[CallbackTool(name="run_code", description="The app's own.")],
        code_mode=CodeMode(),
    )
    run = await run_agent(client, task_queue, agent_input)
    assert run.failure.type == "AgentConfigurationError"
    assert "a tool named 'run_code' is code mode's own" in run.failure.message
