"""A page of a list a query answers: the transcript, the trace, the compensation log.

A query's answer is one payload, so a list of any length is read page by page: from `start`, as
many items as fit in `max_bytes` of JSON, and always one, so that an item larger than a page
still comes out. Deterministic: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

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
