"""The HTTP API's event streams (serving/http_api.py, `GET /api/runs/{id}/events`): a run's
events as Server-Sent Events, from an offset, to an event named `done`.

Every stream of one run reads from what the run's streams share (`_Watch`), which lives while
any of them is open:

- **One follower of its events** (`AgentRun.events`): two queries that reach a run together are
  not answered together (one waits about a second, docs/http-api.md), so two people on one
  run's page, or a page and a service, would otherwise see its events a second apart. It holds
  the newest MAX_HELD_EVENTS; a stream that resumes from before what it holds, or falls that far
  behind, reads the events it lacks with a follower of its own, then joins it again.
- **One reader of its model calls' streamed text** (`_ModelCalls`), by describe: only while a
  model call is pending, every 100 ms only while one streams, and not at all while the run waits
  (for a person, for a tool, for a message). Its followers' events say when to look.

How many streams a server holds, and a run, is bounded (MAX_STREAMS, MAX_RUN_STREAMS): one more
is refused with 429 (`StreamsFull`) before it starts. So is one resumed from past the run's last
event (416, `ResumedPastTheEnd`), which would otherwise wait, silent, holding its place, for as
long as the run lives (`check_resume`).

`Streams` also ends every open stream when the server stops: a stream is endless while its run
works, and uvicorn waits for every open response before it stops. An ended stream has no `done`;
its client reconnects with Last-Event-ID (to the next server)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import os
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi.responses import StreamingResponse
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from ..client.agent_client import (
    DELTA_POLL_INTERVAL,
    STREAM_LENGTH_QUERY,
    AgentRun,
    AgentRunFailed,
    DeltaReader,
    ModelCall,
)
from ..workflows.activity_io import ModelDelta, StreamProgress
from ..workflows.bounds import MAX_COUNT
from ..workflows.errors import AgentConfigurationError
from ..workflows.events import AgentEvent

SSE_POLL_COOLDOWN = timedelta(milliseconds=50)
"""How soon a follower asks again after an event (the client's default is 100 ms): the SSE lag
goal is 100 ms at p95 (bench/http_api.py)."""
TEXT_POLL_INTERVAL = DELTA_POLL_INTERVAL
"""How often a run's streamed text is read while a model call streams: the workers send it at
most this often too."""
TEXT_POLL_MAX_INTERVAL = timedelta(seconds=1)
"""The longest pause between reads of a pending model call not yet known to stream or not (one
not started, or one of a worker whose calls send no heartbeat): the pause grows by half from
TEXT_POLL_INTERVAL to this."""
CALL_BEGINS = ("step_started", "retry")
"""The events after which a model call may be pending (a step's call, or a call's next attempt):
the streams' text reader looks then, and otherwise not."""

MAX_HELD_EVENTS = 2_000
"""The events of a run its streams' shared follower holds, the newest (as a run carries at most
2,000 across continue-as-new): a stream further behind reads what it missed on its own, so that
a server following a long run holds no more of it than this."""
HELD_EVENTS_DROPPED = 500
"""How many of the oldest go at once when it holds more."""
MAX_STREAMS = 256
"""The event streams one server holds at once (each an open connection and a reader of it); the
next is refused with 429. $AGENT_API_MAX_STREAMS sets another."""
MAX_RUN_STREAMS = 32
"""The event streams of one run one server holds at once; $AGENT_API_MAX_RUN_STREAMS sets
another. They share one follower and one text reader: what a run costs the cluster does not
grow with them, this bounds what they cost the server."""
RESUME_CHECK_TIMEOUT = timedelta(seconds=5)
"""How long a resumed stream waits at its door for the run to say how many events it has (a
worker answers the query): past it the stream is served unchecked, as one of a run whose workers
are away is, which gets the events they publish once they are back."""
EVENT_ID = re.compile(r"-1|[0-9]{1,16}")
"""An event's id in a Last-Event-ID: ASCII digits alone, or -1 (before the first event: AG-UI's
RUN_STARTED of a new thread). int() reads "+3", "3_0", " 5" and "٣" too."""
MAX_STREAMS_VARIABLE = "AGENT_API_MAX_STREAMS"
MAX_RUN_STREAMS_VARIABLE = "AGENT_API_MAX_RUN_STREAMS"
_STOPPING = "stopping"


@dataclass(frozen=True)
class Written:
    """A piece of a model call's streamed output, and where it ends in all the call has written
    of its kind (in characters; 0 for a void), which a stream that resumes mid-reply goes by."""

    delta: ModelDelta
    end: int


def _end(delta: ModelDelta, progress: StreamProgress | None) -> int:
    if progress is None or delta.kind == "void":
        return 0
    if delta.kind == "text":
        return progress.text_offset + len(progress.text)
    return progress.reasoning_offset + len(progress.reasoning)


class StreamsFull(Exception):
    """One more event stream would be over a bound (429): the server's or the run's."""


class ResumedPastTheEnd(Exception):
    """A stream asked for from past the run's last event (416): it would send nothing until the
    run had published that many, holding its place (`Streams.hold`) all the while."""


def event_id(given: str) -> int | None:
    """`given` (a Last-Event-ID, or a part of AG-UI's) as a number: None for one that is not
    EVENT_ID's, or is past MAX_COUNT."""
    if not EVENT_ID.fullmatch(given) or int(given) > MAX_COUNT:
        return None
    return int(given)


async def check_resume(run: AgentRun, offset: int, last_event_id: str) -> None:
    """ResumedPastTheEnd when `offset` (after `last_event_id`, which the refusal quotes) is past
    the run's events: more than it has published. As many is the next event's offset, and waits
    for it. A run only adds events, so an offset that passes here stays good while the stream
    reads, however many come between; one the run cannot say in time (RESUME_CHECK_TIMEOUT) is
    not refused."""
    if offset == 0:
        return
    try:
        published = await run.client.get_workflow_handle(run.id).query(
            STREAM_LENGTH_QUERY, result_type=int, rpc_timeout=RESUME_CHECK_TIMEOUT
        )
    except (RPCError, WorkflowQueryFailedError):
        return  # no worker answered (or the run is gone): the stream says so as it reads
    if offset > published:
        last = f"({published - 1})" if published else "(it has published none yet)"
        raise ResumedPastTheEnd(
            f"Last-Event-ID {last_event_id} is past the run's last event {last}:"
            " resume from an id its stream sent"
        )


def stream_bounds(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """The bounds on the streams of a server and of a run: $AGENT_API_MAX_STREAMS and
    $AGENT_API_MAX_RUN_STREAMS, else MAX_STREAMS and MAX_RUN_STREAMS. AgentConfigurationError
    for a value that is not a whole number of 1 or more."""
    bounds = []
    for variable, default in (
        (MAX_STREAMS_VARIABLE, MAX_STREAMS),
        (MAX_RUN_STREAMS_VARIABLE, MAX_RUN_STREAMS),
    ):
        given = environ.get(variable, "").strip() or str(default)
        if not given.isdigit() or int(given) < 1:
            raise AgentConfigurationError(
                f"{variable} is {given!r}: give a whole number, 1 or more"
            )
        bounds.append(int(given))
    return bounds[0], bounds[1]


class Streams:
    """The open event streams of one server, and what the streams of each run share: at most
    `max_streams` at once, and `max_run_streams` of one run."""

    def __init__(
        self, *, max_streams: int = MAX_STREAMS, max_run_streams: int = MAX_RUN_STREAMS
    ) -> None:
        self.max_streams, self.max_run_streams = max_streams, max_run_streams
        self._open: set[asyncio.Queue[Any]] = set()
        self.stopping = False
        """The server stops: every stream ends (`end_all`), without its last event."""
        self._watches: dict[str, _Watch] = {}
        self._held: Counter[str] = Counter()

    def end_all(self) -> None:
        """End every open stream (the server stops)."""
        self.stopping = True
        for queue in self._open:
            queue.put_nowait(_STOPPING)

    def hold(self, run_id: str) -> Callable[[], None]:
        """A place for one more stream of the run, and what gives it back (once); StreamsFull
        when the server, or the run, holds as many as it may. Taken before the stream's first
        await, so that requests that come together cannot all pass the bound."""
        held = self._held.total()
        if held >= self.max_streams:
            raise StreamsFull(
                f"this server holds {held} event streams, its most ({MAX_STREAMS_VARIABLE}):"
                " close one, or try again later"
            )
        if self._held[run_id] >= self.max_run_streams:
            raise StreamsFull(
                f"this server holds {self._held[run_id]} event streams of run {run_id}, the most"
                f" for one run ({MAX_RUN_STREAMS_VARIABLE}); they all get the same events:"
                " close one, or try again later"
            )
        self._held[run_id] += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if given_back:
                return
            given_back = True
            self._held[run_id] -= 1
            if not self._held[run_id]:
                del self._held[run_id]

        return give_back

    def response(
        self, run: AgentRun, offset: int, give_back: Callable[[], None], headers: dict[str, str]
    ) -> StreamingResponse:
        """The run's stream from `offset` (`sse`) as the response that sends it, which gives its
        place (`hold`) back however it ends."""
        return self.held(give_back, self.sse(run, offset), headers)

    def held(
        self, give_back: Callable[[], None], body: AsyncIterator[str], headers: dict[str, str]
    ) -> StreamingResponse:
        """An event stream's response (`body`, SSE), which gives its place (`hold`) back
        however it ends."""
        return _Held(give_back, body, media_type="text/event-stream", headers=headers)

    async def sse(self, run: AgentRun, offset: int) -> AsyncIterator[str]:
        """The run's events from `offset`, each as `id: OFFSET`, `event: KIND`; the model's
        streamed text as `event: delta` (no id: a live view, not resumed); then `done`."""
        async for item in self.follow(run, offset):
            if isinstance(item, Written):
                yield _event("delta", item.delta.model_dump_json())
            else:
                at, event = item
                yield _event(event.kind, event.model_dump_json(), at)
        if not self.stopping:
            yield _event("done", json.dumps(await _outcome(run)))

    async def follow(
        self, run: AgentRun, offset: int
    ) -> AsyncIterator[tuple[int, AgentEvent] | Written]:
        """The run's events from `offset`, each with its offset, and its model calls' streamed
        text as it is read (`Written`), from what the run's streams share: to the run's end,
        or to the server's (`stopping`), when a client resumes from the last offset it got.
        Every stream of the HTTP API reads this; so does AG-UI's (serving/ag_ui.py)."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        reader = DeltaReader()

        def text(calls: list[ModelCall]) -> None:
            for call in calls:
                for delta in reader.read(call.progress, call.attempt):
                    queue.put_nowait(Written(delta, _end(delta, call.progress)))

        async def progress(watch: _Watch) -> None:
            try:
                async for at, event in watch.read(run, offset):
                    await queue.put((at, event))
            finally:
                await queue.put(None)

        self._open.add(queue)
        try:
            with self._watching(run, offset) as watch:
                reading = asyncio.create_task(progress(watch))
                try:
                    with watch.model_calls.listening(text):
                        while (item := await queue.get()) is not None:
                            if item is _STOPPING:
                                return
                            yield item
                finally:
                    reading.cancel()
                    await asyncio.gather(reading, return_exceptions=True)
        finally:
            self._open.discard(queue)

    @contextlib.contextmanager
    def _watching(self, run: AgentRun, offset: int) -> Iterator[_Watch]:
        """What the run's streams share, begun here (its follower from `offset`) if it has
        none; stopped with its last stream."""
        watch = self._watches.get(run.id)
        if watch is None:
            watch = self._watches[run.id] = _Watch(run, offset)
        watch.streams += 1
        try:
            yield watch
        finally:
            watch.streams -= 1
            if not watch.streams:
                watch.stop()
                del self._watches[run.id]


class _Held(StreamingResponse):
    """A stream's response, which gives its place back however it ends: also when its client
    left before its first byte, when its body is never iterated."""

    def __init__(self, release: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


class _Watch:
    """What the streams of one run share: the follower of its events from where the first of
    them began, and the reader of its model calls, told by that follower when to look."""

    def __init__(self, run: AgentRun, start: int) -> None:
        self.streams = 0
        self.model_calls = _ModelCalls(run)
        self.follower = _Follower(run, start, self.model_calls.look)

    async def read(self, run: AgentRun, offset: int) -> AsyncIterator[tuple[int, AgentEvent]]:
        """The run's events from `offset`, to its end: from the shared follower while it holds
        them; those before what it holds (a stream that resumes from further back, or one that
        fell behind by more than it keeps) from a reader of this stream's own, up to it."""
        shared = self.follower
        while True:
            async for at, event in shared.read(offset):
                yield at, event
                offset = at + 1
            if offset >= shared.start:
                return  # the run ended
            own = run.events(offset, poll_cooldown=SSE_POLL_COOLDOWN)
            try:
                async for item in own:
                    yield item.offset, item.data
                    offset = item.offset + 1
                    if offset >= shared.start:
                        break
                else:
                    return  # the run ended
            except RPCError:
                return  # the run is gone
            finally:
                await own.aclose()

    def stop(self) -> None:
        self.follower.stop()
        self.model_calls.stop()


class _Follower:
    """One `AgentRun.events` reader from `start`, and the newest MAX_HELD_EVENTS events it has
    read, for its readers. `on_call`: called when an event says a model call may begin
    (CALL_BEGINS)."""

    def __init__(
        self, run: AgentRun, start: int, on_call: Callable[[], None] | None = None
    ) -> None:
        self.start = start
        """The oldest offset held: a reader further back reads elsewhere (`_Watch.read`)."""
        self._offsets: list[int] = []
        self._events: list[AgentEvent] = []
        self._ended = False
        self._changed = asyncio.Event()
        self._on_call = on_call
        self._task = asyncio.create_task(self._follow(run))

    async def _follow(self, run: AgentRun) -> None:
        try:
            async for item in run.events(self.start, poll_cooldown=SSE_POLL_COOLDOWN):
                self._offsets.append(item.offset)
                self._events.append(item.data)
                if len(self._events) > MAX_HELD_EVENTS:
                    del self._offsets[:HELD_EVENTS_DROPPED], self._events[:HELD_EVENTS_DROPPED]
                    self.start = self._offsets[0]
                if self._on_call is not None and item.data.kind in CALL_BEGINS:
                    self._on_call()
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
        """The events from `offset`: those read already, then each as it comes, to the run's
        end; or until the reader is behind what is held (`offset < start`, at once for one
        that asks from before it), when what it missed must be read elsewhere."""
        while offset >= self.start:
            index = bisect.bisect_left(self._offsets, offset)
            if index < len(self._events):
                offset = self._offsets[index] + 1
                yield self._offsets[index], self._events[index]
            elif self._ended:
                return
            else:
                await self._changed.wait()

    def stop(self) -> None:
        self._task.cancel()


class _ModelCalls:
    """A run's pending model calls, read by describe (AgentRun.model_calls) for its streams'
    `delta` events: once when the first stream opens (a call may be pending already), then only
    when told to `look` (an event says a call begins), for as long as a model call is pending.
    Every TEXT_POLL_INTERVAL while the call streams; while it is not known to stream, at a
    pause growing to TEXT_POLL_MAX_INTERVAL; no more once it is known not to."""

    def __init__(self, run: AgentRun) -> None:
        self._run = run
        self._latest: list[ModelCall] = []
        self._listeners: list[Callable[[list[ModelCall]], None]] = []
        self._told = asyncio.Event()
        self._told.set()
        self._task = asyncio.create_task(self._read())

    def look(self) -> None:
        self._told.set()

    @contextlib.contextmanager
    def listening(self, listener: Callable[[list[ModelCall]], None]) -> Iterator[None]:
        """`listener` gets every reading from now, the newest one first (a call that streams
        already: what it has written so far)."""
        listener(self._latest)
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    async def _read(self) -> None:
        with contextlib.suppress(RPCError):  # the run is gone: its followers say so
            while True:
                await self._told.wait()
                if not await self._while_pending():
                    return

    async def _while_pending(self) -> bool:
        """Read while a model call is pending; False once the run has ended."""
        fastest = TEXT_POLL_INTERVAL.total_seconds()
        pause, missed = fastest, 0
        while True:
            self._told.clear()
            now = await self._run.model_calls()
            self._latest = now.calls
            for listener in list(self._listeners):
                listener(now.calls)
            if not now.running:
                return False
            if any(call.progress is not None for call in now.calls):
                pause = fastest
            elif not now.calls:
                # Looked at once after an event: the call may be a moment from being
                # scheduled, or over already. A second look, then wait for the next event.
                missed += 1
                if missed > 1:
                    return True
            elif all(call.not_streaming for call in now.calls):
                return True
            else:
                pause = min(pause * 1.5, TEXT_POLL_MAX_INTERVAL.total_seconds())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._told.wait(), pause)

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
