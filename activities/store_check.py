"""Whether the worker can write its SQLite files, asked once when it starts.

With linear history the model activity writes the message store once a later call names what
an earlier one sent, a large tool result goes to the result store, and the demo tools write
their database. A file that cannot be written would fail those
activities after the model was paid or a tool had acted, and again on every retry. So the worker
asks first: it creates the file's directory, writes a scratch file beside it (where SQLite puts
its journal), and takes SQLite's write lock on the file itself with a write that is rolled back.
What it creates stays: an empty directory and an empty SQLite file, which the stores would
have created on first use anyway. (Removing them could pull a file from under another replica
that opened it meanwhile, on a shared volume.)

This module reads the paths the stores read (the same variables and defaults) without using the
stores themselves, so it runs before anything is opened.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path

from activities.demo_tools import DB_PATH_ENV, DEFAULT_DB_PATH

LOCK_WAIT_SECONDS = 10.0
"""How long to wait for another process's write lock (another replica on a shared volume)."""

STORES: tuple[tuple[str, str, Path], ...] = (
    ("the message store", "AGENT_MESSAGE_STORE", Path(".agent-data") / "messages.db"),
    ("the result store", "AGENT_RESULT_STORE", Path(".agent-data") / "results.db"),
    ("the demo database", DB_PATH_ENV, DEFAULT_DB_PATH),
)
"""(what it is, the variable that places it, its default under the working directory): the
defaults of activities/message_store.py, result_store.py and demo_tools.py."""


class StoreNotWritable(Exception):
    """A store's file cannot be written. The message is one line: what, where, and why."""


def store_paths(environ: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """(what it is, absolute path) for each store, as the stores would resolve them now."""
    env = os.environ if environ is None else environ
    return [
        (name, Path(env.get(variable) or Path.cwd() / default).absolute())
        for name, variable, default in STORES
    ]


def check_stores(environ: Mapping[str, str] | None = None) -> None:
    """Raise StoreNotWritable for the first store that cannot be written."""
    for name, path in store_paths(environ):
        try:
            check_writable(path)
        except (OSError, sqlite3.Error) as error:
            raise StoreNotWritable(f"{name} {path} cannot be written: {_reason(error)}") from None


def check_writable(path: Path) -> None:
    """Create `path`'s directory, write beside the file, and take the file's write lock; raise
    OSError or sqlite3.Error when any of it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
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


def _reason(error: OSError | sqlite3.Error) -> str:
    """`[Errno 13] Permission denied`, without the path the message already names."""
    if isinstance(error, OSError) and error.errno is not None and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    return str(error) or type(error).__name__
