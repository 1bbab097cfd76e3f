"""The message store and the result store in PostgreSQL: one store that every worker of a fleet
shares, so a run whose next step lands on another machine finds what the last one kept.

Chosen by `AGENT_STORE_URL=postgresql://user:password@host:port/database` (activities/
store_config.py); the SQLite files stay the default on one machine. The tables are created on
first use, in the database's default schema, under an advisory lock (workers that start
together do not race), with a version row so that a later release can migrate them:

- `agent_store_schema`: one row, the schema's `version`.
- `agent_links`: one row per chain link (ref, parent ref, the message), as in the SQLite store.
- `agent_blobs`: tool lists, scripts and tool results that model calls name.
- `agent_results`: the result store's externalised results (`read_result` pages through them).

Every entry's `body` is the text (`sealed` false) or, with the payload keys set, its AES-GCM
sealing (`sealed` true), and `used` is when it was last written or read (seconds since the
epoch, refreshed at most hourly by reads). Entries unused for the retention period are deleted
as in the SQLite store, by one worker at a time (an advisory lock), at most hourly per worker.

References are content hashes: two workers writing the same chain at once write the same rows,
and `INSERT ... ON CONFLICT DO UPDATE` lets both succeed; rows are written in reference order,
so two such writers never wait on each other in a circle.

psycopg and psycopg_pool are imported when a store is first opened, so a worker on SQLite does
not load them.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..encryption.payload_codec import PayloadKey
from ..workflows.errors import AgentConfigurationError
from . import store_config
from .store_config import (
    DEFAULT_RETENTION_HOURS,
    TOUCH_EVERY_SECONDS,
    RecentChains,
    Sealing,
    configuration,
    configured_keys,
    redacted,
    retention_hours_from_env,
)

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

SCHEMA_VERSION = 1
"""The version of the tables this code reads and writes."""
MIGRATIONS: dict[int, Sequence[str]] = {}
"""Statements that bring a schema of version v up to v + 1 (none yet)."""

_SCHEMA_LOCK = 0x6167_656E_7431  # "agent1": one advisory lock id for creating and migrating
_PRUNE_LOCK = 0x6167_656E_7432

_CREATE_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS agent_store_schema ("
    " only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),"
    " version integer NOT NULL)"
)
_ENTRY_COLUMNS = "body bytea NOT NULL, sealed boolean NOT NULL, used bigint NOT NULL"
_CREATE_TABLES = (
    f"CREATE TABLE IF NOT EXISTS agent_links (ref text PRIMARY KEY, parent text NOT NULL, "
    f"{_ENTRY_COLUMNS})",
    "CREATE INDEX IF NOT EXISTS agent_links_used ON agent_links (used)",
    f"CREATE TABLE IF NOT EXISTS agent_blobs (ref text PRIMARY KEY, {_ENTRY_COLUMNS})",
    "CREATE INDEX IF NOT EXISTS agent_blobs_used ON agent_blobs (used)",
    f"CREATE TABLE IF NOT EXISTS agent_results (ref text PRIMARY KEY, {_ENTRY_COLUMNS})",
    "CREATE INDEX IF NOT EXISTS agent_results_used ON agent_results (used)",
)
BLOB_TABLES = ("agent_blobs", "agent_results")

POOL_SIZE = 8
"""Connections a worker keeps to the store at most: model calls and tools share them."""
CONNECT_TIMEOUT_SECONDS = 10
PRUNE_EVERY_SECONDS = 3600.0


class StoreSchemaTooNew(AgentConfigurationError):
    """The database's tables were made by a newer release than this worker."""


def ensure_schema(connection: Any) -> int:
    """Create the tables if they are missing and migrate them to SCHEMA_VERSION; the version
    found (0: there were none, they are created now). StoreSchemaTooNew when a newer release
    made them. `connection` is a psycopg connection in autocommit mode."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        # Asked first: a user that may write the tables but not create any still gets in.
        exists = connection.execute("SELECT to_regclass('agent_store_schema')").fetchone()
        row = None
        if exists is not None and exists[0] is not None:
            row = connection.execute("SELECT version FROM agent_store_schema").fetchone()
        if row is None:
            connection.execute(_CREATE_VERSION_TABLE)
            for statement in _CREATE_TABLES:
                connection.execute(statement)
            connection.execute(
                "INSERT INTO agent_store_schema (version) VALUES (%s)", (SCHEMA_VERSION,)
            )
            return 0
        found = int(row[0])
        if found > SCHEMA_VERSION:
            raise StoreSchemaTooNew(
                f"the store's tables are of schema version {found}, newer than this worker's "
                f"{SCHEMA_VERSION}: run a release that knows it"
            )
        if found < SCHEMA_VERSION:
            for version in range(found, SCHEMA_VERSION):
                for statement in MIGRATIONS[version]:
                    connection.execute(statement)
            connection.execute("UPDATE agent_store_schema SET version = %s", (SCHEMA_VERSION,))
    return found


class PostgresDatabase:
    """One connection pool to the database at `url`, opened on first use; the schema is ensured
    once, by the first store that asks."""

    def __init__(self, url: str) -> None:
        self.url = url
        """The connection string each new connection of the pool opens with: a new password
        (`postgres_store` sets it) is taken up by the next connection, and the open ones stay
        logged in, as the server leaves them."""
        self.where = redacted(url)
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None

    def _conninfo(self) -> str:
        return self.url

    def pool(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                pool = ConnectionPool(
                    self._conninfo,
                    min_size=1,
                    max_size=POOL_SIZE,
                    kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_SECONDS},
                    timeout=30,
                    name="agent-store",
                    open=False,
                )
                pool.open()
                try:
                    with pool.connection() as connection:
                        ensure_schema(connection)
                except BaseException:
                    pool.close()
                    raise
                self._pool = pool
            return self._pool

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


class PostgresMessageStore:
    """The MessageStore in PostgreSQL, and with `blob_table="agent_results"` the result store's
    table: the same class, as the SQLite result store is the message store's class on its own
    file. The newest chains are kept in memory, as the SQLite store keeps them: content-addressed
    entries never go stale, whichever worker wrote them.

    `keys`: seal what is written; none: plaintext. `retention_hours`: how long an unused entry
    is kept. `clock`: the wall clock, in seconds (tests move it)."""

    shared = True
    """Every worker given the same URL reads what this one writes."""
    worker_local = False
    """(The result store's word for the same thing: a ref stays readable from any worker.)"""

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        keys: Sequence[PayloadKey] = (),
        retention_hours: float = DEFAULT_RETENTION_HOURS,
        clock: Callable[[], float] = time.time,
        blob_table: str = "agent_blobs",
    ) -> None:
        if not retention_hours > 0:
            raise ValueError(f"retention_hours must be above 0, not {retention_hours!r}")
        if blob_table not in BLOB_TABLES:
            raise ValueError(f"blob_table must be one of {BLOB_TABLES}, not {blob_table!r}")
        self.database = database
        self.blob_table = blob_table
        self.retention_seconds = retention_hours * 3600
        self._sealing = Sealing(keys, f"{database.where} ({blob_table})")
        self._clock = clock
        self._lock = threading.Lock()
        self._chains = RecentChains()
        """Head ref -> (the chain's messages, when its head's last use was last written)."""
        self._next_prune = 0.0

    # --- plumbing --------------------------------------------------------------------------------

    def _pool(self) -> ConnectionPool:
        pool = self.database.pool()
        self._maybe_prune(pool)
        return pool

    def _now(self) -> int:
        return int(self._clock())

    def _body(self, ref: str, text: str) -> tuple[bytes, bool]:
        sealed = self._sealing.seal(ref, text)
        return (text.encode(), False) if sealed is None else (sealed, True)

    def _maybe_prune(self, pool: ConnectionPool) -> None:
        with self._lock:
            if self._clock() < self._next_prune:
                return
            self._next_prune = self._clock() + PRUNE_EVERY_SECONDS
        self._prune(pool)

    def prune(self) -> tuple[int, int]:
        """Delete the entries unused for the retention period now; (links, blobs) deleted. Zeros
        when another worker is pruning the same database at this moment."""
        with self._lock:
            self._next_prune = self._clock() + PRUNE_EVERY_SECONDS
        return self._prune(self.database.pool())

    def _prune(self, pool: ConnectionPool) -> tuple[int, int]:
        cutoff = int(self._clock() - self.retention_seconds)
        with pool.connection() as connection, connection.transaction():
            row = connection.execute(
                "SELECT pg_try_advisory_xact_lock(%s)", (_PRUNE_LOCK,)
            ).fetchone()
            if not (row and row[0]):
                return 0, 0
            links = 0
            if self.blob_table == "agent_blobs":
                # A link is kept while any link after it is: a run that is still going writes
                # and reads the head of its chain, never again the links it builds on.
                links = connection.execute(
                    "WITH RECURSIVE kept(ref) AS ("
                    " SELECT ref FROM agent_links WHERE used >= %(cutoff)s"
                    " UNION SELECT l.parent FROM agent_links l JOIN kept k ON l.ref = k.ref"
                    " WHERE l.parent <> '')"
                    " DELETE FROM agent_links WHERE used < %(cutoff)s"
                    " AND ref NOT IN (SELECT ref FROM kept)",
                    {"cutoff": cutoff},
                ).rowcount
            blobs = connection.execute(
                f"DELETE FROM {self.blob_table} WHERE used < %s", (cutoff,)
            ).rowcount
        if links:
            with self._lock:
                self._chains.clear()
        return links, blobs

    def _touch(self, table: str, ref: str) -> None:
        with self.database.pool().connection() as connection:
            connection.execute(f"UPDATE {table} SET used = %s WHERE ref = %s", (self._now(), ref))

    # --- the MessageStore protocol ---------------------------------------------------------------

    def put_chain(self, links: list[tuple[str, str, str]]) -> None:
        if not links:
            return
        now = self._now()
        rows = sorted((ref, up, *self._body(ref, message), now) for ref, up, message in links)
        pool = self._pool()
        # The same ref is the same content: writing it again only refreshes its use (and seals
        # it with the newest key).
        with (
            pool.connection() as connection,
            connection.transaction(),
            connection.cursor() as cursor,
        ):
            cursor.executemany(
                "INSERT INTO agent_links (ref, parent, body, sealed, used)"
                " VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (ref) DO UPDATE SET body = excluded.body,"
                " sealed = excluded.sealed, used = excluded.used",
                rows,
            )
        with self._lock:
            parent = links[0][1]
            known = [] if parent == "" else self._chains.known(parent)
            if known is not None:
                chain = [*known, *(message for _, _, message in links)]
                self._chains.keep(links[-1][0], chain, self._clock())

    def get_chain(self, ref: str) -> list[str] | None:
        now = self._clock()
        with self._lock:
            kept = self._chains.get(ref)
            if kept is not None:
                chain, touched = kept
                if now - touched < TOUCH_EVERY_SECONDS:
                    return list(chain)
                self._chains.keep(ref, chain, now)
        if kept is not None:
            self._touch("agent_links", ref)
            return list(kept[0])
        with self._pool().connection() as connection:
            rows = connection.execute(
                "WITH RECURSIVE chain(ref, parent, body, sealed, used, depth) AS ("
                " SELECT ref, parent, body, sealed, used, 0 FROM agent_links WHERE ref = %s"
                " UNION ALL SELECT l.ref, l.parent, l.body, l.sealed, l.used, c.depth + 1"
                " FROM agent_links l JOIN chain c ON l.ref = c.parent)"
                " SELECT ref, parent, body, sealed, used FROM chain ORDER BY depth DESC",
                (ref,),
            ).fetchall()
        # Complete only if the walk reached the start of the chain (a link whose parent is "").
        if not rows or rows[0][1] != "":
            return None
        texts = [self._sealing.open(link, body, sealed) for link, _, body, sealed, _ in rows]
        if any(text is None for text in texts):
            return None
        chain = cast(list[str], texts)
        if rows[-1][4] < now - TOUCH_EVERY_SECONDS:
            self._touch("agent_links", ref)
        with self._lock:
            self._chains.keep(ref, chain, now)
        return list(chain)

    def put_blob(self, ref: str, text: str) -> None:
        body, sealed = self._body(ref, text)
        with self._pool().connection() as connection:
            connection.execute(
                f"INSERT INTO {self.blob_table} (ref, body, sealed, used)"
                " VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (ref) DO UPDATE SET body = excluded.body,"
                " sealed = excluded.sealed, used = excluded.used",
                (ref, body, sealed, self._now()),
            )

    def get_blob(self, ref: str) -> str | None:
        with self._pool().connection() as connection:
            row = connection.execute(
                f"SELECT body, sealed, used FROM {self.blob_table} WHERE ref = %s", (ref,)
            ).fetchone()
        if row is None:
            return None
        text = self._sealing.open(ref, row[0], row[1])
        if text is not None and row[2] < self._clock() - TOUCH_EVERY_SECONDS:
            self._touch(self.blob_table, ref)
        return text


_databases: dict[str, PostgresDatabase] = {}
"""One per database, keyed without the password: the stores read AGENT_STORE_PASSWORD_FILE at
each use, and a pool per password read would leave one open for every rotation."""
_stores: OrderedDict[tuple[str, ...], PostgresMessageStore] = OrderedDict()
_OPEN_STORES = 8
"""Stores kept at once (the keys and retention come from the environment, which tests change);
each database has one pool, whichever stores use it."""
_registry_lock = threading.Lock()


def postgres_store(url: str, blob_table: str = "agent_blobs") -> PostgresMessageStore:
    """The one store of `url` (its `blob_table`), sealing with the payload keys and pruning after
    the retention the environment configures. A malformed configuration is an
    AgentConfigurationError, which fails the run rather than being retried."""
    database_key = store_config.database_key(url)
    config = (database_key, blob_table, *configuration())
    with _registry_lock:
        database = _databases.get(database_key)
        if database is None:
            database = _databases[database_key] = PostgresDatabase(url)
        database.url = url
        store = _stores.get(config)
        if store is None:
            store = _stores[config] = PostgresMessageStore(
                database,
                keys=configured_keys(),
                retention_hours=retention_hours_from_env(),
                blob_table=blob_table,
            )
            while len(_stores) > _OPEN_STORES:
                _stores.popitem(last=False)
        _stores.move_to_end(config)
        return store


def close_all() -> None:
    """Close every pool (at exit, and in tests that stop their server)."""
    with _registry_lock:
        _stores.clear()
        databases = list(_databases.values())
        _databases.clear()
    for database in databases:
        database.close()


atexit.register(close_all)
