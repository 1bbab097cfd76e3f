"""JSON Schema inside the workflow: a run's output schema checked as it starts, and the
arguments of finish, submit_plan and delegate checked against their schemas.

The model writes the instance, and a prompt injection can pick it, so the check must take time
bounded by the size of what is checked, whatever the schema. Python's `re`, which the
`jsonschema` package matches `pattern` and `patternProperties` with, backtracks: `^(a+)+$`
against thirty `a`s and a `!` takes minutes, and inside a workflow that holds the worker's
thread (every other run it serves waits, and every retry of the task replays the same match).
So the checks run on jsonschema-rs with its linear-time regex engine (Rust's `regex` crate): a
match is linear in the text. That engine has no backreferences or lookaround, so a schema that
uses them is refused as the run starts, naming the pattern, instead of being matched slowly.

A run recorded before this engine (no `linear-schema-checks` marker: versioning.py) keeps the
`jsonschema` package for its output schema, so that it replays the decisions it made. The
loop's own schemas (finish's default, submit_plan's, delegate's) have no patterns, and both
engines agree on them. Deterministic: both are pure computation, and nothing is fetched (an
external `$ref` is refused before a validator is built).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

import jsonschema
from temporalio import workflow

from .outcomes import bounded

with workflow.unsafe.imports_passed_through():
    import jsonschema_rs

MAX_REPORTED_PROBLEMS = 10
"""Problems of one instance told to the model; it fixes those and is told the rest next."""
_LINEAR_PATTERNS = jsonschema_rs.RegexOptions()


class SchemaRefused(ValueError):
    """A schema this module cannot check with: its message says why, for the run's failure."""


def problems(schema: dict[str, Any], instance: Any, *, linear: bool = True) -> str:
    """Every way `instance` fails `schema`, path by path, in a stable order; '' if none.
    `linear` False: the `jsonschema` package, as runs recorded before the linear engine did."""
    if linear:
        found = [
            (list(error.instance_path), error.message)
            for error in _validator(_canonical(schema)).iter_errors(instance)
        ]
    else:
        found = [
            (list(error.absolute_path), error.message)
            for error in jsonschema.Draft202012Validator(schema).iter_errors(instance)
        ]
    found.sort(key=lambda problem: [str(part) for part in problem[0]])
    return "; ".join(
        f"{bounded('.'.join(str(p) for p in path)) or '(answer)'}: {bounded(message)}"
        for path, message in found[:MAX_REPORTED_PROBLEMS]
    )


def check(schema: dict[str, Any], *, linear: bool = True) -> None:
    """Raise SchemaRefused when `schema` is not a valid Draft 2020-12 schema, or (`linear`)
    refers outside itself or has a pattern the linear-time engine cannot match. `linear` False:
    validity alone, by the `jsonschema` package, as runs recorded before the engine checked."""
    if not linear:
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as error:
            raise SchemaRefused(f"is not a valid JSON schema: {error.message}") from None
        return
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as error:
        raise SchemaRefused(f"is not a valid JSON schema: {bounded(error.message)}") from None
    if external := external_refs(schema):
        # Checking against it would need to fetch them, which a workflow cannot.
        raise SchemaRefused(
            f"refers outside itself ($ref {', '.join(external)}); a workflow cannot fetch "
            "schemas: inline them under $defs"
        )
    for pattern in patterns(schema):
        try:
            jsonschema_rs.Draft202012Validator(
                {"pattern": pattern}, pattern_options=_LINEAR_PATTERNS
            )
        except jsonschema_rs.ValidationError:
            raise SchemaRefused(
                f"has the pattern {bounded(repr(pattern))}, which cannot be matched in linear "
                "time: backreferences and lookaround are not supported (a backtracking match of "
                "the model's text could hold the worker for minutes); rewrite it without them"
            ) from None
    try:
        _validator(_canonical(schema))
    except jsonschema_rs.ValidationError as error:
        raise SchemaRefused(f"cannot be used: {bounded(error.message)}") from None


def external_refs(schema: Any) -> list[str]:
    """Every `$ref` in a schema that points outside it (anything but `#...`)."""
    return sorted(
        {
            item["$ref"]
            for item in _walk(schema)
            if isinstance(item.get("$ref"), str) and not item["$ref"].startswith("#")
        }
    )


def patterns(schema: Any) -> list[str]:
    """The regular expressions a schema matches strings against, in the order they appear."""
    found: list[str] = []
    for item in _walk(schema):
        if isinstance(pattern := item.get("pattern"), str):
            found.append(pattern)
        if isinstance(by_pattern := item.get("patternProperties"), dict):
            found.extend(key for key in by_pattern if isinstance(key, str))
    return found


def _walk(schema: Any) -> Iterable[dict[str, Any]]:
    """Every object in a schema, without recursion (a schema may nest deep)."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _canonical(schema: dict[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _no_fetching(uri: str) -> Any:
    raise ValueError(f"a workflow does not fetch schemas ({uri})")


@functools.lru_cache(maxsize=64)
def _validator(canonical: str) -> Any:
    """A validator of the schema (as `_canonical` wrote it), built once per worker."""
    return jsonschema_rs.Draft202012Validator(
        json.loads(canonical),
        validate_formats=False,
        pattern_options=_LINEAR_PATTERNS,
        retriever=_no_fetching,
    )
