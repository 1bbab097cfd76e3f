"""A real PostgreSQL server for the tests: `initdb` in a temporary directory, `pg_ctl` on a free
port of 127.0.0.1 (its unix socket in that directory too), stopped and removed at the end.

The binaries are Debian's (`pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin);
.ci/run installs them when they are missing. initdb refuses to run as root, so under root the
server runs as `nobody`, which owns the directory. Anything that goes wrong raises, with the
server's log: a test that needs the server fails, it is never skipped.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_agent.serving.dev_server import free_port

SUPERUSER = "postgres"
UNPRIVILEGED = "nobody"
"""Who runs the server when the tests run as root."""


def bin_dir() -> Path:
    """Where initdb and pg_ctl are; RuntimeError when they are nowhere."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        done = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if done.returncode == 0:
            candidates.append(Path(done.stdout.strip()))
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
        reverse=True,
    )
    for candidate in candidates:
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    raise RuntimeError(
        "no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql "
        "(.ci/run does it)"
    )


@dataclass
class PostgresServer:
    host: str
    port: int
    password: str
    directory: Path

    def url(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        return f"postgresql://{user}:{self.password}@{self.host}:{self.port}/{database}"

    def log(self) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"

    @contextmanager
    def database(self) -> Iterator[str]:
        """A fresh database for one test; its URL. Dropped at the end, with whatever still holds
        a connection to it."""
        import psycopg

        name = f"test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield self.url(name)
        finally:
            with psycopg.connect(self.url(), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _as_server_user() -> dict[str, Any]:
    """subprocess options that run a command as the server's user: nobody under root."""
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(UNPRIVILEGED)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _run(command: list[str], server: PostgresServer, what: str) -> None:
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=server.directory,
        **_as_server_user(),
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"PostgreSQL {what} failed ({done.returncode}): {done.stdout}{done.stderr}\n"
            f"server log: {server.log()}"
        )


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A running server, and its superuser's password; stopped and removed at the end."""
    binaries = bin_dir()
    directory = Path(tempfile.mkdtemp(prefix="agent-pg-"))
    server = PostgresServer("127.0.0.1", free_port(), secrets.token_hex(16), directory)
    options = _as_server_user()
    if options:
        os.chown(directory, options["user"], options["group"])
    data = directory / "data"
    password_file = directory / "password"
    password_file.write_text(server.password + "\n")
    if options:
        os.chown(password_file, options["user"], options["group"])
    started = False
    try:
        _run(
            [
                str(binaries / "initdb"),
                "--pgdata",
                str(data),
                "--username",
                SUPERUSER,
                "--pwfile",
                str(password_file),
                "--auth",
                "scram-sha-256",
                "--encoding",
                "UTF8",
                "--no-instructions",
            ],
            server,
            "initdb",
        )
        settings = (
            f"-c listen_addresses={server.host} -p {server.port} -k {directory} "
            # A test server: losing it at a power cut loses nothing anyone needs.
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        _run(
            [
                str(binaries / "pg_ctl"),
                "--pgdata",
                str(data),
                "--log",
                str(directory / "server.log"),
                "--options",
                settings,
                "--wait",
                "--timeout",
                "60",
                "start",
            ],
            server,
            "start",
        )
        started = True
        yield server
    finally:
        if started:
            _run(
                [str(binaries / "pg_ctl"), "--pgdata", str(data), "--mode", "fast", "stop"],
                server,
                "stop",
            )
        shutil.rmtree(directory, ignore_errors=True)
