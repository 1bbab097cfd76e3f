"""read_result: the tool that pages through a result too large to show whole.

The loop offers it once a result was externalised (workflows/builtin_tools.py names it); the
text comes from the worker's result store (activities/result_store.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from ..workflows.builtin_tools import READ_RESULT
from .result_store import result_store, worker_local
from .tools import tool

MAX_READ = 6_000
"""The most characters one read_result call returns: always under a result's own bound."""


@tool(name=READ_RESULT, max_result_chars=MAX_READ + 500)
def read_result(
    ref: Annotated[str, Field(description="The reference a shortened result gave, e.g. r-3f2a...")],
    offset: Annotated[int, Field(ge=0, description="First character to return, from 0.")] = 0,
    length: Annotated[
        int, Field(gt=0, le=MAX_READ, description=f"How many characters, at most {MAX_READ}.")
    ] = 4_000,
) -> dict[str, Any]:
    """Read part of a tool result that was too large to show whole.

    A shortened result shows its start and end, its full size and a ref. Use this to read the
    part you need: characters offset to offset+length (at most 6,000 at a time). Returns ref,
    offset, length (as returned), total_chars and text. Page forward by calling again with
    offset increased by length. A ref that is not found (a result stored on another worker, or
    expired) gives found=false and a message: then call the tool that returned it again.
    """
    store = result_store()
    text = store.get(ref)
    if text is None:
        return {"found": False, "ref": ref, "message": not_found_message(ref, worker_local(store))}
    part = text[offset : offset + length]
    return {
        "found": True,
        "ref": ref,
        "offset": offset,
        "length": len(part),
        "total_chars": len(text),
        "text": part,
    }


def not_found_message(ref: str, this_worker_only: bool) -> str:
    """Why a ref may be missing, and what to do: a prompt for the model, kept short."""
    where = "this worker has no result" if this_worker_only else "no stored result"
    why = (
        "it was stored on another worker (the run moved) or has expired"
        if this_worker_only
        else "it has expired"
    )
    return (
        f"{where} {ref!r}: {why}, or the ref is not exactly as the result gave it. Call the "
        "tool that returned it again for what you need."
    )
