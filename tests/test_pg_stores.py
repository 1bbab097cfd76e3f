"""The PostgreSQL stores against a real server (tests/postgres.py): what one worker writes another
reads, two writers of the same chain both succeed, the schema is made on first use with its
version, entries past the retention period go, and with the payload keys no table, data file or
WAL segment holds a conversation's text."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from durable_agent.activities import message_store, pg_store, result_store
from durable_agent.activities.pg_store import (
    SCHEMA_VERSION,
    PostgresDatabase,
    PostgresMessageStore,
    StoreSchemaTooNew,
)
from durable_agent.activities.result_store import PostgresResultStore, result_ref
from durable_agent.encryption.payload_codec import PayloadKey
from durable_agent.workflows.errors import AgentConfigurationError
from durable_agent.workflows.history import chain_refs
from durable_agent.workflows.transcript import Message, UserMessage
from tests.postgres import PostgresServer
from tests.test_message_store import (
    DAY,
    HOUR,
    KEY_A,
    KEY_B,
    Clock,
    conversation,
    links_of,
    pair,
)

TABLES = ("agent_links", "agent_blobs", "agent_results")


class Workers:
    """Stores as separate workers hold them: each its own pool, so its own connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.databases: list[PostgresDatabase] = []

    def store(self, keys: tuple[PayloadKey, ...] = (), **options: object) -> PostgresMessageStore:
        database = PostgresDatabase(self.url)
        self.databases.append(database)
        return PostgresMessageStore(database, keys=keys, **options)

    def close(self) -> None:
        for database in self.databases:
            database.close()


@pytest.fixture
def workers(store_url: str) -> Iterator[Workers]:
    opened = Workers(store_url)
    try:
        yield opened
    finally:
        opened.close()


def query(url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as connection:
        cursor = connection.execute(sql, args)
        return cursor.fetchall() if cursor.description is not None else []


def texts(messages: list[Message]) -> list[str]:
    return [m.model_dump_json() for m in messages]


# --- store and load ------------------------------------------------------------------------------


def test_what_one_worker_writes_another_reads(workers: Workers) -> None:
    one, other = workers.store(), workers.store()
    messages = conversation(3)
    one.put_chain(links_of(messages[:3]))
    one.put_chain(links_of(messages[3:], chain_refs(messages[:3])[-1]))
    one.put_blob("content-1", "a tool result")

    assert other.get_chain(chain_refs(messages)[-1]) == texts(messages)
    assert other.get_chain(chain_refs(messages[:3])[-1]) == texts(messages[:3])
    assert other.get_blob("content-1") == "a tool result"
    assert other.get_chain("no-such-ref") is None and other.get_blob("no-such-ref") is None
    # A chain with a link missing is a miss, not a shorter chain.
    query(workers.url, "DELETE FROM agent_links WHERE ref = %s", chain_refs(messages)[1])
    assert workers.store().get_chain(chain_refs(messages)[-1]) is None


def test_results_are_readable_from_any_worker_and_kept_apart_from_blobs(workers: Workers) -> None:
    one = PostgresResultStore.on(workers.store(blob_table="agent_results"))
    other = PostgresResultStore.on(workers.store(blob_table="agent_results"))
    ref = one.put("HEAD" + "x" * 10_000 + "TAIL")
    assert ref == result_ref("HEAD" + "x" * 10_000 + "TAIL")
    assert one.put("HEAD" + "x" * 10_000 + "TAIL") == ref, "a retried put is harmless"
    assert other.get(ref) == "HEAD" + "x" * 10_000 + "TAIL"
    assert workers.store().get_blob(ref) is None, "results live in their own table"
    assert query(workers.url, "SELECT count(*) FROM agent_results") == [(1,)]


def test_agent_store_url_chooses_the_postgresql_stores(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_STORE_URL", store_url)
    store = message_store.message_store()
    assert isinstance(store, PostgresMessageStore) and message_store.shared(store)
    assert message_store.message_store() is store
    results = result_store.result_store()
    assert isinstance(results, PostgresResultStore) and not result_store.worker_local(results)
    ref = results.put("kept for read_result")
    assert result_store.result_store().get(ref) == "kept for read_result"

    monkeypatch.setenv("AGENT_STORE_URL", "mysql://agent@db/agent")
    with pytest.raises(AgentConfigurationError, match=r"expected postgresql://user:password@"):
        message_store.message_store()
    monkeypatch.setenv("AGENT_STORE_URL", store_url.replace("postgresql:", "sqlite:"))
    with pytest.raises(AgentConfigurationError) as raised:
        result_store.result_store()
    password = store_url.split(":")[2].split("@")[0]
    assert password not in str(raised.value), "the password stays out of messages"


@pytest.fixture
def store_role(store_url: str, postgres: PostgresServer) -> Iterator[str]:
    """A login role of the test's own, which may make the store's tables in the test's database:
    its password can change without touching the superuser's, which the fixtures use."""
    role = f"agent_{uuid.uuid4().hex[:8]}"
    query(postgres.url(), f'CREATE ROLE "{role}" LOGIN')
    query(store_url, f'GRANT CREATE, USAGE ON SCHEMA public TO "{role}"')
    try:
        yield role
    finally:
        pg_store.close_all()
        query(store_url, f'DROP OWNED BY "{role}"')
        query(postgres.url(), f'DROP ROLE "{role}"')


def test_a_rotated_password_file_keeps_the_one_pool(
    store_url: str,
    store_role: str,
    postgres: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The stores read AGENT_STORE_PASSWORD_FILE at each use, so that a new password is taken
    up; each password used to open a pool of its own, whose connection stayed open for good."""
    database = store_url.rsplit("/", 1)[1]
    password_file = tmp_path / "store-password"
    monkeypatch.setenv(
        "AGENT_STORE_URL", f"postgresql://{store_role}@{postgres.host}:{postgres.port}/{database}"
    )
    monkeypatch.setenv("AGENT_STORE_PASSWORD_FILE", str(password_file))

    for rotation in range(4):
        password = f"rotation-{rotation}-{uuid.uuid4().hex}"
        query(postgres.url(), f"ALTER ROLE \"{store_role}\" PASSWORD '{password}'")
        password_file.write_text(password + "\n")
        message_store.message_store().put_blob(f"blob-{rotation}", "kept")
        ref = result_store.result_store().put(f"result {rotation}")
        assert result_store.result_store().get(ref) == f"result {rotation}"

    [(connections,)] = query(
        postgres.url(), "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", store_role
    )
    # One pool, both stores' and every password's: the connection it opens as it starts, and
    # perhaps one more that the schema check opened meanwhile.
    assert connections <= 2, f"{connections} connections: a pool per password"
    # The pool's next connection logs in with the newest password: the older ones no longer do.
    store = message_store.message_store()
    assert isinstance(store, PostgresMessageStore)
    store.database.pool().drain()
    assert store.get_blob("blob-0") == "kept"


# --- concurrent writers --------------------------------------------------------------------------


def test_two_workers_storing_the_same_chain_at_once_both_succeed(workers: Workers) -> None:
    """Each round, two workers (their own connections) store the same 300-link chain at the same
    moment, one in order and the other in reverse halves, as two workers do that resolve the
    same run's prefix after it moved; both writes succeed and the chain reads back whole."""
    writers = [workers.store(), workers.store()]
    rounds = 8
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    chains = [conversation(150, first=f"round {n} {uuid.uuid4()}") for n in range(rounds)]

    def write(store: PostgresMessageStore, reverse: bool) -> None:
        try:
            for messages in chains:
                links = links_of(messages)
                half = len(links) // 2
                parts = [links[:half], links[half:]]
                barrier.wait(timeout=60)
                for part in reversed(parts) if reverse else parts:
                    store.put_chain(part)
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [
        threading.Thread(target=write, args=(store, n == 1)) for n, store in enumerate(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    reader = workers.store()
    for messages in chains:
        assert reader.get_chain(chain_refs(messages)[-1]) == texts(messages)
    assert query(workers.url, "SELECT count(*) FROM agent_links") == [(rounds * 301,)]


# --- the schema ----------------------------------------------------------------------------------


def test_the_schema_is_made_on_first_use_with_its_version(workers: Workers) -> None:
    def tables() -> set[str]:
        rows = query(
            workers.url,
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
        )
        return {str(name) for (name,) in rows}

    assert tables() == set(), "a fresh database"
    workers.store().put_blob("content-1", "first use")
    assert tables() == {"agent_store_schema", *TABLES}
    assert query(workers.url, "SELECT version FROM agent_store_schema") == [(SCHEMA_VERSION,)]
    # Opening it again (another worker) keeps the one row, and the data.
    assert workers.store().get_blob("content-1") == "first use"
    assert query(workers.url, "SELECT count(*) FROM agent_store_schema") == [(1,)]


def test_tables_of_a_newer_schema_stop_the_store(workers: Workers) -> None:
    workers.store().put_blob("content-1", "written by this release")
    query(workers.url, "UPDATE agent_store_schema SET version = %s", SCHEMA_VERSION + 1)
    with pytest.raises(StoreSchemaTooNew, match=rf"schema version {SCHEMA_VERSION + 1}, newer"):
        workers.store().get_blob("content-1")


def test_workers_that_start_together_make_the_schema_once(workers: Workers) -> None:
    stores = [workers.store() for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def first_use(store: PostgresMessageStore) -> None:
        try:
            barrier.wait(timeout=60)
            store.put_blob(f"content-{id(store)}", "first")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=first_use, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert query(workers.url, "SELECT count(*) FROM agent_blobs") == [(len(stores),)]


# --- retention -----------------------------------------------------------------------------------


def test_entries_unused_for_the_retention_period_are_swept(workers: Workers) -> None:
    clock = Clock()
    store = workers.store(retention_hours=48, clock=clock)
    results = workers.store(retention_hours=48, clock=clock, blob_table="agent_results")
    start, longer, idle = conversation(1), conversation(3), conversation(2, first="idle run")
    store.put_chain(links_of(start))
    store.put_chain(links_of(idle))
    store.put_blob("content-old", "old")
    results.put_blob("r-old", "an old result")
    clock.now += 40 * HOUR
    # The first run goes on: its newest links are 40 hours younger than the ones they build on.
    store.put_chain(links_of(longer[len(start) :], chain_refs(start)[-1]))
    results.put_blob("r-new", "a new result")
    clock.now += 40 * HOUR

    assert store.prune() == (len(idle), 1), "the idle run and the old blob go; the going run stays"
    assert results.prune() == (0, 1)
    reader = workers.store(clock=clock)
    assert reader.get_chain(chain_refs(longer)[-1]) == texts(longer)
    assert reader.get_chain(chain_refs(idle)[-1]) is None
    assert results.get_blob("r-new") == "a new result" and results.get_blob("r-old") is None
    clock.now += 49 * HOUR  # the going run's chain was last read 49 hours ago
    assert store.prune() == (len(longer), 0)


def test_a_store_sweeps_when_it_opens_and_then_at_most_hourly(workers: Workers) -> None:
    clock = Clock()
    workers.store(clock=clock).put_blob("old", "past its retention")
    query(workers.url, "UPDATE agent_blobs SET used = %s", int(clock.now - 8 * DAY))

    def refs() -> list[str]:
        return [str(r) for (r,) in query(workers.url, "SELECT ref FROM agent_blobs ORDER BY ref")]

    store = workers.store(clock=clock)  # the default retention, 7 days
    store.put_blob("new-1", "opens, and sweeps")
    assert refs() == ["new-1"]
    query(workers.url, "UPDATE agent_blobs SET used = %s", int(clock.now - 8 * DAY))
    clock.now += HOUR / 2
    store.put_blob("new-2", "within the hour")
    assert refs() == ["new-1", "new-2"]
    clock.now += HOUR
    store.put_blob("new-3", "an hour later")
    assert refs() == ["new-2", "new-3"], "new-1 was 8 days old"


def test_the_retention_setting_and_its_older_name(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENT_STORE_RETENTION", "AGENT_STORE_RETENTION_HOURS"):
        monkeypatch.delenv(name, raising=False)
    assert message_store.retention_hours_from_env() == 7 * 24
    for text, hours in (("7d", 168), ("36h", 36), ("90m", 1.5), ("1800s", 0.5), ("2.5D", 60)):
        monkeypatch.setenv("AGENT_STORE_RETENTION", text)
        assert message_store.retention_hours_from_env() == hours, text
    for bad in ("7", "soon", "0d", "-3h", "1w"):
        monkeypatch.setenv("AGENT_STORE_RETENTION", bad)
        with pytest.raises(AgentConfigurationError, match=r"a duration above 0 with its unit"):
            message_store.retention_hours_from_env()
    monkeypatch.delenv("AGENT_STORE_RETENTION")
    monkeypatch.setenv("AGENT_STORE_RETENTION_HOURS", "12")
    assert message_store.retention_hours_from_env() == 12
    monkeypatch.setenv("AGENT_STORE_RETENTION", "1d")
    with pytest.raises(AgentConfigurationError, match="are both set"):
        message_store.retention_hours_from_env()


# --- encryption at rest --------------------------------------------------------------------------


def data_files(postgres: PostgresServer) -> bytes:
    """Every file the server keeps: the tables of every database, and the WAL."""
    data = postgres.directory / "data"
    return b"".join(
        path.read_bytes()
        for folder in (data / "base", data / "pg_wal")
        for path in folder.rglob("*")
        if path.is_file()
    )


BLOB_REF = "content-3f2a9c"
"""References are hashes of the content: they name no text."""


def write_a_conversation(store: PostgresMessageStore, secret: str) -> list[Message]:
    messages = [*conversation(2, first=f"my code word is {secret}"), UserMessage(content=secret)]
    store.put_chain(links_of(messages))
    store.put_blob(BLOB_REF, f"the tool says {secret}")
    return messages


def test_with_keys_no_table_and_no_file_holds_the_text(
    workers: Workers, postgres: PostgresServer
) -> None:
    secret = f"QUOKKA-{uuid.uuid4().hex}"
    store = workers.store(keys=(KEY_A,))
    results = workers.store(keys=(KEY_A,), blob_table="agent_results")
    messages = write_a_conversation(store, secret)
    ref = PostgresResultStore.on(results).put(f"a large result naming {secret}")
    query(workers.url, "CHECKPOINT")

    for table in TABLES:
        for body, sealed in query(workers.url, f"SELECT body, sealed FROM {table}"):
            assert sealed is True and secret.encode() not in bytes(body), table
    assert secret.encode() not in data_files(postgres)

    # Another worker with the keys reads it all back; one with other keys misses.
    assert workers.store(keys=(KEY_B, KEY_A)).get_chain(chain_refs(messages)[-1]) == texts(messages)
    reader = PostgresResultStore.on(workers.store(keys=(KEY_A,), blob_table="agent_results"))
    assert reader.get(ref) == f"a large result naming {secret}"
    assert workers.store(keys=(KEY_B,)).get_chain(chain_refs(messages)[-1]) is None
    assert workers.store().get_blob(BLOB_REF) is None


def test_without_keys_the_same_scan_finds_the_text(
    workers: Workers, postgres: PostgresServer
) -> None:
    """The control of the test above: its scans would find the text if it were there."""
    secret = f"QUOKKA-{uuid.uuid4().hex}"
    write_a_conversation(workers.store(), secret)
    query(workers.url, "CHECKPOINT")
    bodies = b"".join(bytes(b) for (b,) in query(workers.url, "SELECT body FROM agent_links"))
    assert secret.encode() in bodies
    assert secret.encode() in data_files(postgres)


def test_keys_from_the_environment_seal_the_shared_stores(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_STORE_URL", store_url)
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", pair(KEY_A))
    secret = f"WOMBAT-{uuid.uuid4().hex}"
    message_store.message_store().put_blob("content-env", secret)
    result_store.result_store().put(secret)
    for table in ("agent_blobs", "agent_results"):
        [(body, sealed)] = query(store_url, f"SELECT body, sealed FROM {table}")
        assert sealed is True and secret.encode() not in bytes(body)
    assert pg_store.postgres_store(store_url).get_blob("content-env") == secret


def test_the_fixture_server_runs_as_a_user_that_is_not_root(postgres: PostgresServer) -> None:
    """initdb refuses root; the data directory is the server user's own."""
    owner = (postgres.directory / "data").stat().st_uid
    assert Path(postgres.directory / "data" / "PG_VERSION").exists()
    assert owner != 0


def test_the_command_line_s_embedded_worker_uses_the_store_url(
    store_url: str, tmp_path: Path
) -> None:
    """`starter.py PROMPT` as a user runs it, with AGENT_STORE_URL: the demo's answer, its
    stores in the database, and no store file in the working directory."""
    root = Path(__file__).resolve().parent.parent
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENT_", "OPENAI_", "ANTHROPIC_", "TEMPORAL_"))
    }
    env.update(AGENT_STORE_URL=store_url, AGENT_DEMO_DB=str(tmp_path / "demo.db"))
    done = subprocess.run(
        [
            sys.executable,
            str(root / "starter.py"),
            "Where is my latest order? My email is a@b.com.",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "#1042" in done.stdout
    assert not (tmp_path / ".agent-data").exists()
    [(links,)] = query(store_url, "SELECT count(*) FROM agent_links")
    assert isinstance(links, int) and links > 0
