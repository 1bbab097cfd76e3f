"""The worker's store for the messages and tool schemas model calls refer to (workflows/history).

A SQLite file on the worker by default (`$AGENT_MESSAGE_STORE`, else `.agent-data/messages.db`):
one row per chain link (its reference, its parent's, and the message) and one per blob (a tool
list, a script, a tool result; the result store keeps its results in a file of its own, through
the same class). With `AGENT_STORE_URL=postgresql://...` it is a PostgreSQL database instead
(activities/pg_store.py), which every worker of a fleet shares; a process may also plug in its
own with `use_message_store`. A call that lands on a worker whose store lacks the prefix misses,
and the workflow resends the whole request once.

- **Only what a later call names is written.** A request that names nothing by reference (a
  run's first call, every call without linear history, a call sent whole after a miss or a
  compaction) is kept in this process's memory only, and written to the store when a later call
  names it. So a run with `linear_history=False` writes nothing to a worker's own file, and a
  restart between a call and the next costs one miss. A shared store is different in one place:
  a run's first call (step 1) is written at once, since its next call may well land on another
  worker, and this process may be gone by then.
- **Encrypted with the payload keys**, and **pruned** after `AGENT_STORE_RETENTION` (7 days by
  default), as activities/store_config.py says. References stay hashes of the plaintext. An
  entry this process cannot open (no keys, or not that key) is a miss, and a warning names the
  key id once. An entry is pruned when it is unused for the retention period, at most once an
  hour per process, when the store is opened or written; reading an entry counts as a use, and
  a link stays as long as a link after it does.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol, cast

from pydantic import TypeAdapter

from ..encryption.payload_codec import PayloadKey
from ..workflows.activity_io import ModelRequest
from ..workflows.history import (
    chain_refs,
    message_json,
    script_json,
    script_ref,
    tools_ref,
)
from ..workflows.model_settings import ScriptedTurn
from ..workflows.specs import ToolSpec
from ..workflows.transcript import Message, message_adapter
from .pg_store import postgres_store
from .sqlite_wal import owner_only, use_wal
from .store_config import (
    DEFAULT_RETENTION_HOURS,
    LEGACY_RETENTION_VARIABLE,
    RETENTION_VARIABLE,
    TOUCH_EVERY_SECONDS,
    RecentChains,
    Sealing,
    StoreCipher,
    configuration,
    configured_keys,
    retention_hours_from_env,
    sealed_key_id,
    store_url_from_env,
)

logger = logging.getLogger(__name__)

_tools_adapter: TypeAdapter[list[ToolSpec]] = TypeAdapter(list[ToolSpec])
_script_adapter: TypeAdapter[list[ScriptedTurn]] = TypeAdapter(list[ScriptedTurn])

__all__ = [
    "DEFAULT_RETENTION_HOURS",
    "LEGACY_RETENTION_VARIABLE",
    "RETENTION_VARIABLE",
    "MessageStore",
    "SqliteMessageStore",
    "StoreCipher",
    "message_store",
    "remember",
    "resolve_blob",
    "resolve_prefix",
    "resolve_script",
    "resolve_tools",
    "retention_hours_from_env",
    "sealed_key_id",
    "sqlite_store",
    "use_message_store",
]

PRUNE_EVERY_SECONDS = 3600.0
"""A store prunes when it is opened, then at most this often (when it is written)."""
BUSY_TIMEOUT_SECONDS = 30.0
"""How long a write waits for another process's lock on a shared file."""


class MessageStore(Protocol):
    def put_chain(self, links: list[tuple[str, str, str]]) -> None:
        """Keep (ref, parent ref, message JSON) links; storing a known ref again is harmless."""
        ...

    def get_chain(self, ref: str) -> list[str] | None:
        """The message JSONs from the start of the chain to `ref`, or None if a link is missing."""
        ...

    def put_blob(self, ref: str, text: str) -> None: ...

    def get_blob(self, ref: str) -> str | None: ...


class SqliteMessageStore:
    """One connection, opened on first use and shared by the worker's threads under a lock, and
    the newest chains in memory: a run's next model call names the chain its previous call left,
    so it is usually read without touching the file.

    `keys`: seal what is written (see StoreCipher); none: plaintext, as before. `retention_hours`:
    how long an unused entry is kept. `clock`: the wall clock, in seconds (tests move it)."""

    def __init__(
        self,
        path: str | Path,
        *,
        keys: Sequence[PayloadKey] = (),
        retention_hours: float = DEFAULT_RETENTION_HOURS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not retention_hours > 0:
            raise ValueError(f"retention_hours must be above 0, not {retention_hours!r}")
        self.path = Path(path)
        self.retention_seconds = retention_hours * 3600
        self._sealing = Sealing(keys, str(self.path))
        self._clock = clock
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._chains = RecentChains()
        """Head ref -> (the chain's messages, when its head's last use was last written)."""
        self._next_prune = 0.0

    def _connect(self) -> sqlite3.Connection:
        """The store's connection (callers hold the lock); opening it prunes."""
        if self._connection is None:
            owner_only(self.path)
            connection = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False
            )
            # A commit a model call, on the worker's event loop: it must not wait for the disk.
            # A store that loses its last commits to a power cut only costs a StoreMiss (the
            # request goes again whole, workflows/model_gateway.py), never a run.
            use_wal(connection, BUSY_TIMEOUT_SECONDS, fsync=False)
            # Deleted and replaced entries are overwritten, not left in free pages.
            connection.execute("PRAGMA secure_delete = ON")
            with connection:
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS links (ref TEXT PRIMARY KEY, parent TEXT, "
                    "message TEXT, used INTEGER NOT NULL DEFAULT 0)"
                )
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS blobs (ref TEXT PRIMARY KEY, text TEXT, "
                    "used INTEGER NOT NULL DEFAULT 0)"
                )
                for table in ("links", "blobs"):
                    columns = [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
                    if "used" not in columns:
                        # A file from before pruning: its entries' retention starts now.
                        connection.execute(
                            f"ALTER TABLE {table} ADD COLUMN used INTEGER NOT NULL DEFAULT 0"
                        )
                        connection.execute(f"UPDATE {table} SET used = ?", (self._now(),))
            self._connection = connection
            self._maybe_prune()
        return self._connection

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _now(self) -> int:
        return int(self._clock())

    def _seal(self, ref: str, text: str) -> str | bytes:
        # Written without keys: TEXT; sealed: BLOB.
        sealed = self._sealing.seal(ref, text)
        return text if sealed is None else sealed

    def _open(self, ref: str, value: Any) -> str | None:
        """An entry's text, or None (a miss, with a warning once per key id) when it cannot be
        opened here."""
        return self._sealing.open(ref, value, sealed=isinstance(value, bytes))

    def _maybe_prune(self) -> None:
        if self._clock() >= self._next_prune:
            self._prune_locked()

    def prune(self) -> tuple[int, int]:
        """Delete the entries unused for the retention period now; (links, blobs) deleted."""
        with self._lock:
            self._connect()
            return self._prune_locked()

    def _prune_locked(self) -> tuple[int, int]:
        connection = self._connection
        assert connection is not None
        now = self._clock()
        self._next_prune = now + PRUNE_EVERY_SECONDS
        cutoff = int(now - self.retention_seconds)
        with connection:
            # A link is kept while any link after it is: a run that is still going writes and
            # reads the head of its chain, never again the links it builds on.
            before = connection.total_changes
            connection.execute(
                "WITH RECURSIVE kept(ref) AS ("
                " SELECT ref FROM links WHERE used >= :cutoff"
                " UNION SELECT l.parent FROM links l JOIN kept k ON l.ref = k.ref"
                " WHERE l.parent != '')"
                " DELETE FROM links WHERE used < :cutoff AND ref NOT IN kept",
                {"cutoff": cutoff},
            )
            # (sqlite3 reports no rowcount for a statement that starts with WITH.)
            links = connection.total_changes - before
            blobs = connection.execute("DELETE FROM blobs WHERE used < ?", (cutoff,)).rowcount
        if links:
            self._chains.clear()
        return links, blobs

    def put_chain(self, links: list[tuple[str, str, str]]) -> None:
        if not links:
            return
        now = self._now()
        rows = [(ref, up, self._seal(ref, message), now) for ref, up, message in links]
        with self._lock:
            connection = self._connect()
            with connection:
                # The same ref is the same content: writing it again only refreshes its use
                # (and seals it with the newest key).
                connection.executemany(
                    "INSERT INTO links (ref, parent, message, used) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(ref) DO UPDATE SET message = excluded.message,"
                    " used = excluded.used",
                    rows,
                )
            self._maybe_prune()
            parent = links[0][1]
            known = [] if parent == "" else self._chains.known(parent)
            if known is not None:
                chain = [*known, *(message for _, _, message in links)]
                self._chains.keep(links[-1][0], chain, self._clock())

    def get_chain(self, ref: str) -> list[str] | None:
        with self._lock:
            now = self._clock()
            if (kept := self._chains.get(ref)) is not None:
                chain, touched = kept
                if now - touched >= TOUCH_EVERY_SECONDS:
                    self._touch("links", ref)
                    self._chains.keep(ref, chain, now)
                return list(chain)
            rows = (
                self._connect()
                .execute(
                    "WITH RECURSIVE chain(ref, parent, message, used, depth) AS ("
                    " SELECT ref, parent, message, used, 0 FROM links WHERE ref = ?"
                    " UNION ALL SELECT l.ref, l.parent, l.message, l.used, c.depth + 1"
                    " FROM links l JOIN chain c ON l.ref = c.parent)"
                    " SELECT ref, parent, message, used FROM chain ORDER BY depth DESC",
                    (ref,),
                )
                .fetchall()
            )
            # Complete only if the walk reached the start of the chain (a link whose parent is "").
            if not rows or rows[0][1] != "":
                return None
            texts = [self._open(link, message) for link, _, message, _ in rows]
            if any(text is None for text in texts):
                return None
            chain = cast(list[str], texts)
            if rows[-1][3] < now - TOUCH_EVERY_SECONDS:
                self._touch("links", ref)
            self._chains.keep(ref, chain, now)
            return list(chain)

    def _touch(self, table: str, ref: str) -> None:
        """Mark an entry used now (callers hold the lock)."""
        with self._connect() as connection:
            connection.execute(f"UPDATE {table} SET used = ? WHERE ref = ?", (self._now(), ref))

    def put_blob(self, ref: str, text: str) -> None:
        row = (ref, self._seal(ref, text), self._now())
        with self._lock:
            with self._connect() as connection:
                connection.execute(
                    "INSERT INTO blobs (ref, text, used) VALUES (?, ?, ?)"
                    " ON CONFLICT(ref) DO UPDATE SET text = excluded.text, used = excluded.used",
                    row,
                )
            self._maybe_prune()

    def get_blob(self, ref: str) -> str | None:
        with self._lock:
            row = (
                self._connect()
                .execute("SELECT text, used FROM blobs WHERE ref = ?", (ref,))
                .fetchone()
            )
            if row is None:
                return None
            text = self._open(ref, row[0])
            if text is not None and row[1] < self._clock() - TOUCH_EVERY_SECONDS:
                self._touch("blobs", ref)
            return text


UNWRITTEN_CHARS = 8_000_000
"""What requests that named nothing sent, kept in memory until a later call names it: at most
this many characters, oldest used dropped first (a dropped entry is a miss)."""


class _Unwritten:
    """The memory of what no call has named yet, by reference: chain links and blobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[str | None, str]] = OrderedDict()
        """ref -> (parent ref for a link, None for a blob; the text)."""
        self._chars = 0

    def put_chain(self, links: list[tuple[str, str, str]]) -> None:
        with self._lock:
            for ref, parent, message in links:
                self._put(ref, parent, message)
            self._bound()

    def put_blob(self, ref: str, text: str) -> None:
        with self._lock:
            self._put(ref, None, text)
            self._bound()

    def take_chain(self, ref: str) -> list[tuple[str, str, str]] | None:
        """The links from the start of the chain to `ref`, removed from memory; None if one is
        missing here."""
        with self._lock:
            links: list[tuple[str, str, str]] = []
            while ref != "":
                entry = self._entries.get(ref)
                if entry is None or entry[0] is None:
                    return None
                links.append((ref, entry[0], entry[1]))
                ref = entry[0]
            for link in links:
                self._drop(link[0])
            return links[::-1]

    def take_blob(self, ref: str) -> str | None:
        with self._lock:
            entry = self._entries.get(ref)
            if entry is None or entry[0] is not None:
                return None
            self._drop(ref)
            return entry[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0

    def _put(self, ref: str, parent: str | None, text: str) -> None:
        if ref in self._entries:
            self._entries.move_to_end(ref)
            return
        self._entries[ref] = (parent, text)
        self._chars += len(text)

    def _drop(self, ref: str) -> None:
        _, text = self._entries.pop(ref)
        self._chars -= len(text)

    def _bound(self) -> None:
        while self._entries and self._chars > UNWRITTEN_CHARS:
            _, (_, text) = self._entries.popitem(last=False)
            self._chars -= len(text)


_unwritten = _Unwritten()

_store: MessageStore | None = None
_by_config: OrderedDict[tuple[str, ...], SqliteMessageStore] = OrderedDict()
_OPEN_STORES = 4
"""Stores kept open at once; the path and keys come from the environment, which tests change."""
_by_config_lock = threading.Lock()


plugin_store: ContextVar[MessageStore | None] = ContextVar("plugin_message_store", default=None)
"""The store of the plugin whose worker runs the current activity (AgentPlugin(stores=...)):
set around each of its activities, so two plugins in one process use their own."""


def use_message_store(store: MessageStore | None) -> None:
    """Replace the store the environment names (None goes back to it)."""
    global _store
    _store = store


def message_store() -> MessageStore:
    """The store in use: the one given to use_message_store, else the PostgreSQL database of
    `AGENT_STORE_URL`, else the SQLite file of `AGENT_MESSAGE_STORE` (or the default path).
    Inside an activity of a plugin given stores of its own, that plugin's."""
    if (own := plugin_store.get()) is not None:
        return own
    if _store is not None:
        return _store
    url = store_url_from_env()
    if url is not None:
        return postgres_store(url)
    path = os.environ.get("AGENT_MESSAGE_STORE") or Path.cwd() / ".agent-data" / "messages.db"
    return sqlite_store(str(path))


def sqlite_store(path: str) -> SqliteMessageStore:
    """The one open store of the file at `path`, sealing with the payload keys and pruning after
    the retention the environment configures. A malformed configuration is an
    AgentConfigurationError, which fails the run rather than being retried."""
    config = (path, *configuration())
    with _by_config_lock:
        store = _by_config.get(config)
        if store is None:
            store = _by_config[config] = SqliteMessageStore(
                path, keys=configured_keys(), retention_hours=retention_hours_from_env()
            )
            while len(_by_config) > _OPEN_STORES:
                _by_config.popitem(last=False)[1].close()
        _by_config.move_to_end(config)
        return store


def shared(store: object) -> bool:
    """Whether other workers read what `store` keeps (a PostgreSQL store; not a worker's file)."""
    return bool(getattr(store, "shared", False))


def resolve_prefix(ref: str, count: int) -> list[Message] | None:
    """The messages `ref` names, from memory if no call had named them yet (they are written to
    the store now), else from the store; None on a miss."""
    texts: list[str] | None
    links = _unwritten.take_chain(ref)
    if links is not None:
        message_store().put_chain(links)
        texts = [message for _, _, message in links]
    else:
        texts = message_store().get_chain(ref)
    if texts is None or len(texts) != count:
        return None
    return _parsed_messages(texts)


def resolve_blob(ref: str) -> str | None:
    """A tool list, script or tool result by reference, as `resolve_prefix` finds a chain."""
    text = _unwritten.take_blob(ref)
    if text is not None:
        message_store().put_blob(ref, text)
        return text
    return message_store().get_blob(ref)


_parsed: OrderedDict[str, list[ToolSpec] | list[ScriptedTurn]] = OrderedDict()
_PARSED_KEPT = 64
"""Tool lists and scripts kept parsed: a run names the same one on every call, and a reference
is a hash of the content, so a parsed copy never goes stale."""
_parsed_lock = threading.Lock()


def _parse_once(ref: str, adapter: TypeAdapter[Any]) -> Any:
    with _parsed_lock:
        known = _parsed.get(ref)
        if known is not None:
            _parsed.move_to_end(ref)
    if known is not None:
        # Parsed already, but named for the first time since a request sent it whole: the
        # store must have it too, for when this process is gone.
        if (text := _unwritten.take_blob(ref)) is not None:
            message_store().put_blob(ref, text)
        return list(known)
    text = resolve_blob(ref)
    if text is None:
        return None
    value = adapter.validate_json(text)
    with _parsed_lock:
        _parsed[ref] = value
        while len(_parsed) > _PARSED_KEPT:
            _parsed.popitem(last=False)
    return list(value)


_messages: OrderedDict[str, Message] = OrderedDict()
_messages_chars = 0
MESSAGES_KEPT_CHARS = 16_000_000
"""The JSON of the messages kept parsed, at most: a run's next call names the chain its last call
sent, so all its messages but the newest were parsed already (parsing each again made every call
linear in the run's length). Messages are frozen, so one parsed copy serves every call."""


def _parsed_messages(texts: list[str]) -> list[Message]:
    global _messages_chars
    with _parsed_lock:
        known = [_messages.get(text) for text in texts]
    parsed = [
        message if message is not None else message_adapter.validate_json(text)
        for text, message in zip(texts, known, strict=True)
    ]
    with _parsed_lock:
        for text, message in zip(texts, parsed, strict=True):
            if text in _messages:
                _messages.move_to_end(text)
            else:
                _messages[text] = message
                _messages_chars += len(text)
        while _messages and _messages_chars > MESSAGES_KEPT_CHARS:
            text, _ = _messages.popitem(last=False)
            _messages_chars -= len(text)
    return parsed


def resolve_tools(ref: str) -> list[ToolSpec] | None:
    return cast(list[ToolSpec] | None, _parse_once(ref, _tools_adapter))


def resolve_script(ref: str) -> list[ScriptedTurn] | None:
    return cast(list[ScriptedTurn] | None, _parse_once(ref, _script_adapter))


def names_something(request: ModelRequest) -> bool:
    """Whether the request, as the workflow sent it, names anything by reference: only a run with
    linear history does, and then its later calls will name what this one sent."""
    return bool(
        request.prefix_ref is not None
        or request.tools_ref is not None
        or request.script_ref is not None
        or request.content_refs
    )


def remember(named: ModelRequest, resolved: ModelRequest) -> None:
    """Keep what this call sent (`resolved`, the request `named` with its references filled in),
    so that the next call can name it.

    What the call named is stored already: only the messages after its prefix are hashed and
    kept, and the tool list and script only when they came whole. A request that named nothing
    is kept in memory only, until a call names it; a summary is never named, so not kept. A
    shared store gets a run's first call at once: the next call may land on another worker."""
    if named.purpose == "summary":
        return
    store = message_store()
    written = names_something(named) or (named.step == 1 and shared(store))
    keep: MessageStore | _Unwritten = store if written else _unwritten
    parent = named.prefix_ref or ""
    new = resolved.messages[named.prefix_count :] if named.prefix_ref else resolved.messages
    refs = chain_refs(new, parent)
    parents = [parent, *refs[:-1]]
    keep.put_chain(
        [(ref, up, message_json(m)) for ref, up, m in zip(refs, parents, new, strict=True)]
    )
    if named.tools_ref is None:
        # Named by the hash of the sorted JSON, but kept in the schemas' own key order: a
        # provider gets the same bytes for the tools at every step (a prompt-cache prefix).
        tools = _tools_adapter.dump_json(resolved.tools).decode()
        keep.put_blob(tools_ref(resolved.tools), tools)
    script = resolved.settings.script
    if script and named.script_ref is None:
        keep.put_blob(script_ref(script), script_json(script))
