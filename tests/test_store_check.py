"""A worker that cannot write its stores stops at start, in one line, before it serves anything:
never after a model call was paid for. Run as the users meet it: `python worker.py` in a child
process, as an unprivileged user where permissions are the point."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import durable_agent.activities.store_check as store_check
from durable_agent.activities.store_check import (
    StoreNotWritable,
    check_stores,
    check_writable,
    store_paths,
)
from tests.postgres import PostgresServer

ROOT = Path(__file__).resolve().parent.parent
UNPRIVILEGED = 10001
"""The image's `agent` user (Dockerfile)."""
UNREACHABLE = "127.0.0.1:1"
"""Nothing listens there: a worker that got past the check would fail to connect (status 1)."""


def store_env(tmp: Path, **overrides: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"AGENT_PAYLOAD_KEYS", "AGENT_PAYLOAD_KEYS_FILE", "TEMPORAL_ADDRESS"}
    }
    env.update(
        AGENT_MESSAGE_STORE=str(tmp / "messages.db"),
        AGENT_RESULT_STORE=str(tmp / "results.db"),
        AGENT_DEMO_DB=str(tmp / "demo.db"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(overrides)
    return env


def run_worker(
    env: dict[str, str], *, as_unprivileged: bool = False
) -> subprocess.CompletedProcess[str]:
    """`python worker.py --address <nothing>`; as uid 10001 when asked and running as root.

    This interpreter may live where uid 10001 cannot read (a pyenv under /root), so the child
    starts as root, imports the worker, and only then drops to uid 10001 and runs its main."""
    if as_unprivileged and os.geteuid() == 0:
        code = (
            "import os, sys\nfrom durable_agent.cli import worker\n"
            f"os.setgroups([]); os.setgid({UNPRIVILEGED}); os.setuid({UNPRIVILEGED})\n"
            f"sys.exit(worker.main(['--address', {UNREACHABLE!r}]))\n"
        )
        command = [sys.executable, "-c", code]
    else:
        command = [sys.executable, str(ROOT / "worker.py"), "--address", UNREACHABLE]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def assert_one_line_error(done: subprocess.CompletedProcess[str], line: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr == f"worker.py: error: {line}\n"


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory uid 10001 can enter (pytest's tmp_path sits under a root-only directory)."""
    made = Path(tempfile.mkdtemp(prefix="store-check-"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        for path in sorted(made.rglob("*"), reverse=True):
            path.chmod(0o700)
        subprocess.run(["rm", "-rf", str(made)], check=True)


# --- the worker command --------------------------------------------------------------------------


def test_a_store_under_a_file_stops_the_worker_in_one_line(tmp_path: Path) -> None:
    """mkdir under a regular file fails for every user, root included."""
    env = store_env(tmp_path, AGENT_MESSAGE_STORE="/dev/null/x/messages.db")
    assert_one_line_error(
        run_worker(env),
        "the message store /dev/null/x/messages.db cannot be written: [Errno 20] Not a directory",
    )


def test_a_bad_retention_stops_the_worker_in_one_line(tmp_path: Path) -> None:
    """A store retention that is not a number of hours fails at start, not at a run's first
    store use."""
    env = store_env(tmp_path, AGENT_STORE_RETENTION_HOURS="a week")
    assert_one_line_error(
        run_worker(env),
        "AGENT_STORE_RETENTION_HOURS='a week': expected a number of hours above 0 (default "
        "168); or set AGENT_STORE_RETENTION=7d",
    )
    env = store_env(tmp_path, AGENT_STORE_RETENTION="a week")
    assert_one_line_error(
        run_worker(env),
        "AGENT_STORE_RETENTION='a week': expected a duration above 0 with its unit, such as "
        "7d, 36h, 90m or 600s (default 7d)",
    )


@pytest.mark.parametrize("where", ["ro/messages.db", "ro/new/messages.db"])
def test_a_read_only_directory_stops_the_worker_in_one_line(shared_tmp: Path, where: str) -> None:
    """The reproduction of the issue: uid 10001 in a directory it does not own (the image's
    root-owned /app), whether the store's directory exists or has to be made."""
    read_only = shared_tmp / "ro"
    read_only.mkdir(mode=0o500)
    read_only.chmod(0o555 if os.geteuid() == 0 else 0o500)  # root-owned, or this user's
    store = shared_tmp / where
    env = store_env(shared_tmp, AGENT_MESSAGE_STORE=str(store))
    assert_one_line_error(
        run_worker(env, as_unprivileged=True),
        f"the message store {store} cannot be written: [Errno 13] Permission denied",
    )
    assert list(read_only.iterdir()) == []


def test_a_read_only_store_file_stops_the_worker_in_one_line(shared_tmp: Path) -> None:
    """The directory takes files, the file does not: SQLite opens it read-only without a word,
    and only the write the check makes shows it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to own a file that uid 10001 reads but cannot write")
    shared_tmp.chmod(0o777)
    store = shared_tmp / "results.db"
    sqlite3.connect(store).close()
    store.chmod(0o444)
    env = store_env(shared_tmp, AGENT_RESULT_STORE=str(store))
    assert_one_line_error(
        run_worker(env, as_unprivileged=True),
        f"the result store {store} cannot be written: attempt to write a readonly database",
    )


def test_a_file_that_is_not_a_database_stops_the_worker(tmp_path: Path) -> None:
    (tmp_path / "demo.db").write_bytes(b"not a database, and longer than a header " * 4)
    assert_one_line_error(
        run_worker(store_env(tmp_path)),
        f"the demo database {tmp_path / 'demo.db'} cannot be written: file is not a database",
    )


def test_writable_stores_let_the_worker_go_on_to_connect(tmp_path: Path) -> None:
    """Past the check, the unreachable server is the error (status 1), and each store's file
    exists, empty, for the stores to fill."""
    done = run_worker(store_env(tmp_path / "deeper" / "still"))
    assert done.returncode == 1, done.stderr
    assert "cannot be written" not in done.stderr
    for name in ("messages.db", "results.db", "demo.db"):
        assert (tmp_path / "deeper" / "still" / name).is_file()


def test_the_embedded_worker_stops_before_the_run_starts(tmp_path: Path) -> None:
    """`python starter.py PROMPT` builds its worker on an embedded server: the same check stops
    it before the dev server starts, in one line, with exit status 2."""
    env = store_env(tmp_path, AGENT_MESSAGE_STORE="/dev/null/x/messages.db")
    done = subprocess.run(
        [sys.executable, str(ROOT / "starter.py"), "Where is my latest order?"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if not line.startswith("scripted model")]
    assert lines == [
        "starter.py: error: the message store /dev/null/x/messages.db cannot be written: "
        + lines[0].rsplit(": ", 1)[-1]
    ], done.stderr
    assert "Traceback" not in done.stderr


# --- the PostgreSQL store -----------------------------------------------------------------------


def test_an_unreachable_postgresql_store_stops_the_worker_in_one_line(tmp_path: Path) -> None:
    url = "postgresql://agent:s3cret-word@127.0.0.1:1/agent"
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=url))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(
        "worker.py: error: the store postgresql://agent:***@127.0.0.1:1/agent (AGENT_STORE_URL) "
        "cannot be used: connection failed: "
    ), line
    assert "Connection refused" in line and "s3cret-word" not in done.stderr


def test_a_store_url_that_is_not_postgresql_stops_the_worker_in_one_line(tmp_path: Path) -> None:
    assert_one_line_error(
        run_worker(store_env(tmp_path, AGENT_STORE_URL="sqlite:///data/messages.db")),
        "AGENT_STORE_URL='sqlite:///data/messages.db': it is not a PostgreSQL URL; expected "
        "postgresql://user:password@host:port/database, with a space or @ : / ? # % in the user "
        "or password percent-encoded (%20, %40...), or key=value pairs (host=... user=... "
        "password='two words' dbname=...) (unset: SQLite files on the worker)",
    )


def test_a_postgresql_user_that_may_not_write_stops_the_worker(
    tmp_path: Path, store_url: str, postgres: PostgresServer
) -> None:
    check_stores({"AGENT_STORE_URL": store_url, "AGENT_DEMO_DB": str(tmp_path / "demo.db")})
    role = f"reader_{uuid.uuid4().hex[:8]}"
    database = store_url.rsplit("/", 1)[1]
    with psycopg.connect(store_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'reads-only'")
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    reader = postgres.url(database, user=role).replace(postgres.password, "reads-only")
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=reader))
    assert_one_line_error(
        done,
        f"the store {reader.replace('reads-only', '***')} (AGENT_STORE_URL) cannot be used: "
        "permission denied for table agent_links",
    )


def test_tables_of_a_newer_schema_stop_the_worker_in_one_line(
    tmp_path: Path, store_url: str
) -> None:
    check_stores({"AGENT_STORE_URL": store_url, "AGENT_DEMO_DB": str(tmp_path / "demo.db")})
    with psycopg.connect(store_url, autocommit=True) as admin:
        admin.execute("UPDATE agent_store_schema SET version = 99")
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=store_url))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.rstrip().endswith(
        "cannot be used: the store's tables are of schema version 99, newer than this worker's "
        "1: run a release that knows it"
    )


def test_a_writable_postgresql_store_lets_the_worker_go_on_to_connect(
    tmp_path: Path, store_url: str
) -> None:
    """Past the check the unreachable Temporal server is the error (status 1); the tables are
    made, hold nothing the check wrote, and no store file is made beside the demo database."""
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=store_url))
    assert done.returncode == 1, done.stderr
    assert "cannot be used" not in done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["demo.db"]
    with psycopg.connect(store_url) as connection:
        for table in ("agent_links", "agent_blobs", "agent_results"):
            assert connection.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
    assert store_paths({"AGENT_STORE_URL": store_url, "AGENT_DEMO_DB": "d.db"}) == [
        ("the demo database", Path("d.db").absolute())
    ]


# --- the check itself ----------------------------------------------------------------------------


def test_the_paths_are_the_stores_defaults_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert store_paths({}) == [
        ("the message store", tmp_path / ".agent-data" / "messages.db"),
        ("the result store", tmp_path / ".agent-data" / "results.db"),
        ("the demo database", tmp_path / ".agent-demo" / "demo.db"),
    ]
    empty_means_unset = {"AGENT_MESSAGE_STORE": "", "AGENT_RESULT_STORE": "r.db"}
    assert [path for _, path in store_paths(empty_means_unset)][:2] == [
        tmp_path / ".agent-data" / "messages.db",
        tmp_path / "r.db",
    ]


def test_the_check_leaves_a_store_as_it_was(tmp_path: Path) -> None:
    store = tmp_path / "messages.db"
    with sqlite3.connect(store) as connection:
        connection.execute("CREATE TABLE links (ref TEXT)")
        connection.execute("INSERT INTO links VALUES ('kept')")
    connection.close()
    check_writable(store)
    with sqlite3.connect(store) as connection:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master")]
        rows = connection.execute("SELECT ref FROM links").fetchall()
    connection.close()
    assert tables == ["links"] and rows == [("kept",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["messages.db"]  # no scratch left


def test_a_store_locked_by_another_process_past_the_wait_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "results.db"
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    monkeypatch.setattr(store_check, "LOCK_WAIT_SECONDS", 0.05)
    try:
        with pytest.raises(StoreNotWritable) as raised:
            check_stores(
                {
                    "AGENT_MESSAGE_STORE": str(tmp_path / "m.db"),
                    "AGENT_RESULT_STORE": str(store),
                    "AGENT_DEMO_DB": str(tmp_path / "d.db"),
                }
            )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(raised.value) == f"the result store {store} cannot be written: database is locked"


# --- the store's password is shown nowhere ------------------------------------------------------

SECRET = "wrong s3cret"
"""A wrong password with a space: libpq quotes back what it cannot read."""


def assert_secret_not_shown(text: str) -> None:
    for form in (SECRET, "s3cret", "wrong%20s3cret"):
        assert form not in text, text


def key_value(postgres: PostgresServer, database: str, password: str) -> str:
    return (
        f"host={postgres.host} port={postgres.port} user=postgres password={password} "
        f"dbname={database}"
    )


def test_a_password_in_the_query_is_not_shown(
    tmp_path: Path, store_url: str, postgres: PostgresServer
) -> None:
    database = store_url.rsplit("/", 1)[1]
    url = (
        f"postgresql://postgres@{postgres.host}:{postgres.port}/{database}?password=wrong%20s3cret"
    )
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=url))
    assert_secret_not_shown(done.stderr)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"worker.py: error: the store {url.replace('wrong%20s3cret', '***')} (AGENT_STORE_URL) "
        "cannot be used: connection failed: "
    ), line
    assert line.endswith('password authentication failed for user "postgres"'), line


def test_a_password_with_a_space_is_not_quoted_back(
    tmp_path: Path, store_url: str, postgres: PostgresServer
) -> None:
    """Unencoded, libpq cannot read the URL and quotes the password in its message."""
    database = store_url.rsplit("/", 1)[1]
    url = f"postgresql://postgres:{SECRET}@{postgres.host}:{postgres.port}/{database}"
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=url))
    assert_secret_not_shown(done.stderr)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "percent-encoded (%20" in done.stderr
    assert f"postgresql://postgres:***@{postgres.host}" in done.stderr


def test_a_key_value_string_is_used_and_its_password_not_shown(
    tmp_path: Path, store_url: str, postgres: PostgresServer
) -> None:
    """libpq's key=value form works as the URL does; a wrong password in it (quoted, with its
    space) fails the check in one line that holds none of it."""
    database = store_url.rsplit("/", 1)[1]
    right = key_value(postgres, database, postgres.password)
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=right))
    assert done.returncode == 1, done.stderr  # past the check: Temporal is not there
    assert postgres.password not in done.stderr

    wrong = key_value(postgres, database, f"'{SECRET}'")
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=wrong))
    assert_secret_not_shown(done.stderr)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("worker.py: error: the store "), line
    assert f"password=*** dbname={database}" in line, line
    assert line.endswith('password authentication failed for user "postgres"'), line


def test_a_key_value_string_libpq_cannot_read_is_not_shown(tmp_path: Path) -> None:
    """Unquoted, the space ends the password: libpq's message quotes what follows it."""
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=f"host=127.0.0.1 password={SECRET}"))
    assert_secret_not_shown(done.stderr)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "password='two words'" in done.stderr


# --- the start-up line ---------------------------------------------------------------------------


def stores_line(stderr: str) -> str:
    [line] = [line for line in stderr.splitlines() if " stores: " in line]
    return line.split(" stores: ", 1)[1]


def test_the_start_up_line_says_the_stores_are_unencrypted_without_keys(tmp_path: Path) -> None:
    done = run_worker(store_env(tmp_path))
    assert done.returncode == 1, done.stderr
    assert stores_line(done.stderr) == (
        f"message store {tmp_path / 'messages.db'}, result store {tmp_path / 'results.db'}, "
        f"demo database {tmp_path / 'demo.db'}; unencrypted: what runs send and receive is "
        "kept in the clear, in files only their owner may read (AGENT_PAYLOAD_KEYS seals the "
        "stores: docs/encryption.md)"
    )


def test_the_start_up_line_names_the_key_and_the_database_without_its_password(
    tmp_path: Path, store_url: str
) -> None:
    key = "k1=" + "A" * 43 + "="
    done = run_worker(store_env(tmp_path, AGENT_STORE_URL=store_url, AGENT_PAYLOAD_KEYS=key))
    assert done.returncode == 1, done.stderr
    password = store_url.split(":")[2].split("@")[0]
    assert password not in done.stderr
    assert stores_line(done.stderr) == (
        f"message store and result store in {store_url.replace(password, '***')}, demo "
        f"database {tmp_path / 'demo.db'}; the stores sealed with payload key k1 (the demo "
        "database is not)"
    )


def test_the_password_can_come_from_a_file(
    tmp_path: Path, store_url: str, postgres: PostgresServer
) -> None:
    """As docker-compose.yml gives it: the URL without a password, the password in a file."""
    bare = store_url.replace(f":{postgres.password}@", "@")
    secret = tmp_path / "agent-db-password"
    secret.write_text(postgres.password + "\n")
    env = store_env(tmp_path, AGENT_STORE_URL=bare, AGENT_STORE_PASSWORD_FILE=str(secret))
    done = run_worker(env)
    assert done.returncode == 1, done.stderr  # past the check: Temporal is not there
    assert postgres.password not in done.stderr
    assert "password=***" in stores_line(done.stderr)

    assert_one_line_error(
        run_worker({**env, "AGENT_STORE_PASSWORD_FILE": str(tmp_path / "missing")}),
        f"AGENT_STORE_PASSWORD_FILE: cannot read {tmp_path / 'missing'}: No such file or directory",
    )
    assert_one_line_error(
        run_worker({**env, "AGENT_STORE_URL": store_url}),
        "AGENT_STORE_URL holds a password and AGENT_STORE_PASSWORD_FILE is set: keep one of them",
    )


def test_the_command_line_shows_no_password_of_the_store(
    tmp_path: Path, store_url: str, postgres: PostgresServer
) -> None:
    """`python starter.py PROMPT` checks the store before its embedded server starts: a wrong
    password in the query stops it in one line that holds none of it."""
    database = store_url.rsplit("/", 1)[1]
    url = (
        f"postgresql://postgres@{postgres.host}:{postgres.port}/{database}?password=wrong%20s3cret"
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / "starter.py"), "Where is my latest order?"],
        cwd=tmp_path,
        env=store_env(tmp_path, AGENT_STORE_URL=url),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 2, done.stderr
    assert_secret_not_shown(done.stderr)
    assert "starter.py: error: the store postgresql://postgres@" in done.stderr
    assert "?password=*** (AGENT_STORE_URL) cannot be used" in done.stderr


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw-1@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        (
            "postgresql://u@h/db?sslmode=require&password=pw-1&SSLPASSWORD=pw-2",
            "postgresql://u@h/db?sslmode=require&password=***&SSLPASSWORD=***",
        ),
        ("host=h user=u password='pw 1' dbname=db", "host=h user=u password=*** dbname=db"),
        ("host=h sslpassword=pw-2 password = pw-1", "host=h sslpassword=*** password = ***"),
        ("host=h password=pw 1", "(the connection string, hidden: it cannot be read)"),
    ],
)
def test_redacted_masks_every_secret_of_either_form(url: str, shown: str) -> None:
    from durable_agent.activities.store_config import redacted, scrubbed

    assert redacted(url) == shown
    said = f"libpq said pw-1, pw-2, pw 1 and pw%201 of {url}"
    for secret in ("pw-1", "pw-2", "pw 1"):
        if secret in url:
            assert secret not in scrubbed(said, url)


@pytest.mark.parametrize("password", ["a/b", "a?b", "a#b", "a@b"])
def test_a_url_whose_password_needs_encoding_is_refused_unshown(password: str) -> None:
    from durable_agent.activities.store_config import store_url_from_env
    from durable_agent.workflows.errors import AgentConfigurationError

    url = f"postgresql://agent:zz{password}yy@db.internal:5432/agent"
    with pytest.raises(AgentConfigurationError) as refused:
        store_url_from_env({"AGENT_STORE_URL": url})
    message = str(refused.value)
    assert "postgresql://agent:***@db.internal:5432/agent" in message, message
    assert "zz" not in message and "yy" not in message, message
