"""How snapshots of a streaming call's progress become deltas (agent_client.DeltaReader), and how
the starter writes them (cli.tables.DeltaLines): pure, no server."""

from __future__ import annotations

from durable_agent.cli.tables import DeltaLines
from durable_agent.client.agent_client import DeltaReader
from durable_agent.workflows.activity_io import STREAM_KEPT_CHARS, ModelDelta, StreamProgress


def progress(attempt: int = 1, text: str = "", reasoning: str = "", **more: int) -> StreamProgress:
    return StreamProgress(step=1, attempt=attempt, text=text, reasoning=reasoning, **more)


def test_each_snapshot_gives_what_it_adds() -> None:
    reader = DeltaReader()
    assert reader.read(None, 1) == []
    assert reader.read(progress(), 1) == []
    assert [d.text for d in reader.read(progress(reasoning="Think"), 1)] == ["Think"]
    both = reader.read(progress(text="Hel", reasoning="Think more"), 1)
    assert [(d.kind, d.text) for d in both] == [("text", "Hel"), ("reasoning", " more")]
    assert reader.read(progress(text="Hel", reasoning="Think more"), 1) == []  # seen already
    assert [d.text for d in reader.read(progress(text="Hello"), 1)] == ["lo"]


def test_a_snapshot_past_the_kept_characters_gives_what_it_carries_after_what_was_seen() -> None:
    reader = DeltaReader()
    reader.read(progress(text="a" * 20), 1)
    kept = "a" * (STREAM_KEPT_CHARS - 5) + "bbbbb"
    (delta,) = reader.read(progress(text=kept, text_offset=15), 1)
    assert delta.text == kept[5:]  # characters 20 to 15 + len(kept) are new
    # A reader that fell further behind than the kept characters gets what is carried.
    (delta,) = reader.read(progress(text="c" * 10, text_offset=STREAM_KEPT_CHARS * 3), 1)
    assert delta.text == "c" * 10


def test_a_new_attempt_voids_the_last_ones_deltas() -> None:
    reader = DeltaReader()
    reader.read(progress(text="Half a"), 1)
    # The retry is pending, its first beat not in yet: the snapshot is the failed attempt's.
    assert reader.read(progress(text="Half a"), 2) == [ModelDelta(step=1, attempt=1, kind="void")]
    assert reader.read(progress(text="Half a"), 2) == []  # once
    assert [d.text for d in reader.read(progress(attempt=2, text="Whole"), 2)] == ["Whole"]


def test_a_new_attempts_beat_voids_the_last_one_too() -> None:
    reader = DeltaReader()
    reader.read(progress(text="Half a"), 1)
    deltas = reader.read(progress(attempt=2, text="W"), 2)
    assert [(d.attempt, d.kind, d.text) for d in deltas] == [(1, "void", ""), (2, "text", "W")]


def test_the_starter_writes_text_reasoning_and_voids_on_lines_of_their_own() -> None:
    lines = DeltaLines()
    written = [
        lines.text(ModelDelta(step=1, attempt=1, kind="reasoning", text="Plan")),
        lines.text(ModelDelta(step=1, attempt=1, kind="reasoning", text=" it.")),
        lines.text(ModelDelta(step=1, attempt=1, kind="text", text="Hel")),
        lines.text(ModelDelta(step=1, attempt=1, kind="void")),
        lines.text(ModelDelta(step=1, attempt=2, kind="text", text="Hello")),
    ]
    assert "".join(written) == (
        "[thinking: Plan it.]\nHel\n[step 1, attempt 1 failed: its text is void]\nHello"
    )
