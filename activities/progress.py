"""Progress events that only an activity can see as they happen: the start of a retry.

The workflow publishes everything else on the run's progress stream itself; a retry is invisible
to it until the activity finally returns. So an attempt after the first announces itself on the
stream, by a signal to its own workflow, before it does its work.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from ..workflows.events import EVENTS_TOPIC, AgentEvent

PUBLISH_TIMEOUT_SECONDS = 2.0
"""A retry is not held up for long by its own report: the report is what gives way."""

logger = logging.getLogger(__name__)


async def report_retry(
    step: int, what: str, *, call_id: str | None = None, tool: str | None = None
) -> None:
    """Publish a `retry` event when this is not the first attempt; never fails the attempt."""
    info = activity.info()
    if info.attempt <= 1 or not info.workflow_id:
        return
    event = AgentEvent(
        kind="retry",
        step=step,
        at=datetime.now(UTC),
        call_id=call_id,
        tool=tool,
        attempts=info.attempt,
        text=f"{what}: attempt {info.attempt}",
    )
    try:
        stream = WorkflowStreamClient.from_within_activity()
        stream.topic(EVENTS_TOPIC, type=AgentEvent).publish(event)
        await asyncio.wait_for(stream.flush(), PUBLISH_TIMEOUT_SECONDS)
    except Exception as error:  # the run may have ended, or the server be slow: carry on
        logger.warning("could not report %s on the progress stream: %s", event.text, error)
