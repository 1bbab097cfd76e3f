"""The fault-injection harness (bench/faults.py) runs in a tiny mode and finds nothing wrong; and
its checker is able to find something: each invariant, broken by hand, is flagged."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.faults import (
    INVARIANTS,
    ConversationFake,
    DatabaseState,
    RunRecord,
    check,
    check_requests,
)
from durable_agent.workflows.agent import AgentWorkflow
from tests import fake_openai
from tests.helpers import call, eventually, scripted_input, turn

REPO = Path(__file__).resolve().parent.parent


def test_a_tiny_run_with_a_kill_and_a_cancel_breaks_no_invariant(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    options = ["--runs", "4", "--kills", "1", "--cancels", "1", "--spacing", "2.5"]
    options += ["--seed", "2", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.faults", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    figures = json.loads(out.read_text())

    assert figures["runs"] == 4
    assert figures["completed"] + figures["failed"] + figures["cancelled"] == 4
    assert figures["violations"] == dict.fromkeys(INVARIANTS, 0)
    # The faults were really injected, and effects were applied and undone.
    assert figures["kills"] == 1
    assert figures["cancels_sent"] + figures["cancels_after_the_end"] == 1
    assert figures["effects_applied"] > 0 and figures["effects_undone"] > 0
    assert figures["provider_requests"] >= 4
    assert "seed 2" in done.stdout


async def test_a_worker_without_a_cache_answers_every_task_of_runs_started_together(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The fault run's workers without a cache, with nothing killed: no workflow task of runs
    that start together goes unanswered. Core, with max_cached_workflows=0, evicts one run to
    take another run's task; a run evicted while its `resolve_tools` local activity ran had its
    task dropped, unanswered, and the server retried it only after its timeout, stretched from
    the fourth attempt on (faults-16-057 waited 163 s; docs/testing.md)."""
    ready = tmp_path / "worker.ready"
    command = [sys.executable, "-m", "tests.crash_worker", "--ready-file", str(ready)]
    command += ["--address", client.service_client.config.target_host, "--task-queue", task_queue]
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            command, cwd=REPO, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT
        )
    try:
        await eventually(ready.exists, timeout=60, what="the worker polls")
        script = [turn(call("get_order", order_id=1042)), turn(text="Order 1042 is processing.")]
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    AgentWorkflow.run,
                    scripted_input(script, tools=["get_order"]),
                    id=f"{task_queue}-{n}",
                    task_queue=task_queue,
                    task_timeout=timedelta(seconds=3),
                )
                for n in range(12)
            )
        )
        await asyncio.gather(*(handle.result() for handle in handles))
        unanswered = {}
        for handle in handles:
            history = await handle.fetch_history()
            timed_out = [
                event.event_id
                for event in history.events
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
            ]
            if timed_out:
                unanswered[handle.id] = timed_out
        assert unanswered == {}, (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
    finally:
        worker.kill()
        worker.wait()


# --- the checker, on hand-made worlds -----------------------------------------------------------

RUN = "faults-0-000"
ORDER = 100_000
SUBJECT = "Order 100000 cancelled (fault run 0)"
SCRIPTED = {"get_order": 1, "cancel_order": 1, "issue_refund": 1, "send_email": 1}


def applied(call_id: str, tool: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"idempotency_key": f"{RUN}/run-1/{call_id}", "tool": tool, "result": result}


def undo(call_id: str, tool: str) -> dict[str, Any]:
    return {"idempotency_key": f"{RUN}/run-1/{call_id}#undo", "tool": f"undo {tool}", "result": {}}


EFFECTS = [
    applied("call_2_1", "cancel_order", {"cancelled": True, "previous_status": "processing"}),
    applied("call_3_1", "issue_refund", {"refunded": True, "refund_id": 1}),
    applied("call_4_1", "send_email", {"sent": True, "outbox_id": 1}),
]


def completed(**changes: Any) -> RunRecord:
    record = RunRecord(
        workflow_id=RUN,
        status="COMPLETED",
        order_id=ORDER,
        subject=SUBJECT,
        scripted=SCRIPTED,
        kept=["call_2_1", "call_3_1", "call_4_1"],
    )
    for name, value in changes.items():
        setattr(record, name, value)
    return record


def kept_world(**changes: Any) -> DatabaseState:
    """The database after a completed run: cancelled, refunded once, emailed once."""
    world = DatabaseState(
        applied=list(EFFECTS),
        order_status={ORDER: "cancelled"},
        refunds={ORDER: [False]},
        emails={SUBJECT: 1},
    )
    for name, value in changes.items():
        setattr(world, name, value)
    return world


def undone_world() -> DatabaseState:
    return DatabaseState(
        applied=[
            *EFFECTS,
            undo("call_4_1", "send_email"),
            undo("call_3_1", "issue_refund"),
            undo("call_2_1", "cancel_order"),
        ],
        order_status={ORDER: "processing"},
        refunds={ORDER: [True]},
        emails={SUBJECT: 1, f"Correction: {SUBJECT}": 1},
    )


def failed(**changes: Any) -> RunRecord:
    """A run that failed at its step limit, each of its three effects undone."""
    failure: dict[str, Any] = {
        "status": "FAILED",
        "error_type": "AgentStepLimitExceeded",
        "has_failure_details": True,
        "kept": [],
        "compensations": {
            "call_4_1": "completed",
            "call_3_1": "completed",
            "call_2_1": "completed",
        },
    }
    return completed(**{**failure, **changes})


def flagged(runs: list[RunRecord], world: DatabaseState, **requests: list[str]) -> dict[str, int]:
    verdict = check(runs, world, requests)
    return {name: len(found) for name, found in verdict.violations.items() if found}


def test_a_world_that_keeps_the_invariants_passes() -> None:
    assert flagged([completed()], kept_world()) == {}
    assert flagged([failed()], undone_world()) == {}
    cancelled = failed(status="CANCELED", error_type="CancelledError", has_failure_details=False)
    assert flagged([cancelled], undone_world()) == {}
    verdict = check([failed()], undone_world())
    assert (verdict.effects_applied, verdict.effects_undone) == (3, 3)


def test_an_effect_applied_twice_is_flagged() -> None:
    # A second refund row for the run's one refund call, as a retry that missed its key makes.
    twice = kept_world(refunds={ORDER: [False, False]})
    assert flagged([completed()], twice) == {"effect applied twice": 1}
    # Or the same email sent under a second key of the run.
    again = applied("call_5_1", "send_email", {"sent": True, "outbox_id": 2})
    twice = kept_world(applied=[*EFFECTS, again], emails={SUBJECT: 2})
    found = flagged([completed(kept=["call_2_1", "call_3_1", "call_4_1", "call_5_1"])], twice)
    assert found == {"effect applied twice": 1}


def test_an_applied_effect_that_no_record_lists_is_flagged() -> None:
    # A completed run whose result forgot the email it sent.
    assert flagged([completed(kept=["call_2_1", "call_3_1"])], kept_world()) == {
        "effect unlisted": 1
    }
    # A failed run whose compensation record skips the refund, which stays paid.
    world = undone_world()
    world.applied = [row for row in world.applied if row["tool"] != "undo issue_refund"]
    world.refunds = {ORDER: [False]}
    record = failed(compensations={"call_4_1": "completed", "call_2_1": "completed"})
    assert flagged([record], world) == {"effect unlisted": 1}
    # An effect under a workflow id that no run has.
    stray = {**EFFECTS[2], "idempotency_key": "faults-0-999/run-1/call_4_1"}
    assert flagged([completed()], kept_world(applied=[*EFFECTS, stray])) == {"effect unlisted": 1}


def test_a_record_the_database_contradicts_is_flagged() -> None:
    # The record says the cancellation was undone; the order is still cancelled, no undo ran.
    world = undone_world()
    world.applied = [row for row in world.applied if row["tool"] != "undo cancel_order"]
    world.order_status = {ORDER: "cancelled"}
    assert flagged([failed()], world) == {"database disagrees with the record": 1}
    # A listed-as-not-undone effect is fine (and counted), and the database must still say so.
    record = failed(compensations={**failed().compensations, "call_2_1": "failed"})
    verdict = check([record], world)
    assert verdict.broken == 0 and verdict.effects_listed_not_undone == 1


def test_a_bad_ending_a_bad_transcript_and_a_bad_request_are_flagged() -> None:
    world = kept_world()
    # Terminated, its three effects neither kept by a result nor undone.
    assert flagged([completed(status="TERMINATED")], world) == {
        "run ended otherwise": 1,
        "effect unlisted": 3,
    }
    unnamed = failed(error_type="ActivityError")
    assert flagged([unnamed], undone_world()) == {"run ended otherwise": 1}
    assert flagged([completed(transcript_complete=False)], world) == {
        "final transcript incomplete": 1
    }
    found = flagged([completed()], world, pairing=["request #3 breaks the pairing rule"])
    assert found == {"invalid provider request": 1}


def test_a_cancel_that_ends_a_run_failed_is_flagged() -> None:
    world = DatabaseState(applied=[], order_status={ORDER: "processing"}, refunds={}, emails={})
    cancel = "sent 1.8 s after the start"
    nothing_undone = {"kept": [], "compensations": {}, "cancel": cancel}
    failed_by_cancel = failed(
        error_type="AgentConfigurationError",
        error_message="the worker could not list its tools: CancelledError: Activity cancelled",
        **nothing_undone,
    )
    assert flagged([failed_by_cancel], world) == {"run ended otherwise": 1}
    # A run that failed on its own (its step limit) before the cancel came is not.
    failed_first = failed(error_message="max_steps=2 reached", **nothing_undone)
    assert flagged([failed_first], world) == {}


def test_a_request_cut_off_by_a_killed_sender_is_not_taken_as_received() -> None:
    # The headers arrived, the body did not (its sender was SIGKILLed between the two writes):
    # the fake hangs up, as a server does, and the checks never see it.
    headers = {"authorization": "Bearer sk-test-fake", "content-length": "2048"}
    with ConversationFake([]) as fake:
        for raw in (b"", b'{"model": "gpt-fake-faults", "mess'):
            assert isinstance(fake.answer("/v1/chat/completions", headers, raw), fake_openai.Hangup)
        assert (fake.requests, fake.cut_off) == ([], 2)
        assert check_requests(fake) == {
            "pairing rule broken": [],
            "off the script": [],
            "a result changed between requests": [],
        }


def test_a_request_that_breaks_the_pairing_rule_or_rewrites_a_result_is_flagged() -> None:
    user = {"role": "user", "content": f"[{RUN}] Cancel order {ORDER}."}
    asked = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1_1", "type": "function", "function": {"name": "get_order"}}],
    }

    def answered(text: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": "call_1_1", "content": text}

    with ConversationFake([]) as fake:
        for messages in (
            [user],
            [user, asked, answered('{"found": true}')],
            [user, asked, answered('{"found": false}')],  # the same call, another result
            [user, asked],  # the call without its result
        ):
            body = {"model": "gpt-fake-faults", "messages": messages}
            fake.requests.append(
                fake_openai.Recorded("/v1/chat/completions", {}, json.dumps(body).encode(), body)
            )
        found = check_requests(fake)
    assert {name: len(what) for name, what in found.items()} == {
        "pairing rule broken": 1,
        "off the script": 0,
        "a result changed between requests": 1,
    }
