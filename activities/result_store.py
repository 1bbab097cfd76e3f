"""Where a tool result too large for the context is kept, so that nothing is lost by bounding it.

The model sees both ends of such a result, its size and a reference, and pages through the rest
with the built-in `read_result` tool (activities/read_result.py). The default store is a SQLite
file on the worker's disk (`$AGENT_RESULT_STORE`, else `.agent-data/results.db`), sealed with the
payload keys and pruned after the retention period as the message store is
(activities/message_store.py). Results are keyed by the hash of their content, so storing one
twice (a retried call) is harmless.

That file is this worker's only: a run that moves to another worker cannot read what it kept,
and the result's text says so (`worker_local`). A fleet of workers on several machines needs a
store they share: implement `ResultStore` (two methods) and pass it to `use_result_store`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol

from activities.message_store import SqliteMessageStore, sqlite_store


class ResultStore(Protocol):
    def put(self, text: str) -> str:
        """Keep `text`; return its reference."""
        ...

    def get(self, ref: str) -> str | None:
        """The text kept under `ref`, or None when this store does not have it."""
        ...


class SqliteResultStore:
    """A SQLite file, through the message store's key-value table."""

    worker_local = True
    """Only the worker that wrote a result can read it back."""

    def __init__(self, path: str | Path) -> None:
        """The file at `path`, with the keys and retention the environment configures."""
        self._blobs = sqlite_store(str(path))

    @classmethod
    def on(cls, blobs: SqliteMessageStore) -> SqliteResultStore:
        """Over a store opened by hand (with its own keys, retention and clock)."""
        store = cls.__new__(cls)
        store._blobs = blobs
        return store

    def put(self, text: str) -> str:
        ref = "r-" + hashlib.sha256(text.encode()).hexdigest()[:20]
        self._blobs.put_blob(ref, text)
        return ref

    def get(self, ref: str) -> str | None:
        return self._blobs.get_blob(ref)


_store: ResultStore | None = None


def use_result_store(store: ResultStore | None) -> None:
    """Replace the default store (None goes back to the default SQLite file). A store is taken
    to be shared by every worker unless it has `worker_local = True`."""
    global _store
    _store = store


def result_store() -> ResultStore:
    if _store is not None:
        return _store
    path = os.environ.get("AGENT_RESULT_STORE") or Path.cwd() / ".agent-data" / "results.db"
    return SqliteResultStore(path)


def worker_local(store: ResultStore) -> bool:
    """Whether another worker cannot read what `store` keeps (the default file is such a one)."""
    return bool(getattr(store, "worker_local", False))
