"""A page of a list a query answers: the transcript, the trace, the compensation log.

A query's answer is one payload, so a list of any length is read page by page: from `start`, as
many items as fit in `max_bytes` of JSON, and always one, so that an item larger than a page
still comes out. Deterministic: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, TypeVar

from pydantic import BaseModel, Field

from .bounds import MAX_COUNT, Count
from .state import AppliedEffect, EarlierSteps, StepRecord
from .transcript import Message

Item = TypeVar("Item", bound=BaseModel)


def fitting(items: Sequence[Item], start: int, max_bytes: int) -> list[Item]:
    """The items from index `start` whose JSON fits in `max_bytes` together (one at least)."""
    page: list[Item] = []
    size = 0
    for item in items[start:]:
        size += len(item.model_dump_json())
        if page and size > max_bytes:
            break
        page.append(item)
    return page


class TranscriptPageRequest(BaseModel):
    """Input of the `transcript_page` query."""

    start: Count = 0
    max_bytes: Annotated[int, Field(gt=0, le=MAX_COUNT)] = 1_000_000
    """The page's messages stop before this many bytes of JSON (one message at least): a query's
    answer may have at most 2 MB."""


class TranscriptPage(BaseModel):
    messages: list[Message]
    start: int
    total: int
    """Messages in the transcript; the next page starts at start + len(messages)."""


class EffectsPageRequest(BaseModel):
    """Input of the `effects_page` query."""

    start: Count = 0
    """An index into the compensation log (0: the oldest effect)."""
    max_bytes: Annotated[int, Field(gt=0, le=MAX_COUNT)] = 1_000_000
    """The page's entries stop before this many bytes of JSON (one entry at least)."""


class EffectsPage(BaseModel):
    effects: list[AppliedEffect]
    start: int
    total: int
    """Effects in the log; the next page starts at start + len(effects)."""


class TracePageRequest(BaseModel):
    """Input of the `trace_page` query."""

    start: Count = 0
    """An index into the kept step records (0: the oldest kept)."""
    max_bytes: Annotated[int, Field(gt=0, le=MAX_COUNT)] = 1_000_000
    """The page's records stop before this many bytes of JSON (one record at least)."""


class TracePage(BaseModel):
    step_records: list[StepRecord]
    start: int
    total: int
    """Records kept; the next page starts at start + len(step_records)."""
    earlier_steps: EarlierSteps | None = None
    """The steps before the oldest kept record, added up."""
    tool_notices: list[str] = []
    """What the run goes without (`RunTools.notices`): an optional MCP server that was down."""
