"""Where a tool result too large for the context is kept, so that nothing is lost by bounding it.

The model sees both ends of such a result, its size and a reference, and pages through the rest
with the built-in `read_result` tool. The default store is a SQLite file on the worker's disk
(`$AGENT_RESULT_STORE`, else `.agent-data/results.db`); results are keyed by the hash of their
content, so storing one twice (a retried call) is harmless. A fleet of workers on several
machines needs a store they share: implement `ResultStore` (two methods) and pass it to
`use_result_store`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import Field

from activities.message_store import sqlite_store
from activities.tools import tool

READ_RESULT = "read_result"
MAX_READ = 6_000
"""The most characters one read_result call returns: always under a result's own bound."""


class ResultStore(Protocol):
    def put(self, text: str) -> str:
        """Keep `text`; return its reference."""
        ...

    def get(self, ref: str) -> str | None:
        """The text kept under `ref`, or None when this store does not have it."""
        ...


class SqliteResultStore:
    """A SQLite file, through the message store's key-value table."""

    def __init__(self, path: str | Path) -> None:
        self._blobs = sqlite_store(str(path))

    def put(self, text: str) -> str:
        ref = "r-" + hashlib.sha256(text.encode()).hexdigest()[:20]
        self._blobs.put_blob(ref, text)
        return ref

    def get(self, ref: str) -> str | None:
        return self._blobs.get_blob(ref)


_store: ResultStore | None = None


def use_result_store(store: ResultStore | None) -> None:
    """Replace the default store (None goes back to the default SQLite file)."""
    global _store
    _store = store


def result_store() -> ResultStore:
    if _store is not None:
        return _store
    path = os.environ.get("AGENT_RESULT_STORE") or Path.cwd() / ".agent-data" / "results.db"
    return SqliteResultStore(path)


@tool(name=READ_RESULT, max_result_chars=MAX_READ + 500)
def read_result(
    ref: Annotated[str, Field(description="The reference a shortened result gave, e.g. r-3f2a...")],
    offset: Annotated[int, Field(ge=0, description="First character to return, from 0.")] = 0,
    length: Annotated[
        int, Field(gt=0, le=MAX_READ, description=f"How many characters, at most {MAX_READ}.")
    ] = 4_000,
) -> dict[str, Any]:
    """Read part of a tool result that was too large to show whole.

    A shortened result shows its start and end, its full size and a ref. Use this to read the
    part you need: characters offset to offset+length (at most 6,000 at a time). Returns ref,
    offset, length (as returned), total_chars and text. Page forward by calling again with
    offset increased by length. An unknown ref gives found=false and a message.
    """
    text = result_store().get(ref)
    if text is None:
        return {
            "found": False,
            "ref": ref,
            "message": f"no stored result {ref!r}; use the ref exactly as the result gave it.",
        }
    part = text[offset : offset + length]
    return {
        "found": True,
        "ref": ref,
        "offset": offset,
        "length": len(part),
        "total_chars": len(text),
        "text": part,
    }
