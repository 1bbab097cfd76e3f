"""The worker's store for the messages and tool schemas model calls refer to (workflows/history).

A SQLite file on the worker by default (`$AGENT_MESSAGE_STORE`, else `.agent-data/messages.db`):
one row per chain link (its reference, its parent's, and the message) and one per tool list.
Workers on several machines can share one by implementing `MessageStore` and calling
`use_message_store`; without sharing, a call that lands on a worker that has not seen the prefix
misses, and the workflow resends the whole request once.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Protocol, cast

from pydantic import TypeAdapter

from workflows.history import (
    chain_refs,
    message_json,
    script_json,
    script_ref,
    tools_json,
    tools_ref,
)
from workflows.models import ScriptedTurn, ToolSpec
from workflows.transcript import Message, message_adapter

_tools_adapter: TypeAdapter[list[ToolSpec]] = TypeAdapter(list[ToolSpec])
_script_adapter: TypeAdapter[list[ScriptedTurn]] = TypeAdapter(list[ScriptedTurn])


class MessageStore(Protocol):
    def put_chain(self, links: list[tuple[str, str, str]]) -> None:
        """Keep (ref, parent ref, message JSON) links; known refs are left as they are."""
        ...

    def get_chain(self, ref: str) -> list[str] | None:
        """The message JSONs from the start of the chain to `ref`, or None if a link is missing."""
        ...

    def put_blob(self, ref: str, text: str) -> None: ...

    def get_blob(self, ref: str) -> str | None: ...


RECENT_CHAINS = 256
"""Chains a store keeps in memory, newest used first: about one per run the worker serves."""


class SqliteMessageStore:
    """One connection, opened on first use and shared by the worker's threads under a lock, and
    the newest chains in memory: a run's next model call names the chain its previous call left,
    so it is usually read without touching the file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._chains: OrderedDict[str, list[str]] = OrderedDict()

    def _connect(self) -> sqlite3.Connection:
        """The store's connection (callers hold the lock)."""
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            connection.execute(
                "CREATE TABLE IF NOT EXISTS links (ref TEXT PRIMARY KEY, parent TEXT, message TEXT)"
            )
            connection.execute("CREATE TABLE IF NOT EXISTS blobs (ref TEXT PRIMARY KEY, text TEXT)")
            self._connection = connection
        return self._connection

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def put_chain(self, links: list[tuple[str, str, str]]) -> None:
        if not links:
            return
        with self._lock:
            with self._connect() as connection:
                connection.executemany("INSERT OR IGNORE INTO links VALUES (?, ?, ?)", links)
            parent = links[0][1]
            known = [] if parent == "" else self._chains.get(parent)
            if known is not None:
                self._keep(links[-1][0], [*known, *(message for _, _, message in links)])

    def _keep(self, ref: str, chain: list[str]) -> None:
        self._chains[ref] = chain
        self._chains.move_to_end(ref)
        while len(self._chains) > RECENT_CHAINS:
            self._chains.popitem(last=False)

    def get_chain(self, ref: str) -> list[str] | None:
        with self._lock:
            if (chain := self._chains.get(ref)) is not None:
                self._chains.move_to_end(ref)
                return list(chain)
            rows = (
                self._connect()
                .execute(
                    "WITH RECURSIVE chain(ref, parent, message, depth) AS ("
                    " SELECT ref, parent, message, 0 FROM links WHERE ref = ?"
                    " UNION ALL SELECT l.ref, l.parent, l.message, c.depth + 1"
                    " FROM links l JOIN chain c ON l.ref = c.parent)"
                    " SELECT parent, message FROM chain ORDER BY depth DESC",
                    (ref,),
                )
                .fetchall()
            )
            # Complete only if the walk reached the start of the chain (a link whose parent is "").
            if not rows or rows[0][0] != "":
                return None
            chain = [str(message) for _, message in rows]
            self._keep(ref, chain)
            return list(chain)

    def put_blob(self, ref: str, text: str) -> None:
        with self._lock, self._connect() as connection:
            connection.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (ref, text))

    def get_blob(self, ref: str) -> str | None:
        with self._lock:
            row = self._connect().execute("SELECT text FROM blobs WHERE ref = ?", (ref,)).fetchone()
        return None if row is None else str(row[0])


_store: MessageStore | None = None
_by_path: OrderedDict[str, SqliteMessageStore] = OrderedDict()
_OPEN_STORES = 4
"""Stores kept open at once; the path comes from the environment, which tests change."""
_by_path_lock = threading.Lock()


def use_message_store(store: MessageStore | None) -> None:
    global _store
    _store = store


def message_store() -> MessageStore:
    if _store is not None:
        return _store
    path = os.environ.get("AGENT_MESSAGE_STORE") or Path.cwd() / ".agent-data" / "messages.db"
    return sqlite_store(str(path))


def sqlite_store(path: str) -> SqliteMessageStore:
    """The one open store of the file at `path`."""
    with _by_path_lock:
        store = _by_path.get(path)
        if store is None:
            store = _by_path[path] = SqliteMessageStore(path)
            while len(_by_path) > _OPEN_STORES:
                _by_path.popitem(last=False)[1].close()
        _by_path.move_to_end(path)
        return store


def resolve_prefix(ref: str, count: int) -> list[Message] | None:
    texts = message_store().get_chain(ref)
    if texts is None or len(texts) != count:
        return None
    return [message_adapter.validate_json(text) for text in texts]


_parsed: OrderedDict[str, list[ToolSpec] | list[ScriptedTurn]] = OrderedDict()
_PARSED_KEPT = 64
"""Tool lists and scripts kept parsed: a run names the same one on every call, and a reference
is a hash of the content, so a parsed copy never goes stale."""
_parsed_lock = threading.Lock()


def _parse_once(ref: str, adapter: TypeAdapter[Any]) -> Any:
    with _parsed_lock:
        if (known := _parsed.get(ref)) is not None:
            _parsed.move_to_end(ref)
            return list(known)
    text = message_store().get_blob(ref)
    if text is None:
        return None
    value = adapter.validate_json(text)
    with _parsed_lock:
        _parsed[ref] = value
        while len(_parsed) > _PARSED_KEPT:
            _parsed.popitem(last=False)
    return list(value)


def resolve_tools(ref: str) -> list[ToolSpec] | None:
    return cast(list[ToolSpec] | None, _parse_once(ref, _tools_adapter))


def resolve_script(ref: str) -> list[ScriptedTurn] | None:
    return cast(list[ScriptedTurn] | None, _parse_once(ref, _script_adapter))


def remember(
    messages: list[Message],
    tools: list[ToolSpec],
    script: list[ScriptedTurn] | None = None,
    *,
    prefix_ref: str | None = None,
    prefix_count: int = 0,
    stored_tools: bool = False,
    stored_script: bool = False,
) -> None:
    """Keep what this call sent, so that the next call can refer to it. What the call named by
    reference is stored already: only the messages after its prefix are hashed and written, and
    the tool list and script only when they came whole."""
    store = message_store()
    parent = prefix_ref or ""
    new = messages[prefix_count:] if prefix_ref else messages
    refs = chain_refs(new, parent)
    parents = [parent, *refs[:-1]]
    store.put_chain(
        [(ref, up, message_json(m)) for ref, up, m in zip(refs, parents, new, strict=True)]
    )
    if not stored_tools:
        store.put_blob(tools_ref(tools), tools_json(tools))
    if script and not stored_script:
        store.put_blob(script_ref(script), script_json(script))
