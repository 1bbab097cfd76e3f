"""Where a tool result too large for the context is kept, so that nothing is lost by bounding it.

The model sees both ends of such a result, its size and a reference, and pages through the rest
with the built-in `read_result` tool (activities/read_result.py). The default store is a SQLite
file on the worker's disk
(`$AGENT_RESULT_STORE`, else `.agent-data/results.db`); results are keyed by the hash of their
content, so storing one twice (a retried call) is harmless. A fleet of workers on several
machines needs a store they share: implement `ResultStore` (two methods) and pass it to
`use_result_store`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol

from activities.message_store import sqlite_store


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
