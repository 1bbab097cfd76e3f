"""The progress stream: every run publishes its events as they happen (temporalio.contrib
.workflow_streams); subscribers that start late, reconnect from an offset, or follow a run across
continue-as-new see every event once, in order; a finished run's stream drains and ends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowExecutionDescription,
)

from durable_agent.client.agent_client import STREAM_CLOSED_CHECK_ASKS, AgentRun, AgentRunFailed
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.events import AgentEvent
from durable_agent.workflows.inputs import AgentInput, Limits, ToolApprovalPolicy
from durable_agent.workflows.transcript import ToolResult
from tests.helpers import TEST_WORKER_OPTIONS, call, scripted_input, turn


async def start(client: Client, task_queue: str, agent_input: AgentInput) -> AgentRun:
    handle = await client.start_workflow(
        AgentWorkflow.run, agent_input, id=f"stream-{uuid.uuid4()}", task_queue=task_queue
    )
    return AgentRun(handle, client)


async def read_all(agent_run: AgentRun, from_offset: int = 0) -> list[tuple[int, AgentEvent]]:
    return [(item.offset, item.data) async for item in agent_run.events(from_offset)]


def kinds(events: list[tuple[int, AgentEvent]]) -> list[str]:
    return [event.kind for _, event in events]


def same(a: list[tuple[int, AgentEvent]], b: list[tuple[int, AgentEvent]]) -> bool:
    """The same events at the same offsets. Their times (`at`, and the latency of step 1) may
    differ for the first workflow task: read live, from the worker's cache, an event published
    after the task's local activity (`resolve_tools`) has the worker's clock; read from a closed
    run, which a worker replays, it has the time the history gives."""
    clock = {"at", "latency_ms"}
    return [(o, e.model_dump(exclude=clock)) for o, e in a] == [
        (o, e.model_dump(exclude=clock)) for o, e in b
    ]


def two_step_script() -> list[Any]:
    return [
        turn(call("get_order", order_id=1042), call("get_tracking", order_id=1042)),
        turn(text="It is on its way."),
    ]


async def test_a_late_subscriber_reads_every_event_of_a_finished_run_in_order(
    client: Client, task_queue: str
) -> None:
    agent_input = scripted_input(two_step_script(), tools=["get_order", "get_tracking"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        result = await agent_run.result()
        events = await read_all(agent_run)
        transcript = await agent_run.transcript()
    assert [offset for offset, _ in events] == list(range(len(events)))
    assert kinds(events) == [
        "step_started",
        "step_finished",
        "tool_call_started",
        "tool_call_started",
        "tool_call_finished",
        "tool_call_finished",
        "step_started",
        "step_finished",
        "completed",
    ]
    by_kind = {event.kind: event for _, event in events}
    assert by_kind["step_finished"].usage == result.step_records[-1].usage
    assert by_kind["completed"].text == "It is on its way."
    finished = [e for _, e in events if e.kind == "tool_call_finished"]
    assert {(e.tool, e.call_id, e.outcome) for e in finished} == {
        ("get_order", "call_1_1", "ok"),
        ("get_tracking", "call_1_2", "ok"),
    }
    assert all(e.latency_ms is not None and e.attempts == 1 for e in finished)
    started = [e for _, e in events if e.kind == "tool_call_started"]
    assert started[0].arguments == '{"order_id":1042}'
    # Each call's result as the model read it (the transcript's), for a client to show.
    told = {m.tool_call_id: m.content for m in transcript if isinstance(m, ToolResult)}
    assert {e.call_id: e.result for e in finished} == told


async def read_until_asked(agent_run: AgentRun) -> list[tuple[int, AgentEvent]]:
    """The run's events up to its first tool call that waits for a person, then no more."""
    first: list[tuple[int, AgentEvent]] = []
    async for item in agent_run.events():
        first.append((item.offset, item.data))
        if item.data.kind == "approval_requested":
            break
    return first


async def test_a_subscriber_that_reconnects_mid_run_resumes_where_it_left_off(
    client: Client, task_queue: str
) -> None:
    """The run waits on a person mid-way: a first subscriber reads up to the question and goes
    away (a page reload); a second one resumes from the next offset and reads to the end."""
    script = [
        turn(call("get_order", order_id=104999)),
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(text="Cancelled."),
    ]
    agent_input = scripted_input(
        script, tools=["get_order", "cancel_order"], tool_approval=ToolApprovalPolicy()
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        first = await read_until_asked(agent_run)
        await agent_run.decide_tool_call("call_2_1", approve=True)
        second = await read_all(agent_run, from_offset=first[-1][0] + 1)
        whole = await read_all(agent_run)
    assert same(first + second, whole), "every event once, in order, across the reconnect"
    assert kinds(second)[:2] == ["approval_decided", "tool_call_started"]
    assert kinds(whole)[-1] == "completed"


async def test_a_subscriber_from_past_the_last_event_gets_only_what_comes_from_there(
    client: Client, task_queue: str
) -> None:
    """Asked from two events past the end while the run waits, `events` yields nothing before
    that offset once the run goes on: not the events from the end, offsets below the one asked."""
    script = [turn(call("cancel_order", order_id=104999, reason="asked")), turn(text="Done.")]
    agent_input = scripted_input(script, tools=["cancel_order"], tool_approval=ToolApprovalPolicy())
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        first = await read_until_asked(agent_run)
        ahead = first[-1][0] + 3
        reading = asyncio.create_task(read_all(agent_run, from_offset=ahead))
        await agent_run.decide_tool_call("call_1_1", approve=True)
        later = await reading
        whole = await read_all(agent_run)
    assert later and later[0][0] == ahead
    assert same(later, [event for event in whole if event[0] >= ahead])


async def test_a_run_that_continues_as_new_keeps_its_stream(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("get_order", order_id=1042)) for _ in range(2)]
    script += [turn(call("get_tracking", order_id=1042)) for _ in range(2)]
    script.append(turn(text="done"))
    agent_input = scripted_input(
        script, tools=["get_order", "get_tracking"], continue_as_new_after_steps=2
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        # Subscribed from the start: it follows the chain of runs as they happen.
        live = await read_all(agent_run)
        result = await agent_run.result()
        late = await read_all(agent_run)
    assert result.steps == 5
    assert kinds(live).count("continued_as_new") == 2
    assert same(live, late)
    assert [offset for offset, _ in live] == list(range(len(live)))
    assert [e.step for _, e in live if e.kind == "step_started"] == [1, 2, 3, 4, 5]


async def test_following_a_run_writes_nothing_to_its_history(
    client: Client, task_queue: str
) -> None:
    """A follower reads by query: the run's history has no update in it, nor anything else a run
    nobody followed lacks."""
    script = [turn(call("get_order", order_id=1042)) for _ in range(4)]
    script.append(turn(text="done"))
    agent_input = scripted_input(script, tools=["get_order"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        followed = await start(client, task_queue, agent_input)
        live = await read_all(followed)
        await followed.result()
        alone = await start(client, task_queue, agent_input)
        await alone.result()
    assert kinds(live)[-1] == "completed"
    histories = [await run.handle.fetch_history() for run in (followed, alone)]
    types = [[EventType.Name(e.event_type) for e in h.events] for h in histories]
    assert not [t for t in types[0] if "UPDATE" in t], types[0]
    # The same kinds of event as the run nobody followed (how many workflow tasks a run takes
    # depends on timing, so not their number).
    assert set(types[0]) == set(types[1])


async def test_a_follower_ends_when_the_run_is_terminated(client: Client, task_queue: str) -> None:
    """A terminated run publishes no last event: the follower sees the run has closed."""
    agent_input = scripted_input(
        [turn(call("cancel_order", order_id=104999, reason="asked")), turn(text="done")],
        tools=["cancel_order"],
        tool_approval=ToolApprovalPolicy(),
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        seen: list[str] = []
        async for item in agent_run.events():
            seen.append(item.data.kind)
            if item.data.kind == "approval_requested":
                await agent_run.handle.terminate("an operator stopped it")
    assert seen[-1] == "approval_requested"


class Asks(Interceptor):
    """A client's queries and describes, in the order it makes them, for a test to wait on."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.changed = asyncio.Condition()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _CountedAsks(next, self)

    async def note(self, ask: str) -> None:
        async with self.changed:
            self.made.append(ask)
            self.changed.notify_all()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        async with self.changed:
            await self.changed.wait_for(condition)


class _CountedAsks(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, asks: Asks) -> None:
        super().__init__(next)
        self._asks = asks

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        await self._asks.note("query")
        return await super().query_workflow(input)

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        await self._asks.note("describe")
        return await super().describe_workflow(input)


async def test_an_idle_follower_asks_whether_the_run_ended_only_at_its_slowest(
    client: Client, task_queue: str
) -> None:
    """A follower of a run that publishes nothing (it waits for an approval) slows its asks,
    and describes the run, to notice a termination, only once they are at their slowest: not
    on every empty page, and then at every few asks, not at each (a describe at each doubled
    what a run that waits days for a person costs the server). It still ends when the run is
    terminated."""
    agent_input = scripted_input(
        [turn(call("cancel_order", order_id=104999, reason="asked")), turn(text="done")],
        tools=["cancel_order"],
        tool_approval=ToolApprovalPolicy(),
    )
    asks = Asks()
    watching = Client(**{**client.config(), "interceptors": [asks]})
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        waiting = asyncio.Event()
        idle_from = 0

        async def follow() -> list[str]:
            nonlocal idle_from
            seen: list[str] = []
            async for item in AgentRun(agent_run.handle, watching).events():
                seen.append(item.data.kind)
                if item.data.kind == "approval_requested":
                    idle_from = len(asks.made)
                    waiting.set()
            return seen

        follower = asyncio.create_task(follow())
        await waiting.wait()
        await asks.wait_for(lambda: asks.made[idle_from:].count("describe") >= 2)
        await agent_run.handle.terminate("an operator stopped it")
        seen = await follower
    idle = asks.made[idle_from:]
    first = idle.index("describe")
    # From STREAM_POLL_COOLDOWN (100 ms), growing by half, the pause reaches
    # STREAM_MAX_POLL_INTERVAL (1 s) after six empty pages; the seventh is the first described,
    # and then every STREAM_CLOSED_CHECK_ASKS-th.
    assert idle[:first] == ["query"] * 7
    second = idle.index("describe", first + 1)
    assert idle[first + 1 : second] == ["query"] * STREAM_CLOSED_CHECK_ASKS
    assert seen[-1] == "approval_requested"


async def test_a_failed_run_ends_its_stream_with_the_failure(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("get_order", order_id=1042)) for _ in range(3)]
    agent_input = scripted_input(script, tools=["get_order"], limits=Limits(max_steps=2))
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        events = await read_all(agent_run)
        try:
            await agent_run.result()
        except AgentRunFailed as failure:
            error = failure
    last = events[-1][1]
    assert last.kind == "failed" and last.outcome == "AgentStepLimitExceeded"
    assert last.text == error.message


async def test_a_retry_is_reported_when_it_starts(client: Client, task_queue: str) -> None:
    """The workflow learns of a retry only when the call returns; the retrying attempt itself
    reports it on the stream, before the call's end."""
    script = [turn(call("flaky", key=f"retry-{uuid.uuid4()}", failures=1)), turn(text="ok")]
    agent_input = scripted_input(script, tools=["flaky"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        await agent_run.result()
        events = await read_all(agent_run)
    names = kinds(events)
    assert names.index("tool_call_started") < names.index("retry")
    assert names.index("retry") < names.index("tool_call_finished")
    retry = next(e for _, e in events if e.kind == "retry")
    assert (retry.tool, retry.call_id, retry.attempts, retry.step) == ("flaky", "call_1_1", 2, 1)
    finished = next(e for _, e in events if e.kind == "tool_call_finished")
    assert finished.attempts == 2 and finished.outcome == "ok"
