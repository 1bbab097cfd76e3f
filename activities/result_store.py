"""Where a tool result too large for the context is kept, so that nothing is lost by bounding it.

The model sees both ends of such a result, its size and a reference, and pages through the rest
with the built-in `read_result` tool (activities/read_result.py). The default store is a SQLite
file on the worker's disk (`$AGENT_RESULT_STORE`, else `.agent-data/results.db`), sealed with the
payload keys and pruned after the retention period as the message store is
(activities/message_store.py). Results are keyed by the hash of their content, so storing one
twice (a retried call) is harmless.

That file is this worker's only: a run that moves to another worker cannot read what it kept,
and the result's text says so (`worker_local`). A fleet of workers on several machines shares
one: with `AGENT_STORE_URL=postgresql://...` results go to that database's `agent_results`
table (activities/pg_store.py), sealed and pruned by the same rules, and any worker reads any
ref. Another store can be plugged in: implement `ResultStore` (two methods) and pass it to
`use_result_store`.
"""

from __future__ import annotations

import hashlib
import os
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

from .message_store import MessageStore, SqliteMessageStore, sqlite_store
from .pg_store import PostgresMessageStore, postgres_store
from .store_config import store_url_from_env


class ResultStore(Protocol):
    def put(self, text: str) -> str:
        """Keep `text`; return its reference."""
        ...

    def get(self, ref: str) -> str | None:
        """The text kept under `ref`, or None when this store does not have it."""
        ...


class _BlobResults:
    """Results kept as a message store's blobs, each under a hash of its content."""

    _blobs: MessageStore

    def put(self, text: str) -> str:
        ref = result_ref(text)
        self._blobs.put_blob(ref, text)
        return ref

    def get(self, ref: str) -> str | None:
        return self._blobs.get_blob(ref)


class SqliteResultStore(_BlobResults):
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


def result_ref(text: str) -> str:
    """A result's reference: a hash of its content, the same in every store."""
    return "r-" + hashlib.sha256(text.encode()).hexdigest()[:20]


class PostgresResultStore(_BlobResults):
    """The `agent_results` table of the PostgreSQL store, which every worker given the same
    AGENT_STORE_URL shares."""

    worker_local = False

    def __init__(self, url: str) -> None:
        """The database at `url`, with the keys and retention the environment configures."""
        self._blobs = postgres_store(url, "agent_results")

    @classmethod
    def on(cls, blobs: PostgresMessageStore) -> PostgresResultStore:
        """Over a store opened by hand (with its own keys, retention and clock), whose
        blob_table is agent_results."""
        if blobs.blob_table != "agent_results":
            raise ValueError("a result store keeps its results in agent_results")
        store = cls.__new__(cls)
        store._blobs = blobs
        return store


_store: ResultStore | None = None
plugin_store: ContextVar[ResultStore | None] = ContextVar("plugin_result_store", default=None)
"""The store of the plugin whose worker runs the current activity (AgentPlugin(stores=...))."""


def use_result_store(store: ResultStore | None) -> None:
    """Replace the default store (None goes back to the default SQLite file). A store is taken
    to be shared by every worker unless it has `worker_local = True`."""
    global _store
    _store = store


def result_store() -> ResultStore:
    """The store in use: the one given to use_result_store, else the PostgreSQL database of
    `AGENT_STORE_URL`, else the SQLite file of `AGENT_RESULT_STORE` (or the default path).
    Inside an activity of a plugin given stores of its own, that plugin's."""
    if (own := plugin_store.get()) is not None:
        return own
    if _store is not None:
        return _store
    url = store_url_from_env()
    if url is not None:
        return PostgresResultStore(url)
    path = os.environ.get("AGENT_RESULT_STORE") or Path.cwd() / ".agent-data" / "results.db"
    return SqliteResultStore(path)


def worker_local(store: ResultStore) -> bool:
    """Whether another worker cannot read what `store` keeps (the default file is such a one)."""
    return bool(getattr(store, "worker_local", False))
