"""Whether the worker can write its stores, asked once when it starts.

With linear history the model activity writes the message store once a later call names what
an earlier one sent, a large tool result goes to the result store, and the demo tools write
their database. A file that cannot be written would fail those
activities after the model was paid or a tool had acted, and again on every retry. So the worker
asks first: it creates the file's directory, writes a scratch file beside it (where SQLite puts
its journal), and takes SQLite's write lock on the file itself with a write that is rolled back.
What it creates stays: an empty directory and an empty SQLite file, which the stores would
have created on first use anyway. (Removing them could pull a file from under another replica
that opened it meanwhile, on a shared volume.)

With `AGENT_STORE_URL` set, the message store and the result store are that PostgreSQL
database instead of files: the worker connects, creates the tables if they are missing (as the
stores would on first use), and writes a row to each inside a transaction it rolls back. A
database that cannot be reached, a user that may not write, or tables of a newer schema stop the
worker in one line. The demo database stays a file, and is checked as one.

This module reads the paths and the URL the stores read (the same variables and defaults)
without using the stores themselves, so it runs before anything is opened.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..encryption import payload_codec
from .pg_store import BLOB_TABLES, StoreSchemaTooNew, ensure_schema
from .sqlite_wal import owner_only
from .store_config import (
    STORE_URL_VARIABLE,
    redacted,
    scrubbed,
    store_url_from_env,
)

DB_PATH_ENV = "AGENT_DEMO_DB"
DEFAULT_DB_PATH = Path(".agent-demo") / "demo.db"
"""demo/tools.py's, not imported from it: importing it registers the demo's tools,
which a worker serves only when asked (tests/test_toolkits.py checks that they agree)."""
LOCK_WAIT_SECONDS = 10.0
"""How long to wait for another process's write lock (another replica on a shared volume)."""
CONNECT_TIMEOUT_SECONDS = 10
"""How long to wait for the PostgreSQL store to answer."""

STORES: tuple[tuple[str, str, Path], ...] = (
    ("the message store", "AGENT_MESSAGE_STORE", Path(".agent-data") / "messages.db"),
    ("the result store", "AGENT_RESULT_STORE", Path(".agent-data") / "results.db"),
    ("the demo database", DB_PATH_ENV, DEFAULT_DB_PATH),
)
"""(what it is, the variable that places it, its default under the working directory): the
defaults of activities/message_store.py, result_store.py and demo_tools.py."""


class StoreNotWritable(Exception):
    """A store's file cannot be written. The message is one line: what, where, and why."""


IN_THE_DATABASE = ("AGENT_MESSAGE_STORE", "AGENT_RESULT_STORE")
"""The stores that AGENT_STORE_URL moves into PostgreSQL."""


def store_paths(
    environ: Mapping[str, str] | None = None, *, demo: bool = True
) -> list[tuple[str, Path]]:
    """(what it is, absolute path) for each store kept in a file, as the stores would resolve
    them now: all three, or with AGENT_STORE_URL only the demo database; without the demo
    database unless `demo` (the worker serves the demo's tools)."""
    env = os.environ if environ is None else environ
    in_database = store_url_from_env(env) is not None
    return [
        (name, Path(env.get(variable) or Path.cwd() / default).absolute())
        for name, variable, default in STORES
        if not (in_database and variable in IN_THE_DATABASE) and (demo or variable != DB_PATH_ENV)
    ]


def check_stores(environ: Mapping[str, str] | None = None, *, demo: bool = True) -> None:
    """Raise StoreNotWritable for the first store that cannot be written. A malformed
    AGENT_STORE_URL is an AgentConfigurationError. `demo`: the worker serves the demo's tools,
    so their database is checked too; a worker that does not must not create it (in the
    working directory of a user's app, `.agent-demo/`)."""
    env = os.environ if environ is None else environ
    url = store_url_from_env(env)
    if url is not None:
        check_postgres(url)
    for name, path in store_paths(env, demo=demo):
        try:
            check_writable(path)
        except (OSError, sqlite3.Error) as error:
            raise StoreNotWritable(f"{name} {path} cannot be written: {_reason(error)}") from None


def check_writable(path: Path) -> None:
    """Create `path`'s directory, write beside the file, and take the file's write lock; raise
    OSError or sqlite3.Error when any of it fails."""
    owner_only(path)  # as the stores make it: nobody else may read what they will hold
    # SQLite writes its journal (or WAL) next to the file: the directory must take new files.
    with tempfile.TemporaryFile(dir=path.parent, prefix=".store-check-"):
        pass
    # A read-only file still opens, read-only; only a write shows it. BEGIN IMMEDIATE takes the
    # lock, the CREATE writes a page, and the rollback leaves the file as it was.
    connection = sqlite3.connect(path, timeout=LOCK_WAIT_SECONDS, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute("CREATE TABLE agent_store_check (x)")
        finally:
            connection.execute("ROLLBACK")
    finally:
        connection.close()


def check_postgres(url: str) -> None:
    """Connect to the store's database, create its tables if they are missing, and write a row
    to each in a transaction that is rolled back; StoreNotWritable (one line) when any of it
    fails."""
    import psycopg

    try:
        with psycopg.connect(
            url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
        ) as connection:
            ensure_schema(connection)
            with connection.transaction(force_rollback=True):
                connection.execute(
                    "INSERT INTO agent_links (ref, parent, body, sealed, used)"
                    " VALUES ('store-check', '', '', false, 0)"
                )
                for table in BLOB_TABLES:
                    connection.execute(
                        f"INSERT INTO {table} (ref, body, sealed, used)"
                        " VALUES ('store-check', '', false, 0)"
                    )
    except (psycopg.Error, StoreSchemaTooNew) as error:
        reason = error.message if isinstance(error, StoreSchemaTooNew) else one_line(error)
        raise StoreNotWritable(
            # libpq quotes back parts of the connection string it could not use.
            scrubbed(
                f"the store {redacted(url)} ({STORE_URL_VARIABLE}) cannot be used: {reason}", url
            )
        ) from None


def one_line(error: BaseException) -> str:
    """An error's message on one line: the server's own (without the statement it quotes), else
    libpq's, whose lines are joined."""
    diag = getattr(error, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if primary:
        return str(primary)
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or (
        type(error).__name__
    )


def _reason(error: OSError | sqlite3.Error) -> str:
    """`[Errno 13] Permission denied`, without the path the message already names."""
    if isinstance(error, OSError) and error.errno is not None and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    return str(error) or type(error).__name__


def describe_stores(environ: Mapping[str, str] | None = None, *, demo: bool = True) -> str:
    """Where the stores are and whether they are sealed, for the worker's start-up log line:
    without payload keys it says they are unencrypted. The URL without its password; the demo
    database only when the worker serves the demo's tools (`demo`)."""
    env = os.environ if environ is None else environ
    url = store_url_from_env(env)
    where = [] if url is None else [f"message store and result store in {redacted(url)}"]
    where += [f"{name.removeprefix('the ')} {path}" for name, path in store_paths(env, demo=demo)]
    keys = payload_codec.keys_from_env(env)
    if keys:
        sealed = f"the stores sealed with payload key {keys[0].id}" + (
            " (the demo database is not)" if demo else ""
        )
    else:
        sealed = (
            "unencrypted: what runs send and receive is kept in the clear, in files only their "
            f"owner may read ({payload_codec.KEYS_VARIABLE} seals the stores: docs/encryption.md)"
        )
    return f"{', '.join(where)}; {sealed}"
