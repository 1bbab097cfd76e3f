"""What a streaming model call has written so far, published through the activity's heartbeats.

A delta is no history event: signalling the run per delta would put one event (and its bytes)
in the history for every ~100 ms of output. Heartbeats are not recorded in the history; the
server keeps only the newest details of a pending activity, which `AgentRun.deltas()` reads with
describe. The worker sends them at most every HEARTBEAT_THROTTLE (the provider workers'
`max_heartbeat_throttle_interval`), which batches the deltas. Each heartbeat carries everything
written so far (its newest STREAM_KEPT_CHARS a kind), so a reader that misses one misses nothing,
and its attempt, so a reader knows when a failed attempt's deltas are void.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from temporalio import activity

from ...workflows.activity_io import STREAM_KEPT_CHARS, ModelRequest, StreamProgress

HEARTBEAT_THROTTLE = timedelta(milliseconds=100)
"""How often a provider worker sends a streaming call's newest heartbeat at most: the batch."""
_MIN_BEAT_SECONDS = HEARTBEAT_THROTTLE.total_seconds() / 2
"""Deltas closer than this are not handed to the SDK one by one (it would keep only the last)."""

_current: ContextVar[StreamPublisher | None] = ContextVar("stream_publisher", default=None)


class StreamPublisher:
    def __init__(self, step: int, attempt: int) -> None:
        self._step, self._attempt = step, attempt
        self._text = _Kept()
        self._reasoning = _Kept()
        self._last_beat = 0.0
        self._trailing: asyncio.TimerHandle | None = None

    def text(self, delta: str) -> None:
        self._text.append(delta)
        self._beat()

    def reasoning(self, delta: str) -> None:
        self._reasoning.append(delta)
        self._beat()

    def progress(self) -> StreamProgress:
        text, text_offset = self._text.newest()
        reasoning, reasoning_offset = self._reasoning.newest()
        return StreamProgress(
            step=self._step,
            attempt=self._attempt,
            text=text,
            text_offset=text_offset,
            reasoning=reasoning,
            reasoning_offset=reasoning_offset,
        )

    def heartbeat(self) -> None:
        """Hand the newest progress to the SDK, which sends it with the next heartbeat."""
        self._last_beat = time.monotonic()
        if self._trailing is not None:
            self._trailing.cancel()
            self._trailing = None
        if activity.in_activity():
            activity.heartbeat(self.progress())

    def close(self) -> None:
        if self._trailing is not None:
            self._trailing.cancel()
            self._trailing = None

    def _beat(self) -> None:
        wait = self._last_beat + _MIN_BEAT_SECONDS - time.monotonic()
        if wait <= 0:
            self.heartbeat()
        elif self._trailing is None:
            # A delta just after a beat goes with the next one: even when the model then pauses.
            self._trailing = asyncio.get_running_loop().call_later(wait, self.heartbeat)


class _Withheld(StreamPublisher):
    """A call that streams from the provider, but whose text no one may read before the run's
    output guardrails have: its beats carry no details."""

    def text(self, delta: str) -> None:
        pass

    def reasoning(self, delta: str) -> None:
        pass

    def heartbeat(self) -> None:
        if activity.in_activity():
            activity.heartbeat()


class _Kept:
    """The newest STREAM_KEPT_CHARS of a stream of pieces, and how many came before them."""

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._dropped = 0

    def append(self, piece: str) -> None:
        self._pieces.append(piece)

    def newest(self) -> tuple[str, int]:
        whole = "".join(self._pieces)
        if len(whole) > STREAM_KEPT_CHARS:
            self._dropped += len(whole) - STREAM_KEPT_CHARS
            whole = whole[-STREAM_KEPT_CHARS:]
        self._pieces = [whole]  # joined once, not again at every beat
        return whole, self._dropped


@contextmanager
def publishing(request: ModelRequest, attempt: int) -> Iterator[StreamPublisher | None]:
    """A publisher for this call when it streams (None otherwise), for the adapters to find;
    one that publishes nothing when the run's output guardrails must read the answer first."""
    if not request.settings.stream or request.purpose != "step":
        yield None
        return
    withheld = request.deltas_withheld
    publisher = (_Withheld if withheld else StreamPublisher)(request.step, attempt)
    token = _current.set(publisher)
    try:
        publisher.heartbeat()  # a new attempt says so at once: the last one's deltas are void
        yield publisher
    finally:
        publisher.heartbeat()
        publisher.close()
        _current.reset(token)


def current() -> StreamPublisher | None:
    return _current.get()
