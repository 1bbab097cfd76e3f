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
from pathlib import Path
from typing import Protocol

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


class SqliteMessageStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=30)
        connection.execute(
            "CREATE TABLE IF NOT EXISTS links (ref TEXT PRIMARY KEY, parent TEXT, message TEXT)"
        )
        connection.execute("CREATE TABLE IF NOT EXISTS blobs (ref TEXT PRIMARY KEY, text TEXT)")
        return connection

    def put_chain(self, links: list[tuple[str, str, str]]) -> None:
        with self._connect() as connection:
            connection.executemany("INSERT OR IGNORE INTO links VALUES (?, ?, ?)", links)

    def get_chain(self, ref: str) -> list[str] | None:
        with self._connect() as connection:
            rows = connection.execute(
                "WITH RECURSIVE chain(ref, parent, message, depth) AS ("
                " SELECT ref, parent, message, 0 FROM links WHERE ref = ?"
                " UNION ALL SELECT l.ref, l.parent, l.message, c.depth + 1"
                " FROM links l JOIN chain c ON l.ref = c.parent)"
                " SELECT parent, message FROM chain ORDER BY depth DESC",
                (ref,),
            ).fetchall()
        # Complete only if the walk reached the start of the chain (a link whose parent is "").
        if not rows or rows[0][0] != "":
            return None
        return [str(message) for _, message in rows]

    def put_blob(self, ref: str, text: str) -> None:
        with self._connect() as connection:
            connection.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (ref, text))

    def get_blob(self, ref: str) -> str | None:
        with self._connect() as connection:
            row = connection.execute("SELECT text FROM blobs WHERE ref = ?", (ref,)).fetchone()
        return None if row is None else str(row[0])


_store: MessageStore | None = None


def use_message_store(store: MessageStore | None) -> None:
    global _store
    _store = store


def message_store() -> MessageStore:
    if _store is not None:
        return _store
    path = os.environ.get("AGENT_MESSAGE_STORE") or Path.cwd() / ".agent-data" / "messages.db"
    return SqliteMessageStore(path)


def resolve_prefix(ref: str, count: int) -> list[Message] | None:
    texts = message_store().get_chain(ref)
    if texts is None or len(texts) != count:
        return None
    return [message_adapter.validate_json(text) for text in texts]


def resolve_tools(ref: str) -> list[ToolSpec] | None:
    text = message_store().get_blob(ref)
    return None if text is None else _tools_adapter.validate_json(text)


def resolve_script(ref: str) -> list[ScriptedTurn] | None:
    text = message_store().get_blob(ref)
    return None if text is None else _script_adapter.validate_json(text)


def remember(
    messages: list[Message], tools: list[ToolSpec], script: list[ScriptedTurn] | None = None
) -> None:
    """Keep what this call sent, so that the next call can refer to it."""
    store = message_store()
    refs = chain_refs(messages)
    parents = ["", *refs[:-1]]
    store.put_chain(
        [
            (ref, parent, message_json(m))
            for ref, parent, m in zip(refs, parents, messages, strict=True)
        ]
    )
    store.put_blob(tools_ref(tools), tools_json(tools))
    if script:
        store.put_blob(script_ref(script), script_json(script))
