"""The HTTP API's event streams (serving/http_api.py, `GET /api/runs/{id}/events`): a run's
events as Server-Sent Events, from an offset, to an event named `done`.

Every stream of one run reads from one follower (`AgentRun.events`), which keeps what it read
while any of them is open: two queries that reach a run together are not answered together
(one waits about a second, docs/http-api.md), so two people on one run's page, or a page and a
service, would otherwise see its events a second apart. A stream that resumes from before what
the shared follower began at reads with a follower of its own.

`Streams` also ends every open stream when the server stops: a stream is endless while its run
works, and uvicorn waits for every open response before it stops. An ended stream has no `done`;
its client reconnects with Last-Event-ID (to the next server)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

from temporalio.service import RPCError

from ..client.agent_client import AgentRun, AgentRunFailed
from ..workflows.events import AgentEvent

SSE_POLL_COOLDOWN = timedelta(milliseconds=50)
"""How soon a follower asks again after an event (the client's default is 100 ms): the SSE lag
goal is 100 ms at p95 (bench/http_api.py)."""
_STOPPING = "stopping"


class Streams:
    """The open event streams of one server, and the followers they share."""

    def __init__(self) -> None:
        self._open: set[asyncio.Queue[str | None]] = set()
        self._followers: dict[str, _Follower] = {}

    def end_all(self) -> None:
        """End every open stream (the server stops)."""
        for queue in self._open:
            queue.put_nowait(_STOPPING)

    async def sse(self, run: AgentRun, offset: int) -> AsyncIterator[str]:
        """The run's events from `offset`, each as `id: OFFSET`, `event: KIND`; the model's
        streamed text as `event: delta` (no id: a live view, not resumed); then `done`."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._open.add(queue)
        try:
            async for chunk in self._stream(run, offset, queue):
                yield chunk
        finally:
            self._open.discard(queue)

    async def _stream(
        self, run: AgentRun, offset: int, queue: asyncio.Queue[str | None]
    ) -> AsyncIterator[str]:
        async def deltas() -> None:
            with contextlib.suppress(RPCError):
                async for delta in run.deltas():
                    await queue.put(_event("delta", delta.model_dump_json()))

        async def progress() -> None:
            try:
                with self._following(run, offset) as follower:
                    async for at, event in follower.read(offset):
                        await queue.put(_event(event.kind, event.model_dump_json(), at))
            finally:
                await queue.put(None)

        readers = [asyncio.create_task(progress()), asyncio.create_task(deltas())]
        try:
            while (chunk := await queue.get()) is not None:
                if chunk is _STOPPING:
                    return
                yield chunk
            yield _event("done", json.dumps(await _outcome(run)))
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)

    @contextlib.contextmanager
    def _following(self, run: AgentRun, offset: int) -> Iterator[_Follower]:
        """The run's shared follower, started here if it has none; a follower of its own for a
        stream that resumes from before the shared one began. Stopped with its last reader."""
        shared = self._followers.get(run.id)
        if shared is None:
            follower = self._followers[run.id] = _Follower(run, offset)
        elif shared.start <= offset:
            follower = shared
        else:
            follower = _Follower(run, offset)
        follower.readers += 1
        try:
            yield follower
        finally:
            follower.readers -= 1
            if not follower.readers:
                follower.stop()
                if self._followers.get(run.id) is follower:
                    del self._followers[run.id]


class _Follower:
    """One `AgentRun.events` reader from `start`, and every event it has read, for its readers."""

    def __init__(self, run: AgentRun, start: int) -> None:
        self.start = start
        self.readers = 0
        self._offsets: list[int] = []
        self._events: list[AgentEvent] = []
        self._ended = False
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._follow(run))

    async def _follow(self, run: AgentRun) -> None:
        try:
            async for item in run.events(self.start, poll_cooldown=SSE_POLL_COOLDOWN):
                self._offsets.append(item.offset)
                self._events.append(item.data)
                self._wake()
        except RPCError:
            pass  # the run is gone
        finally:
            # The run ended, or could not be read (it is gone): each stream says `done`.
            self._ended = True
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def read(self, offset: int) -> AsyncIterator[tuple[int, AgentEvent]]:
        """The events from `offset` (at least `start`): those read already, then each as it
        comes, to the run's end."""
        index = bisect.bisect_left(self._offsets, offset)
        while True:
            while index < len(self._events):
                yield self._offsets[index], self._events[index]
                index += 1
            if self._ended:
                return
            await self._changed.wait()

    def stop(self) -> None:
        self._task.cancel()


async def _outcome(run: AgentRun) -> dict[str, Any]:
    try:
        result = await run.result()
    except AgentRunFailed as failure:
        details = failure.details.model_dump(mode="json")
        error = {"type": failure.type, "message": failure.message}
        return {"status": "failed", "error": error, "details": details}
    except RPCError as error:
        return {"status": "unknown", "error": {"type": "RPCError", "message": error.message}}
    answered = result.model_dump(mode="json")
    # The result travels with its compensation log packed, an array an entry (effect_log.py):
    # a person reads each effect by its fields' names, as `effects_page` answers them.
    answered["side_effects"] = [effect.model_dump(mode="json") for effect in result.side_effects]
    return {"status": "completed", "result": answered}


def _event(name: str, data: str, event_id: int | None = None) -> str:
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}event: {name}\ndata: {data}\n\n"
