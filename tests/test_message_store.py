"""The worker's message store: one connection, the newest chains in memory, and a model call
that names a prefix writes only what follows it (bench/: it was a sixth of the worker's CPU)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from activities import message_store
from activities.message_store import SqliteMessageStore, remember, resolve_prefix
from workflows.history import chain_refs, tools_ref
from workflows.models import ToolSpec
from workflows.transcript import AssistantMessage, Message, UserMessage

TOOLS = [ToolSpec(name="lookup", description="d", parameters={"type": "object"})]


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = [UserMessage(content="start")]
    for n in range(turns):
        messages.append(AssistantMessage(content=f"thinking {n}"))
        messages.append(UserMessage(content=f"more {n}"))
    return messages


def rows(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        return int(connection.execute("SELECT count(*) FROM links").fetchone()[0])


def test_a_chain_just_written_is_read_from_memory_and_others_from_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "messages.db"
    store = SqliteMessageStore(path)
    messages = conversation(3)
    refs = chain_refs(messages)
    parents = ["", *refs[:-1]]
    store.put_chain(
        [(r, up, m.model_dump_json()) for r, up, m in zip(refs, parents, messages, strict=True)]
    )
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM links")

    assert store.get_chain(refs[-1]) is not None, "the newest chain is kept in memory"
    assert SqliteMessageStore(path).get_chain(refs[-1]) is None, "a new store reads the file"
    assert store.get_chain(refs[2]) is None, "a chain never kept whole is read from the file"


def test_a_call_that_names_its_prefix_writes_only_what_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "messages.db"
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(path))
    first = conversation(2)
    remember(first, TOOLS)
    assert rows(path) == len(first)

    second = conversation(4)
    prefix = chain_refs(first)[-1]
    remember(second, TOOLS, prefix_ref=prefix, prefix_count=len(first), stored_tools=True)

    assert rows(path) == len(second)
    # The chain the next call will name resolves to the whole conversation, with the same refs
    # the workflow computes.
    last = chain_refs(second)[-1]
    assert resolve_prefix(last, len(second)) == second
    assert message_store.message_store().get_chain(last) is not None


def test_the_store_keeps_a_bounded_number_of_chains_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(message_store, "RECENT_CHAINS", 2)
    path = tmp_path / "messages.db"
    store = SqliteMessageStore(path)
    lasts = []
    for n in range(3):
        messages = [UserMessage(content=f"run {n}")]
        ref = chain_refs(messages)[-1]
        store.put_chain([(ref, "", messages[0].model_dump_json())])
        lasts.append(ref)
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM links")

    assert [store.get_chain(ref) is not None for ref in lasts] == [False, True, True]


def test_one_open_store_per_file(tmp_path: Path) -> None:
    a = message_store.sqlite_store(str(tmp_path / "a.db"))
    assert message_store.sqlite_store(str(tmp_path / "a.db")) is a
    assert message_store.sqlite_store(str(tmp_path / "b.db")) is not a


def test_a_tool_list_is_parsed_once_and_served_as_a_fresh_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(tmp_path / "messages.db"))
    remember(conversation(0), TOOLS)
    reads: list[str] = []
    store = message_store.message_store()
    real_get_blob = store.get_blob
    monkeypatch.setattr(store, "get_blob", lambda ref: reads.append(ref) or real_get_blob(ref))
    ref = tools_ref(TOOLS)

    first = message_store.resolve_tools(ref)
    second = message_store.resolve_tools(ref)

    assert first == second == TOOLS and first is not second
    assert len(reads) <= 1, "the second call is served parsed, without reading the store"
