"""The worker's message store: one connection, the newest chains in memory, a model call that
names a prefix writes only what follows it (bench/: it was a sixth of the worker's CPU), and a
request that names nothing writes nothing. What it keeps is sealed with the payload keys and
pruned once unused for the retention period."""

from __future__ import annotations

import base64
import logging
import sqlite3
from pathlib import Path

import pytest

from durable_agent.activities import message_store, store_config
from durable_agent.activities.message_store import (
    TOUCH_EVERY_SECONDS,
    SqliteMessageStore,
    remember,
    resolve_prefix,
)
from durable_agent.activities.result_store import SqliteResultStore
from durable_agent.encryption.payload_codec import PayloadKey
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.errors import AgentConfigurationError
from durable_agent.workflows.history import chain_refs, tools_json, tools_ref
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.specs import ToolSpec
from durable_agent.workflows.transcript import AssistantMessage, Message, UserMessage

TOOLS = [ToolSpec(name="lookup", description="d", parameters={"type": "object"})]
KEY_A = PayloadKey("key-a", bytes(range(32)))
KEY_B = PayloadKey("key-b", bytes(range(100, 132)))
SECRET = "QUOKKA-7731 lives at 12 Wombat Lane"
HOUR = 3600.0
DAY = 24 * HOUR


@pytest.fixture(autouse=True)
def fresh_memory() -> None:
    """What no call has named yet is process memory: each test starts without any."""
    message_store._unwritten.clear()


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def conversation(turns: int, first: str = "start") -> list[Message]:
    messages: list[Message] = [UserMessage(content=first)]
    for n in range(turns):
        messages.append(AssistantMessage(content=f"thinking {n}"))
        messages.append(UserMessage(content=f"more {n}"))
    return messages


def links_of(messages: list[Message], parent: str = "") -> list[tuple[str, str, str]]:
    refs = chain_refs(messages, parent)
    parents = [parent, *refs[:-1]]
    return [(r, up, m.model_dump_json()) for r, up, m in zip(refs, parents, messages, strict=True)]


def request(messages: list[Message], **refs: object) -> ModelRequest:
    return ModelRequest(
        settings=ModelSettings(), system=None, messages=messages, tools=TOOLS, step=1, **refs
    )


def sent(messages: list[Message]) -> tuple[ModelRequest, ModelRequest]:
    """(the request as the workflow named it, as the worker resolved it) for a whole request."""
    whole = request(messages)
    return whole, whole


def named_after(previous: list[Message], messages: list[Message]) -> tuple[ModelRequest, ...]:
    """A request that names `previous` and its tool list, and the same request resolved."""
    named = request(
        messages[len(previous) :],
        prefix_ref=chain_refs(previous)[-1],
        prefix_count=len(previous),
        tools_ref=tools_ref(TOOLS),
    ).model_copy(update={"tools": []})
    return named, request(messages)


def rows(path: Path, table: str = "links") -> int:
    with sqlite3.connect(path) as connection:
        return int(connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def refs(path: Path, table: str = "blobs") -> list[str]:
    """The refs in the file, read without the store (a read through it is a use)."""
    with sqlite3.connect(path) as connection:
        return sorted(ref for (ref,) in connection.execute(f"SELECT ref FROM {table}"))


def test_a_chain_just_written_is_read_from_memory_and_others_from_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "messages.db"
    store = SqliteMessageStore(path)
    messages = conversation(3)
    refs = chain_refs(messages)
    store.put_chain(links_of(messages))
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM links")

    assert store.get_chain(refs[-1]) is not None, "the newest chain is kept in memory"
    assert SqliteMessageStore(path).get_chain(refs[-1]) is None, "a new store reads the file"
    assert store.get_chain(refs[2]) is None, "a chain never kept whole is read from the file"


def test_a_request_that_names_nothing_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "messages.db"
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(path))
    for turns in range(3):  # a run without linear history: every call whole
        remember(*sent(conversation(turns)))
    summary = request(conversation(1, "summarise")).model_copy(update={"purpose": "summary"})
    remember(summary, summary)

    assert not path.exists()
    # What it sent is still there for a next call that names it, from memory.
    assert resolve_prefix(chain_refs(conversation(2))[-1], 5) == conversation(2)
    assert resolve_prefix(chain_refs(conversation(1, "summarise"))[-1], 3) is None


def test_a_call_that_names_its_prefix_writes_it_and_only_what_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "messages.db"
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(path))
    first, second = conversation(2), conversation(4)
    remember(*sent(first))
    assert not path.exists()

    # The worker resolves the second call's references, then keeps what it sent.
    named, resolved = named_after(first, second)
    assert resolve_prefix(chain_refs(first)[-1], len(first)) == first
    assert message_store.resolve_tools(tools_ref(TOOLS)) == TOOLS
    remember(named, resolved)

    assert rows(path) == len(second)
    assert rows(path, "blobs") == 1  # the tool list, written once
    # The chain the next call will name resolves to the whole conversation, with the same refs
    # the workflow computes, from a store that has only the file.
    last = chain_refs(second)[-1]
    assert resolve_prefix(last, len(second)) == second
    assert SqliteMessageStore(path).get_chain(last) is not None


def test_what_no_call_named_is_kept_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(tmp_path / "messages.db"))
    monkeypatch.setattr(message_store, "UNWRITTEN_CHARS", 1_000)
    old = conversation(1, "o" * 400)
    remember(*sent(old))
    for n in range(3):
        remember(*sent(conversation(0, f"{n}" * 400)))

    assert resolve_prefix(chain_refs(old)[-1], len(old)) is None, "the oldest went first"
    newest = conversation(0, "2" * 400)
    assert resolve_prefix(chain_refs(newest)[-1], 1) == newest


def test_the_store_keeps_a_bounded_number_of_chains_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_config, "RECENT_CHAINS", 2)
    path = tmp_path / "messages.db"
    store = SqliteMessageStore(path)
    lasts = []
    for n in range(3):
        messages: list[Message] = [UserMessage(content=f"run {n}")]
        store.put_chain(links_of(messages))
        lasts.append(chain_refs(messages)[-1])
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM links")

    assert [store.get_chain(ref) is not None for ref in lasts] == [False, True, True]


def test_one_open_store_per_file_and_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_PAYLOAD_KEYS", raising=False)
    a = message_store.sqlite_store(str(tmp_path / "a.db"))
    assert message_store.sqlite_store(str(tmp_path / "a.db")) is a
    assert message_store.sqlite_store(str(tmp_path / "b.db")) is not a
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", pair(KEY_A))
    assert message_store.sqlite_store(str(tmp_path / "a.db")) is not a


def test_a_tool_list_is_parsed_once_and_served_as_a_fresh_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(tmp_path / "messages.db"))
    store = message_store.message_store()
    store.put_blob(tools_ref(TOOLS), tools_json(TOOLS))
    reads: list[str] = []
    real_get_blob = store.get_blob
    monkeypatch.setattr(store, "get_blob", lambda ref: reads.append(ref) or real_get_blob(ref))
    ref = tools_ref(TOOLS)

    first = message_store.resolve_tools(ref)
    second = message_store.resolve_tools(ref)

    assert first == second == TOOLS and first is not second
    assert len(reads) <= 1, "the second call is served parsed, without reading the store"


# --- sealed with the payload keys ------------------------------------------------------------


def pair(key: PayloadKey) -> str:
    return f"{key.id}={base64.b64encode(key.key).decode()}"


def secret_conversation() -> list[Message]:
    return [UserMessage(content=SECRET), AssistantMessage(content=f"noted: {SECRET}")]


def test_with_keys_the_file_holds_no_plaintext_and_the_same_keys_read_it(tmp_path: Path) -> None:
    path = tmp_path / "messages.db"
    messages = secret_conversation()
    store = SqliteMessageStore(path, keys=[KEY_A])
    store.put_chain(links_of(messages))
    store.put_blob("content-1", SECRET)
    # While the store is open its commits are in the write-ahead log beside the file.
    assert path.with_name("messages.db-wal").exists()
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("messages.db*"))
    store.close()

    assert SECRET.encode() not in path.read_bytes()
    assert b"key-a" in path.read_bytes(), "each entry names the key that sealed it"
    again = SqliteMessageStore(path, keys=[KEY_A])
    assert again.get_chain(chain_refs(messages)[-1]) == [m.model_dump_json() for m in messages]
    assert again.get_blob("content-1") == SECRET


def test_without_keys_the_file_is_plaintext_as_before(tmp_path: Path) -> None:
    path = tmp_path / "messages.db"
    store = SqliteMessageStore(path)
    store.put_blob("content-1", SECRET)
    store.close()
    assert SECRET.encode() in path.read_bytes()  # the control for the scan above


@pytest.mark.parametrize(
    ("keys", "reason"),
    [((), "AGENT_PAYLOAD_KEYS is not set"), ((KEY_B,), "key id 'key-a' is not in")],
    ids=["no-keys", "other-keys"],
)
def test_an_entry_sealed_with_a_key_this_process_lacks_is_a_miss_with_a_warning(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    keys: tuple[PayloadKey, ...],
    reason: str,
) -> None:
    path = tmp_path / "messages.db"
    messages = secret_conversation()
    sealer = SqliteMessageStore(path, keys=[KEY_A])
    sealer.put_chain(links_of(messages))
    sealer.put_blob("content-1", SECRET)

    reader = SqliteMessageStore(path, keys=keys)
    with caplog.at_level(logging.WARNING, logger="activities.message_store"):
        assert reader.get_chain(chain_refs(messages)[-1]) is None
        assert reader.get_blob("content-1") is None

    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, "once per key id"
    assert "key id 'key-a' cannot be opened" in warnings[0] and reason in warnings[0]
    assert "count as misses" in warnings[0]


def test_a_rotated_key_ring_reads_old_entries_and_seals_new_ones_with_the_new_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "messages.db"
    SqliteMessageStore(path, keys=[KEY_A]).put_blob("content-1", SECRET)
    rotated = SqliteMessageStore(path, keys=[KEY_B, KEY_A])

    assert rotated.get_blob("content-1") == SECRET
    rotated.put_blob("content-2", "after the rotation")
    assert SqliteMessageStore(path, keys=[KEY_B]).get_blob("content-2") == "after the rotation"
    # Storing an entry again seals it with the newest key.
    rotated.put_blob("content-1", SECRET)
    assert SqliteMessageStore(path, keys=[KEY_B]).get_blob("content-1") == SECRET


def test_entries_from_before_the_keys_still_read(tmp_path: Path) -> None:
    path = tmp_path / "messages.db"
    SqliteMessageStore(path).put_blob("content-1", SECRET)
    assert SqliteMessageStore(path, keys=[KEY_A]).get_blob("content-1") == SECRET


def test_a_sealed_entry_moved_to_another_ref_does_not_open(tmp_path: Path) -> None:
    path = tmp_path / "messages.db"
    store = SqliteMessageStore(path, keys=[KEY_A])
    store.put_blob("content-1", SECRET)
    store.put_blob("content-2", "something else")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE blobs SET text = (SELECT text FROM blobs WHERE ref = 'content-1')"
            " WHERE ref = 'content-2'"
        )
    assert SqliteMessageStore(path, keys=[KEY_A]).get_blob("content-2") is None


def test_an_entry_in_an_unknown_format_is_a_miss(tmp_path: Path) -> None:
    path = tmp_path / "messages.db"
    store = SqliteMessageStore(path, keys=[KEY_A])
    store.put_blob("content-1", SECRET)
    with sqlite3.connect(path) as connection:
        (sealed,) = connection.execute("SELECT text FROM blobs").fetchone()
        connection.execute("UPDATE blobs SET text = ?", (b"\x02" + sealed[1:],))
    assert SqliteMessageStore(path, keys=[KEY_A]).get_blob("content-1") is None


@pytest.mark.parametrize("kept", [5, 20])
def test_a_sealed_entry_cut_short_is_a_miss(tmp_path: Path, kept: int) -> None:
    """`kept` bytes after the key id: less than a nonce (AESGCM's bare ValueError, which used to
    fail the read, and so the activity, on every attempt) or than a nonce and a tag."""
    path = tmp_path / "messages.db"
    SqliteMessageStore(path, keys=[KEY_A]).put_blob("content-1", SECRET)
    with sqlite3.connect(path) as connection:
        (sealed,) = connection.execute("SELECT text FROM blobs").fetchone()
        header = sealed.index(b"\0") + 1
        connection.execute("UPDATE blobs SET text = ?", (sealed[: header + kept],))
    assert SqliteMessageStore(path, keys=[KEY_A]).get_blob("content-1") is None


def test_a_malformed_configuration_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(tmp_path / "messages.db"))
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", "key-a=not-base64!")
    with pytest.raises(AgentConfigurationError, match=r"stores cannot be opened.*not base64"):
        message_store.message_store()
    monkeypatch.delenv("AGENT_PAYLOAD_KEYS")
    for bad in ("soon", "0", "-3", "inf"):
        monkeypatch.setenv("AGENT_STORE_RETENTION_HOURS", bad)
        with pytest.raises(AgentConfigurationError, match="a number of hours above 0"):
            message_store.message_store()
    monkeypatch.setenv("AGENT_STORE_RETENTION_HOURS", "1.5")
    store = message_store.message_store()
    assert isinstance(store, SqliteMessageStore) and store.retention_seconds == 1.5 * HOUR


# --- pruned after the retention period -------------------------------------------------------


def test_entries_unused_for_the_retention_period_are_pruned_when_a_store_opens(
    tmp_path: Path,
) -> None:
    path, clock = tmp_path / "messages.db", Clock()
    messages = conversation(2)
    store = SqliteMessageStore(path, retention_hours=24, clock=clock)
    store.put_chain(links_of(messages))
    store.put_blob("content-1", "kept a day")
    store.close()

    clock.now += 23 * HOUR
    assert SqliteMessageStore(path, retention_hours=24, clock=clock).prune() == (0, 0)
    clock.now += 2 * HOUR  # a day and an hour since the last use
    reopened = SqliteMessageStore(path, retention_hours=24, clock=clock)

    assert reopened.get_chain(chain_refs(messages)[-1]) is None
    assert reopened.get_blob("content-1") is None
    assert rows(path) == rows(path, "blobs") == 0


def test_a_store_prunes_at_most_once_an_hour_as_it_is_written(tmp_path: Path) -> None:
    path, clock = tmp_path / "messages.db", Clock()
    store = SqliteMessageStore(path, retention_hours=24, clock=clock)
    store.put_blob("old", "past its retention")  # the store opens, and prunes
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE blobs SET used = ?", (clock.now - 2 * DAY,))

    clock.now += HOUR / 2
    store.put_blob("new-1", "a write within the hour")
    assert refs(path) == ["new-1", "old"], "no second prune within the hour"
    clock.now += HOUR / 2
    store.put_blob("new-2", "a write an hour later")
    assert refs(path) == ["new-1", "new-2"]


def test_reading_an_entry_counts_as_a_use(tmp_path: Path) -> None:
    path, clock = tmp_path / "messages.db", Clock()
    messages = conversation(1)
    head = chain_refs(messages)[-1]
    writer = SqliteMessageStore(path, retention_hours=48, clock=clock)
    writer.put_chain(links_of(messages))
    writer.put_blob("content-1", "read now and then")
    writer.close()

    clock.now += 36 * HOUR
    reader = SqliteMessageStore(path, retention_hours=48, clock=clock)  # from the file
    assert reader.get_chain(head) is not None and reader.get_blob("content-1") is not None
    clock.now += 36 * HOUR  # 72 hours after the write, 36 after the read
    assert reader.get_chain(head) is not None, "from memory, and touched again on the file"
    clock.now += 36 * HOUR
    pruned = reader.prune()

    assert pruned == (0, 1), "the chain was read 36 hours ago, the blob 72"
    assert SqliteMessageStore(path, retention_hours=48, clock=clock).get_chain(head) is not None


def test_a_read_writes_its_use_at_most_once_an_hour(tmp_path: Path) -> None:
    path, clock = tmp_path / "messages.db", Clock()
    store = SqliteMessageStore(path, clock=clock)
    store.put_blob("content-1", "text")

    def used() -> int:
        with sqlite3.connect(path) as connection:
            return int(connection.execute("SELECT used FROM blobs").fetchone()[0])

    written = used()
    clock.now += TOUCH_EVERY_SECONDS / 2
    store.get_blob("content-1")
    assert used() == written
    clock.now += TOUCH_EVERY_SECONDS
    store.get_blob("content-1")
    assert used() == int(clock.now)


def test_a_link_stays_while_a_later_link_of_its_chain_is_used(tmp_path: Path) -> None:
    path, clock = tmp_path / "messages.db", Clock()
    store = SqliteMessageStore(path, retention_hours=48, clock=clock)
    start = conversation(1)
    store.put_chain(links_of(start))
    clock.now += 40 * HOUR
    longer = conversation(3)
    store.put_chain(links_of(longer[len(start) :], chain_refs(start)[-1]))
    clock.now += 40 * HOUR  # the first links are 80 hours old, the newest 40
    assert store.prune() == (0, 0)

    reader = SqliteMessageStore(path, clock=clock)
    assert reader.get_chain(chain_refs(longer)[-1]) == [m.model_dump_json() for m in longer]
    clock.now += 49 * HOUR  # now the newest link was last used (read) 49 hours ago
    assert store.prune() == (len(longer), 0)


def test_a_file_from_before_pruning_is_kept_from_now(tmp_path: Path) -> None:
    path, clock = tmp_path / "messages.db", Clock()
    messages = conversation(1)
    with sqlite3.connect(path) as connection:  # the schema of the previous release
        connection.execute("CREATE TABLE links (ref TEXT PRIMARY KEY, parent TEXT, message TEXT)")
        connection.execute("CREATE TABLE blobs (ref TEXT PRIMARY KEY, text TEXT)")
        connection.executemany("INSERT INTO links VALUES (?, ?, ?)", links_of(messages))
        connection.execute("INSERT INTO blobs VALUES ('content-1', 'old text')")

    store = SqliteMessageStore(path, retention_hours=24, clock=clock)
    assert store.get_chain(chain_refs(messages)[-1]) == [m.model_dump_json() for m in messages]
    assert store.get_blob("content-1") == "old text"
    clock.now += 25 * HOUR
    assert store.prune() == (len(messages), 1)


def test_a_pruned_result_is_not_found(tmp_path: Path) -> None:
    clock = Clock()
    results = SqliteResultStore.on(
        SqliteMessageStore(tmp_path / "results.db", retention_hours=1, clock=clock)
    )
    ref = results.put("a large result")
    assert results.get(ref) == "a large result"
    clock.now += 2 * HOUR
    SqliteMessageStore(tmp_path / "results.db", retention_hours=1, clock=clock).prune()
    assert results.get(ref) is None


def test_a_tool_list_parsed_already_is_still_written_when_first_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another store's run left the list parsed in this process.
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(tmp_path / "other.db"))
    message_store.message_store().put_blob(tools_ref(TOOLS), tools_json(TOOLS))
    assert message_store.resolve_tools(tools_ref(TOOLS)) == TOOLS

    path = tmp_path / "messages.db"
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(path))
    first = conversation(0)
    remember(*sent(first))
    named, resolved = named_after(first, conversation(1))
    assert message_store.resolve_tools(tools_ref(TOOLS)) == TOOLS
    remember(named, resolved)

    assert refs(path) == [tools_ref(TOOLS)], "for when this process and its memory are gone"


def test_a_chain_named_again_is_parsed_only_in_its_new_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteMessageStore(tmp_path / "messages.db")
    monkeypatch.setattr(message_store, "_store", store)
    first = [UserMessage(content="one"), AssistantMessage(content="two")]
    store.put_chain(links_of(first))
    head = chain_refs(first)[-1]
    parsed = message_store.resolve_prefix(head, 2)
    assert parsed == first
    more = [UserMessage(content="three")]
    store.put_chain(links_of(more, head))
    longer = message_store.resolve_prefix(chain_refs(first + more)[-1], 3)
    assert longer == first + more
    assert longer is not None and parsed is not None
    assert all(a is b for a, b in zip(parsed, longer[:2], strict=True)), "parsed again"


def test_the_parsed_messages_kept_are_bounded_by_their_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_store, "MESSAGES_KEPT_CHARS", 1_000)
    store = SqliteMessageStore(tmp_path / "messages.db")
    monkeypatch.setattr(message_store, "_store", store)
    messages: list[Message] = [UserMessage(content=f"{i}: " + "x" * 200) for i in range(20)]
    store.put_chain(links_of(messages))
    assert message_store.resolve_prefix(chain_refs(messages)[-1], 20) == messages
    assert 0 < message_store._messages_chars <= 1_000
    assert len(message_store._messages) < 20
