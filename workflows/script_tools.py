"""run_code, code mode's one tool: its spec, which shows the model the run's tools as Python.

The rule of this room: the model learns what a script may call from the same specs it sees as
tools, written as Python: one `async def` a tool, with typed keyword parameters (from the JSON
Schema of its arguments) and its description as the docstring, and what a script may not do.
Nothing here runs a script (workflows/code_mode.py does, through activities/scripts.py). Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from .inputs import CodeMode
from .specs import ToolSpec

RUN_CODE = "run_code"
"""The tool's name: the model calls it with one argument, `code`."""
RUN_SCRIPT = "run_script"
"""The activity that runs one leg of a script (activities/scripts.py)."""
RUN_CODE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "minLength": 1,
            "description": "The Python script to run.",
        }
    },
    "required": ["code"],
    "additionalProperties": False,
}
MAX_DESCRIBED_CHARS = 1_500
"""Each tool's docstring in run_code's description, at most: the model reads the whole list."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}


def run_code_spec(tools: Iterable[ToolSpec], mode: CodeMode) -> ToolSpec:
    """run_code, describing the functions a script may call: `tools`, as Python."""
    callable_tools = [spec for spec in tools if script_callable(spec)]
    functions = "\n\n".join(python_function(spec) for spec in callable_tools)
    description = (
        "Run a Python script that calls your tools as functions, and read what it prints and "
        "the value of its last expression. Use it for work of many calls: look up many "
        "records and add them up, try one thing and then another, keep only what you need. "
        "Each function below is async and takes keyword arguments only: "
        '`orders = await search_orders(email="a@b.com")`; run independent calls at once with '
        "`await asyncio.gather(f(a=1), f(a=2))` (after `import asyncio`). A result is data "
        "(a dict or a list) when the tool returns JSON, else text. A call that fails raises "
        "RuntimeError, and one a person denies raises PermissionError, with the text you "
        "would have read: catch them to go on. Every call runs as if you had made it "
        "yourself: it may wait for a person's approval, and what changes data is undone if "
        "the run fails.\n"
        "The script runs in a sandbox: a subset of Python (no third-party packages; modules: "
        "asyncio, json, math, re, datetime, collections, itertools, functools and a few "
        "more), with no files, network or environment. Limits: "
        f"{mode.max_cpu_seconds:g} s of execution, {mode.max_memory_bytes // 1024**2:,} MiB "
        f"of memory, {mode.max_calls:,} calls, {mode.max_output_chars:,} characters of "
        "output; past one, the script stops and you read why.\n\n"
        f"The functions:\n\n{functions}"
    )
    return ToolSpec(
        name=RUN_CODE,
        description=description,
        parameters=RUN_CODE_PARAMETERS,
        # Runs alone and in the model's order, as a call that changes data does: a script may
        # change data. Its calls ask for their own approvals, so the script itself asks none.
        side_effects=True,
        needs_approval=False,
        max_result_chars=mode.max_output_chars,
    )


def script_callable(spec: ToolSpec) -> bool:
    """Whether a script may call the tool: the run's own tools that run as activities (a
    callback tool waits for a client, a name that is not an identifier cannot be called)."""
    return not spec.callback and _IDENTIFIER.fullmatch(spec.name) is not None


def python_function(spec: ToolSpec) -> str:
    """A tool as the stub of an async Python function, its description the docstring."""
    properties = spec.parameters.get("properties") or {}
    required = set(spec.parameters.get("required") or [])
    defs = spec.parameters.get("$defs") or {}
    parameters = []
    for name, schema in properties.items():
        if not _IDENTIFIER.fullmatch(name) or not isinstance(schema, dict):
            continue
        annotation = python_type(schema, defs)
        if name in required:
            parameters.append(f"{name}: {annotation}")
        else:
            default = schema.get("default")
            parameters.append(f"{name}: {annotation} = {_literal(default)}")
    described = [spec.description.strip() or spec.name]
    arguments = [
        f"    {name}: {schema['description']}"
        for name, schema in properties.items()
        if isinstance(schema, dict) and isinstance(schema.get("description"), str)
    ]
    if arguments:
        described.append("Args:\n" + "\n".join(arguments))
    docstring = "\n\n".join(described)
    if len(docstring) > MAX_DESCRIBED_CHARS:
        docstring = docstring[: MAX_DESCRIBED_CHARS - 3] + "..."
    docstring = docstring.replace('"""', "'''")
    indented = "\n".join(f"    {line}" if line else "" for line in docstring.splitlines())
    keyword = ["*", *parameters] if parameters else []
    return f'async def {spec.name}({", ".join(keyword)}) -> Any:\n    """\n{indented}\n    """'


def python_type(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> str:
    """The Python annotation of a JSON Schema, as far as a reader needs it."""
    if depth > 4:
        return "Any"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.removeprefix("#/$defs/"))
        return python_type(target, defs, depth + 1) if isinstance(target, dict) else "Any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return f"Literal[{', '.join(_literal(value) for value in schema['enum'])}]"
    if "const" in schema:
        return f"Literal[{_literal(schema['const'])}]"
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list):
        kinds = [python_type(o, defs, depth + 1) for o in options if isinstance(o, dict)]
        return " | ".join(dict.fromkeys(kinds)) or "Any"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(python_type({**schema, "type": k}, defs, depth + 1) for k in kind)
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        items = schema.get("items")
        inner = python_type(items, defs, depth + 1) if isinstance(items, dict) else "Any"
        return f"list[{inner}]"
    if kind == "object":
        values = schema.get("additionalProperties")
        inner = python_type(values, defs, depth + 1) if isinstance(values, dict) else "Any"
        return f"dict[str, {inner}]"
    return "Any"


def _literal(value: Any) -> str:
    """A JSON value as Python source."""
    if value is None or isinstance(value, bool):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)
