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

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from temporalio import activity

from workflows.models import STREAM_KEPT_CHARS, ModelRequest, StreamProgress

HEARTBEAT_THROTTLE = timedelta(milliseconds=100)
"""How often a provider worker sends a streaming call's newest heartbeat at most: the batch."""
_MIN_BEAT_SECONDS = HEARTBEAT_THROTTLE.total_seconds() / 2
"""Deltas closer than this are not handed to the SDK one by one (it would keep only the last)."""

_current: ContextVar[StreamPublisher | None] = ContextVar("stream_publisher", default=None)


class StreamPublisher:
    def __init__(self, step: int, attempt: int) -> None:
        self._step, self._attempt = step, attempt
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._last_beat = 0.0

    def text(self, delta: str) -> None:
        self._text.append(delta)
        self._beat()

    def reasoning(self, delta: str) -> None:
        self._reasoning.append(delta)
        self._beat()

    def progress(self) -> StreamProgress:
        text, text_offset = _tail(self._text)
        reasoning, reasoning_offset = _tail(self._reasoning)
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
        if activity.in_activity():
            activity.heartbeat(self.progress())

    def _beat(self) -> None:
        if time.monotonic() - self._last_beat >= _MIN_BEAT_SECONDS:
            self.heartbeat()


def _tail(pieces: list[str]) -> tuple[str, int]:
    whole = "".join(pieces)
    if len(pieces) > 1:
        pieces[:] = [whole]  # joined once, not at every beat
    cut = max(len(whole) - STREAM_KEPT_CHARS, 0)
    return whole[cut:], cut


@contextmanager
def publishing(request: ModelRequest, attempt: int) -> Iterator[StreamPublisher | None]:
    """A publisher for this call when it streams (None otherwise), for the adapters to find."""
    if not request.settings.stream or request.purpose != "step":
        yield None
        return
    publisher = StreamPublisher(request.step, attempt)
    token = _current.set(publisher)
    try:
        publisher.heartbeat()  # a new attempt says so at once: the last one's deltas are void
        yield publisher
    finally:
        publisher.heartbeat()
        _current.reset(token)


def current() -> StreamPublisher | None:
    return _current.get()
