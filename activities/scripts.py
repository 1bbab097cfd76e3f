"""Code mode's sandbox: a model's script, run in pydantic-monty one leg at a time.

The rule of this room: a leg runs the script, from its start or from its saved state with the
results of the calls it waited on, until every task of the script waits on a tool call, or the
script ends; it never runs a tool itself. The calls go back to the workflow, which runs each one
as a direct call runs (workflows/code_mode.py), and the next leg resumes the saved state with
their results. A leg does nothing outside its sandbox: retried from the same input it does the
same again, so a worker lost in the middle of one loses nothing and repeats no tool.

The sandbox is monty's (docs/code-mode.md says why this one): a Rust interpreter of a Python
subset, run in worker subprocesses of one pool a process, with no file system, environment,
network or imports beyond its own few modules, and its own limits on execution time (summed
over the whole script: the clock is part of the saved state) and memory. A script's call is
answered with a future at once, so calls made concurrently (`asyncio.gather`) come back to the
workflow together, as one batch.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import zlib
from typing import TYPE_CHECKING, Any, Literal

from pydantic_core import to_jsonable_python
from temporalio import activity

from ..workflows.activity_io import ScriptCall, ScriptCallResult, ScriptLeg, ScriptLegInput
from ..workflows.outcomes import bounded
from ..workflows.script_tools import RUN_SCRIPT
from ._heartbeat import heartbeating
from .result_store import result_store, worker_local

if TYPE_CHECKING:
    from pydantic_monty import Monty

MAX_INLINE_SNAPSHOT_CHARS = 128_000
"""A script's saved state travels in the leg's result (and so in the run's history) up to this
size, compressed and in base64; larger, it is kept in the result store and the leg names it,
as an oversized model reply is (activities/oversized_reply.py)."""
MAX_SUSPENSIONS = 10_000
"""monty's own count of a sandbox's round trips to the host, a backstop: the workflow counts
the script's calls (CodeMode.max_calls) and a leg stops the script past them."""
MAX_REASON_CHARS = 500
SANDBOX_PROCESSES = 4
"""Sandbox processes a worker keeps at most: legs past them wait for one. A leg takes at most
its script's execution time, and most take milliseconds."""

_pool: Monty | None = None
_pool_lock = threading.Lock()


def _sandbox() -> Monty:
    """The process's pool of sandbox processes, started when a leg first needs it."""
    global _pool
    with _pool_lock:
        if _pool is None:
            # Imported here: a process that never runs a script never loads it.
            from pydantic_monty import Monty

            pool = Monty(min_processes=1, max_processes=SANDBOX_PROCESSES)
            pool.__enter__()  # the pool lives as long as the process
            _pool = pool
        return _pool


@activity.defn(name=RUN_SCRIPT)
async def run_script(leg: ScriptLegInput) -> ScriptLeg:
    """One leg of a script: to its next calls, or its end."""
    async with heartbeating():
        # monty's sessions block (the GIL released): the worker's event loop goes on meanwhile.
        return await asyncio.to_thread(run_leg, leg)


class _Printed:
    """What the script prints, kept up to what is left of its output bound, the rest counted."""

    def __init__(self, room: int) -> None:
        self.room = max(room, 0)
        self.parts: list[str] = []
        self.left_out = 0

    def __call__(self, stream: Literal["stdout", "stderr"], text: str) -> None:
        kept = text[: self.room]
        self.parts.append(kept)
        self.room -= len(kept)
        self.left_out += len(text) - len(kept)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class _TooManyCalls(Exception):
    pass


def run_leg(leg: ScriptLegInput) -> ScriptLeg:
    """Run one leg in a sandbox of the pool (blocking)."""
    from pydantic_monty import (
        FutureSnapshot,
        MontyComplete,
        MontyCrashedError,
        MontyError,
        MontyRuntimeError,
        MontySyntaxError,
    )

    printed = _Printed(leg.output_chars_left)
    calls: list[ScriptCall] = []
    started = time.perf_counter()

    def ended(status: Literal["done", "stopped"], **fields: Any) -> ScriptLeg:
        return ScriptLeg(
            status=status,
            printed=printed.text,
            printed_left_out=printed.left_out,
            cpu_seconds=time.perf_counter() - started,
            **fields,
        )

    try:
        with _sandbox().checkout(
            script_name="script.py",
            limits={
                "max_feed_duration_secs": leg.max_cpu_seconds,
                "max_memory": leg.max_memory_bytes,
                "max_suspensions": MAX_SUSPENSIONS,
            },
            # A script that sleeps would hold its sandbox for nothing: sleeps return at once.
            os_policy={"sleep": "zero"},
        ) as session:
            if leg.code is not None:
                snapshot = session.feed_start(leg.code, print_callback=printed)
            else:
                saved = _saved_state(leg)
                if saved is None:
                    return ended("stopped", reason=_state_lost(leg))
                snapshot = session.load_snapshot(saved, print_callback=printed)
                assert isinstance(snapshot, FutureSnapshot), "a script is saved waiting on calls"
                snapshot = snapshot.resume({r.call_id: _answer(r) for r in leg.results})
            snapshot = _drive(snapshot, leg, calls)
            if isinstance(snapshot, MontyComplete):
                return ended("done", value=_rendered(snapshot.output), not_awaited=len(calls))
            state, ref = _keep(snapshot.dump())
            return ScriptLeg(
                status="waiting",
                calls=calls,
                snapshot=state,
                snapshot_ref=ref,
                printed=printed.text,
                printed_left_out=printed.left_out,
                cpu_seconds=time.perf_counter() - started,
            )
    except _TooManyCalls:
        return ended(
            "stopped",
            reason=f"it made more than {leg.max_calls} tool calls "
            "(CodeMode.max_calls); the batch that passed the limit did not run",
        )
    except MontySyntaxError as error:
        return ended(
            "stopped", reason=f"it is not valid Python: {_one_line(error.display('type-msg'))}"
        )
    except MontyRuntimeError as error:
        return ended("stopped", reason=_runtime_reason(error, leg))
    except MontyCrashedError as error:
        return ended("stopped", reason=f"its sandbox process died ({_one_line(str(error))})")
    except MontyError as error:
        return ended("stopped", reason=f"the sandbox refused it: {_one_line(str(error))}")


def _drive(snapshot: Any, leg: ScriptLegInput, calls: list[ScriptCall]) -> Any:
    """Answer the script until it ends or every task of it waits on a call: a tool's call with
    a future (collected in `calls`), anything else as the sandbox's default would."""
    from pydantic_monty import FunctionSnapshot, FutureSnapshot, MontyComplete, NameLookupSnapshot

    tools = set(leg.tools)
    while True:
        if isinstance(snapshot, MontyComplete):
            return snapshot
        if isinstance(snapshot, FutureSnapshot):
            known = {call.call_id for call in calls}
            unknown = [i for i in snapshot.pending_call_ids if i not in known]
            if not unknown:
                return snapshot
            # Nothing this leg started: no tool will answer it.
            snapshot = snapshot.resume(
                {i: {"exception": RuntimeError("this call was lost")} for i in unknown}
            )
            continue
        if isinstance(snapshot, NameLookupSnapshot):
            snapshot = snapshot.resume()  # a NameError in the script
            continue
        assert isinstance(snapshot, FunctionSnapshot)
        if snapshot.is_os_function:
            snapshot = snapshot.resume_not_handled()  # no files, no environment, no clock calls
            continue
        name = str(snapshot.function_name)
        if name not in tools:
            available = ", ".join(sorted(tools)) or "none"
            snapshot = snapshot.resume(
                {"exception": NameError(f"name {name!r} is not defined (the tools: {available})")}
            )
            continue
        if snapshot.args:
            snapshot = snapshot.resume(
                {"exception": TypeError(f"{name}() takes keyword arguments only")}
            )
            continue
        if leg.calls_made + len(calls) >= leg.max_calls:
            raise _TooManyCalls
        arguments = to_jsonable_python(snapshot.kwargs, fallback=str)
        calls.append(ScriptCall(call_id=snapshot.call_id, name=name, arguments=arguments))
        snapshot = snapshot.resume({"future": ...})


def _answer(result: ScriptCallResult) -> Any:
    if result.error is None:
        return {"return_value": result.value}
    error_type = PermissionError if result.error_type == "PermissionError" else RuntimeError
    return {"exception": error_type(result.error)}


def _rendered(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return json.dumps(to_jsonable_python(value, fallback=repr), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _keep(dump: bytes) -> tuple[str | None, str | None]:
    """The saved state as the leg's result carries it: inline, or by reference."""
    state = base64.b64encode(zlib.compress(dump, 6)).decode("ascii")
    if len(state) <= MAX_INLINE_SNAPSHOT_CHARS:
        return state, None
    return None, result_store().put(state)


def _saved_state(leg: ScriptLegInput) -> bytes | None:
    state = leg.snapshot
    if state is None and leg.snapshot_ref is not None:
        state = result_store().get(leg.snapshot_ref)
    if state is None:
        return None
    return zlib.decompress(base64.b64decode(state))


def _state_lost(leg: ScriptLegInput) -> str:
    where = (
        "this worker's result store (the run moved to another worker: give workers a shared "
        "store with AGENT_STORE_URL)"
        if worker_local(result_store())
        else "the result store (it expired)"
    )
    return f"its saved state ({leg.snapshot_ref}) is no longer in {where}"


def _runtime_reason(error: Any, leg: ScriptLegInput) -> str:
    said = _one_line(error.display("type-msg"))
    if said.startswith("TimeoutError: feed time limit exceeded"):
        return (
            f"it ran out of its {leg.max_cpu_seconds:g} s of execution time "
            "(CodeMode.max_cpu_seconds)"
        )
    if said.startswith("MemoryError: memory limit exceeded"):
        mib = leg.max_memory_bytes / 1024**2
        return f"it used more than {mib:g} MiB of memory (CodeMode.max_memory_bytes)"
    frames = error.traceback()
    where = f"line {frames[-1].line}: " if frames else ""
    return f"{where}{said}"


def _one_line(text: str) -> str:
    return bounded(" ".join(text.split()), MAX_REASON_CHARS)
