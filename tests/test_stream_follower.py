"""serve's shared follower of a run's events (serving/streams.py) holds a bounded number of
them, however long the run and however long its streams stay open, and a stream that falls
behind what it holds still gets every event, once, in order: it reads what it lacks on its own,
then joins the shared follower again. The run here is a stand-in that publishes on the test's
word, so that a stream can be held back by exactly as many events as the bound."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from durable_agent.serving import streams
from durable_agent.workflows.events import AgentEvent


class PublishingRun:
    """An AgentRun's `events` over a list the test appends to; `readers` counts the readers
    it started and their start offsets."""

    id = "run-1"

    def __init__(self) -> None:
        self.published: list[AgentEvent] = []
        self.ended = False
        self.readers: list[int] = []
        self._more = asyncio.Condition()

    async def publish(self, count: int, *, end: bool = False) -> None:
        async with self._more:
            start = len(self.published)
            at = datetime(2026, 12, 7, tzinfo=UTC)
            self.published += [
                AgentEvent(kind="tool_call_finished", step=start + i, at=at) for i in range(count)
            ]
            self.ended = end
            self._more.notify_all()

    async def events(
        self, from_offset: int = 0, *, poll_cooldown: timedelta
    ) -> AsyncGenerator[Any]:
        self.readers.append(from_offset)
        offset = from_offset
        while True:
            async with self._more:
                await self._more.wait_for(lambda at=offset: at < len(self.published) or self.ended)
                batch = self.published[offset:]
            for event in batch:
                yield SimpleNamespace(offset=offset, data=event)
                offset += 1
            if self.ended and offset >= len(self.published):
                return


async def test_the_shared_follower_holds_a_bound_and_a_stream_behind_it_misses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "MAX_HELD_EVENTS", 50)
    monkeypatch.setattr(streams, "HELD_EVENTS_DROPPED", 10)
    run = PublishingRun()
    watch = streams._Watch(run, 0)  # type: ignore[arg-type]
    slow_read: list[int] = []
    fast_read: list[int] = []
    go_on = asyncio.Event()

    async def slow() -> None:
        async for at, _ in watch.read(run, 0):  # type: ignore[arg-type]
            slow_read.append(at)
            if at == 4:
                await go_on.wait()  # held back while the run publishes far past the bound

    async def fast() -> None:
        async for at, _ in watch.read(run, 0):  # type: ignore[arg-type]
            fast_read.append(at)

    readers = [asyncio.create_task(slow()), asyncio.create_task(fast())]
    held: list[int] = []
    for _ in range(30):
        await run.publish(20)
        await asyncio.sleep(0.01)
        held.append(len(watch.follower._events))
    assert len(run.published) == 600 and slow_read == [0, 1, 2, 3, 4]
    assert max(held) <= 50 and watch.follower.start > 500, (held, watch.follower.start)
    go_on.set()
    await run.publish(7, end=True)
    await asyncio.wait_for(asyncio.gather(*readers), 10)
    watch.stop()

    assert fast_read == list(range(607))
    assert slow_read == list(range(607))  # every event once, in order, past the bound
    # The shared follower from 0; the slow stream read what it lacked on its own, from 5.
    assert run.readers[0] == 0 and 5 in run.readers[1:], run.readers


async def test_a_stream_that_resumes_before_what_is_held_reads_on_its_own_then_joins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "MAX_HELD_EVENTS", 20)
    monkeypatch.setattr(streams, "HELD_EVENTS_DROPPED", 5)
    run = PublishingRun()
    await run.publish(100)
    watch = streams._Watch(run, 90)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    resumed: list[int] = []

    async def resume() -> None:
        async for at, _ in watch.read(run, 30):  # type: ignore[arg-type]
            resumed.append(at)

    reader = asyncio.create_task(resume())
    await asyncio.sleep(0.01)
    await run.publish(3, end=True)
    await asyncio.wait_for(reader, 10)
    watch.stop()
    assert resumed == list(range(30, 103))
    assert run.readers == [90, 30]
