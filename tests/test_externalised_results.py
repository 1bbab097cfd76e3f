"""A result too large to show is kept whole; the model pages through it with read_result."""

from __future__ import annotations

import hashlib
import json

import pytest
from temporalio.client import Client

from durable_agent.activities.providers.scripted import recorded_requests
from durable_agent.activities.result_store import use_result_store
from tests.helpers import call, run_agent, scripted_input, turn

BIG = "HEAD" + "x" * 5000 + "TAIL"
REF = "r-" + hashlib.sha256(BIG.encode()).hexdigest()[:20]


@pytest.mark.usefixtures("scripted_requests")
async def test_the_model_reads_the_middle_of_an_externalised_result(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("big_text", size=5000)),
        turn(call("read_result", ref=REF, offset=2000, length=10), expect=REF),
        turn(call("read_result", ref="r-nope")),
        turn(text="read it"),
    ]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["big_text"]))

    assert run.result is not None
    shown, part, unknown = (run.tool_results()[f"call_{i}_1"] for i in (1, 2, 3))
    assert len(shown) <= 200 and shown.startswith("HEAD") and shown.endswith("TAIL")
    assert f"of {len(BIG)}" in shown and f'read_result(ref="{REF}"' in shown
    # The default store is this worker's file: the text does not promise more than that.
    assert "stored on this worker" in shown and "if not found, call the tool again" in shown
    assert json.loads(part) == {
        "found": True,
        "ref": REF,
        "offset": 2000,
        "length": 10,
        "total_chars": len(BIG),
        "text": "x" * 10,
    }
    missing = json.loads(unknown)
    assert missing["found"] is False and missing["ref"] == "r-nope"
    assert (
        "this worker has no result 'r-nope': it was stored on another worker"
        in (missing["message"])
    )
    first, second, *_ = recorded_requests(run.handle.id)
    assert "read_result" not in [t.name for t in first.tools]  # nothing to read yet
    assert "read_result" in [t.name for t in second.tools]
    record = run.trace[0].tool_calls[0]
    assert record.externalised and record.truncated


@pytest.mark.usefixtures("scripted_requests")
async def test_without_externalising_the_middle_is_cut_and_gone(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("big_text", size=5000)), turn(text="done")]
    agent_input = scripted_input(script, tools=["big_text"], externalise_results=False)
    run = await run_agent(client, task_queue, agent_input)

    shown = run.tool_results()["call_1_1"]
    assert "characters omitted]" in shown and "read_result" not in shown
    assert all(
        "read_result" not in [t.name for t in r.tools] for r in recorded_requests(run.handle.id)
    )
    assert not run.trace[0].tool_calls[0].externalised


class SharedStore:
    """A store every worker reads (a fleet's own, through use_result_store)."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def put(self, text: str) -> str:
        ref = "r-" + hashlib.sha256(text.encode()).hexdigest()[:20]
        self.texts[ref] = text
        return ref

    def get(self, ref: str) -> str | None:
        return self.texts.get(ref)


async def test_a_shared_store_is_promised_as_such(client: Client, task_queue: str) -> None:
    shared = SharedStore()
    use_result_store(shared)
    try:
        script = [
            turn(call("big_text", size=5000)),
            turn(call("read_result", ref="r-nope")),
            turn(text="done"),
        ]
        run = await run_agent(client, task_queue, scripted_input(script, tools=["big_text"]))
    finally:
        use_result_store(None)

    shown, unknown = run.tool_results()["call_1_1"], json.loads(run.tool_results()["call_2_1"])
    assert shared.texts == {REF: BIG}
    assert "the whole result is stored" in shown and "this worker" not in shown
    assert "no stored result 'r-nope'" in unknown["message"]
    assert "another worker" not in unknown["message"]
