"""Heartbeats while an activity runs, so that a worker that died is noticed in seconds.

Without them the server learns of a lost attempt only when its start-to-close timeout runs out
(two minutes for a model call). With them, after the heartbeat timeout the workflow set; they
also carry a cancellation of the run to the activity.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from temporalio import activity


@asynccontextmanager
async def heartbeating(beat_with: Callable[[], None] | None = None) -> AsyncIterator[None]:
    """`beat_with`: beats that carry details (a streaming model call's progress), so that a
    plain beat never overwrites them."""
    timeout = activity.info().heartbeat_timeout if activity.in_activity() else None
    if not timeout:
        yield
        return

    async def beat() -> None:
        while True:
            if beat_with is None:
                activity.heartbeat()
            else:
                beat_with()
            await asyncio.sleep(timeout.total_seconds() / 3)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
