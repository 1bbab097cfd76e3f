"""The worker-local stores in real runs: a run that needs neither store writes nothing; with the
payload keys set, neither file holds a run's text, and only a process with those keys reads them
back; a run idle past the retention period misses, resends once and completes; a result stored on
another worker is not promised, and read_result says why it is missing."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.activities import message_store, result_store
from durable_agent.activities.message_store import SqliteMessageStore
from durable_agent.client.agent_client import AgentRun
from durable_agent.encryption.payload_codec import PayloadKey
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import ToolApprovalPolicy
from tests.helpers import TEST_WORKER_OPTIONS, call, run_agent, scripted_input, turn

ROOT = Path(__file__).resolve().parent.parent
KEY_A = PayloadKey("key-a", bytes(range(32)))
KEY_B = PayloadKey("key-b", bytes(range(100, 132)))
PROMPT = "Where is my parcel? The code word is QUOKKA-7731."
ARGUMENT = "WOMBAT-ARGUMENT-5150"
ANSWER = "PANGOLIN-ANSWER"
BIG = "HEAD" + "x" * 5000 + "TAIL"
"""What big_text(size=5000) returns."""
FILLER = b"x" * 64
"""A run of big_text's filler: the externalised result, as the result store keeps it."""


def pair(key: PayloadKey) -> str:
    return f"{key.id}={base64.b64encode(key.key).decode()}"


def stores() -> tuple[Path, Path]:
    """The two files, where tests/conftest.py points this test's worker."""
    return Path(os.environ["AGENT_MESSAGE_STORE"]), Path(os.environ["AGENT_RESULT_STORE"])


def a_run_that_uses_both_stores(**options: Any) -> Any:
    script = [
        turn(call("read_thing", label=ARGUMENT)),
        turn(call("big_text", size=5000)),
        turn(call("blob", size=2000)),  # a result long enough to go by reference
        turn(text=ANSWER),
    ]
    return scripted_input(
        script, prompt=PROMPT, tools=["read_thing", "big_text", "blob"], **options
    )


def tables(path: Path) -> list[str]:
    """The tables in the file, [] when there is no file."""
    if not path.exists():
        return []
    with sqlite3.connect(path) as connection:
        return [name for (name,) in connection.execute("SELECT name FROM sqlite_master")]


def rows(path: Path, table: str) -> int:
    with sqlite3.connect(path) as connection:
        return int(connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def bytes_on_disk(path: Path) -> bytes:
    """The file and any journal SQLite left beside it."""
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


async def test_a_run_that_needs_no_store_writes_no_file(client: Client, task_queue: str) -> None:
    messages, results = stores()
    run = await run_agent(
        client,
        task_queue,
        a_run_that_uses_both_stores(linear_history=False, externalise_results=False),
    )
    assert run.result is not None and run.result.answer == ANSWER
    # The worker's start-up check (activities/store_check.py) may leave an empty file; the stores
    # themselves never opened one (opening creates their tables).
    assert tables(messages) == tables(results) == []

    # The control: the same run with both on writes both files, at the paths checked above.
    run = await run_agent(client, task_queue, a_run_that_uses_both_stores())
    assert run.result is not None and run.result.answer == ANSWER
    assert rows(messages, "links") > 0 and rows(messages, "blobs") > 0
    assert rows(results, "blobs") == 1


READER = """
    import json, sqlite3, sys
    from durable_agent.activities.message_store import sqlite_store
    from durable_agent.activities.result_store import SqliteResultStore

    messages, results = sys.argv[1:3]
    store = sqlite_store(messages)
    with sqlite3.connect(messages) as connection:
        refs = [ref for (ref,) in connection.execute("SELECT ref FROM links")]
    chains = [store.get_chain(ref) for ref in refs]
    with sqlite3.connect(results) as connection:
        (ref,) = connection.execute("SELECT ref FROM blobs").fetchone()
    print(json.dumps({"chains": chains, "result": SqliteResultStore(results).get(ref)}))
"""


def read_in_another_process(keys: str | None) -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_PAYLOAD_KEYS")}
    if keys is not None:
        env["AGENT_PAYLOAD_KEYS"] = keys
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(READER), *map(str, stores())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


async def test_with_keys_the_stores_hold_no_text_of_the_run(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", pair(KEY_A))
    run = await run_agent(client, task_queue, a_run_that_uses_both_stores())
    assert run.result is not None and run.result.answer == ANSWER
    messages, results = stores()

    on_disk = bytes_on_disk(messages)
    for text in (PROMPT, ARGUMENT, ANSWER, "y" * 64):
        assert text.encode() not in on_disk, text
    assert FILLER not in bytes_on_disk(results)

    # Another process with the same keys reads both back.
    read, _ = read_in_another_process(pair(KEY_A))
    assert any(chain and PROMPT in chain[0] for chain in read["chains"])
    assert any(chain and ARGUMENT in "".join(chain) for chain in read["chains"])
    assert read["result"].startswith("HEAD") and FILLER.decode() in read["result"]

    # One without them, or with others, misses, and says why on stderr, once per key id.
    others = ((None, "AGENT_PAYLOAD_KEYS is not set"), (pair(KEY_B), "key id 'key-a' is not in"))
    for keys, reason in others:
        read, stderr = read_in_another_process(keys)
        assert read["result"] is None and not any(read["chains"]), keys
        assert f"key id 'key-a' cannot be opened ({reason}" in stderr
        assert stderr.count("cannot be opened") == 2, "one warning per file"


async def test_without_keys_the_same_scan_finds_the_text(client: Client, task_queue: str) -> None:
    """The control of the test above: its scan would find the texts if they were there."""
    run = await run_agent(client, task_queue, a_run_that_uses_both_stores())
    assert run.result is not None
    messages, results = stores()
    on_disk = bytes_on_disk(messages)
    assert all(text.encode() in on_disk for text in (PROMPT, ARGUMENT, ANSWER, "y" * 64))
    assert FILLER in bytes_on_disk(results)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def test_a_run_idle_past_the_retention_misses_once_and_completes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    clock = Clock()
    store = SqliteMessageStore(tmp_path / "messages.db", retention_hours=24, clock=clock)
    script = [
        turn(call("read_thing", label="first")),
        turn(call("write_thing", label="waits for a person")),
        turn(text="done", expect="done waits for a person"),
    ]
    agent_input = scripted_input(
        script, tools=["read_thing", "write_thing"], tool_approval=ToolApprovalPolicy()
    )
    message_store.use_message_store(store)
    try:
        async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
            handle = await client.start_workflow(
                AgentWorkflow.run, agent_input, id=f"idle-{uuid.uuid4()}", task_queue=task_queue
            )
            agent_run = AgentRun(handle, client)
            async for item in agent_run.events():
                if item.data.kind == "approval_requested":
                    break
            # Two days pass while the call waits, and the worker prunes (as it does hourly).
            clock.now += 48 * 3600
            assert store.prune()[0] > 0
            await agent_run.decide_tool_call("call_2_1", approve=True)
            result = await agent_run.result()
    finally:
        message_store.use_message_store(None)

    assert result.answer == "done" and result.steps == 3
    history = await handle.fetch_history()
    failed = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert failed == ["MessageStoreMiss"], "the pruned prefix missed once, and went whole"


class AnotherWorkersStore:
    """A worker-local store that never has what it was given: the read lands elsewhere."""

    worker_local = True

    def put(self, text: str) -> str:
        return "r-" + hashlib.sha256(text.encode()).hexdigest()[:20]

    def get(self, ref: str) -> str | None:
        return None


async def test_a_result_stored_on_one_worker_says_so_and_read_result_says_why_it_is_gone(
    client: Client, task_queue: str
) -> None:
    result_store.use_result_store(AnotherWorkersStore())
    try:
        script = [
            turn(call("big_text", size=5000)),
            turn(call("read_result", ref=AnotherWorkersStore().put(BIG))),
            turn(text="asked again"),
        ]
        run = await run_agent(client, task_queue, scripted_input(script, tools=["big_text"]))
    finally:
        result_store.use_result_store(None)

    assert run.result is not None
    shown, missing = run.tool_results()["call_1_1"], json.loads(run.tool_results()["call_2_1"])
    assert len(shown) <= 200 and shown.startswith("HEAD") and shown.endswith("TAIL")
    assert "stored on this worker" in shown and "if not found, call the tool again" in shown
    assert missing["found"] is False
    assert "another worker (the run moved) or has expired" in missing["message"]
    assert "Call the tool that returned it again" in missing["message"]


async def test_with_a_store_url_a_run_keeps_everything_sealed_in_postgresql(
    client: Client, task_queue: str, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same run on the shared store: no file is written, and with the keys no row holds a
    run's text."""
    import psycopg

    monkeypatch.setenv("AGENT_STORE_URL", store_url)
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", pair(KEY_A))
    run = await run_agent(client, task_queue, a_run_that_uses_both_stores())
    assert run.result is not None and run.result.answer == ANSWER
    messages, results = stores()
    assert tables(messages) == tables(results) == []
    with psycopg.connect(store_url) as connection:
        counts = {
            table: connection.execute(f"SELECT count(*), bool_and(sealed) FROM {table}").fetchone()
            for table in ("agent_links", "agent_blobs", "agent_results")
        }
        bodies = b"".join(
            bytes(body)
            for table in counts
            for (body,) in connection.execute(f"SELECT body FROM {table}")
        )
    assert all(count and sealed for count, sealed in counts.values()), counts
    for text in (PROMPT, ARGUMENT, ANSWER, "y" * 64):
        assert text.encode() not in bodies, text
    assert FILLER not in bodies


async def test_a_store_url_that_cannot_be_read_fails_the_run_without_its_password(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set once the worker has started (its start-up check would stop it), the URL is read when
    the model activity opens the store: the run fails, and its failure holds none of the
    password (libpq would quote the part after the space)."""
    from temporalio.client import WorkflowFailureError

    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        monkeypatch.setenv("AGENT_STORE_URL", "host=127.0.0.1 port=1 password=wrong s3cret")
        handle = await client.start_workflow(
            AgentWorkflow.run,
            a_run_that_uses_both_stores(),
            id=f"test-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    history = (await handle.fetch_history()).to_json()
    assert "AGENT_STORE_URL" in history
    assert "s3cret" not in history, history


async def test_the_store_files_are_readable_by_their_owner_only(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a umask that lets others read new files, every SQLite file the worker writes (and
    SQLite's -wal and -shm beside it) is 0600, its new directory 0700; a store file an older
    release left 0644 is tightened when it is opened."""
    from durable_agent.demo import tools as demo_tools

    data = tmp_path / "data"
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(data / "messages.db"))
    monkeypatch.setenv("AGENT_RESULT_STORE", str(data / "results.db"))
    monkeypatch.setenv("AGENT_DEMO_DB", str(tmp_path / "demo" / "demo.db"))
    older = tmp_path / "older.db"
    sqlite3.connect(older).close()
    older.chmod(0o644)
    saved = os.umask(0o022)
    try:
        run = await run_agent(client, task_queue, a_run_that_uses_both_stores())
        with demo_tools.connect() as connection:
            connection.execute("SELECT 1")
        message_store.sqlite_store(str(older)).put_blob("ref-1", "a blob")
    finally:
        os.umask(saved)
    assert run.result is not None and run.result.answer == ANSWER
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    names = {p.name for p in files}
    assert {"messages.db", "messages.db-wal", "messages.db-shm", "results.db", "demo.db"} <= names
    modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in files}
    assert set(modes.values()) == {"0o600"}, modes
    for directory in (data, tmp_path / "demo"):
        assert oct(directory.stat().st_mode & 0o777) == "0o700", directory
