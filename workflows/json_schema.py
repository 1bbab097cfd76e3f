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

No check does I/O. The engine resolves a schema's root `$schema` to find its meta-schema, and
fetched one it does not carry over HTTP, from inside the workflow task, again at every replay: a
blind request from the worker's network position (internal services, cloud metadata), whose
answer was then trusted, and an unreachable one raised an error that wedged the run. So a schema
may declare no `$schema` or Draft 2020-12's, the draft the checks implement (another is refused,
naming it: `foreign_dialect`); every lookup goes to a registry or a retriever that refuses, and
every error of the engine is the typed refusal, SchemaRefused.

A run recorded before this engine (no `linear-schema-checks` marker: versioning.py) keeps the
`jsonschema` package for its output schema, so that it replays the decisions it made. The
loop's own schemas (finish's default, submit_plan's, delegate's) have no patterns, and both
engines agree on them. Deterministic: both are pure computation, and nothing is fetched (an
external `$ref` is refused before a validator is built).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import Any

import jsonschema
from temporalio import workflow

from .outcomes import bounded

with workflow.unsafe.imports_passed_through():
    import jsonschema_rs

MAX_REPORTED_PROBLEMS = 10
"""Problems of one instance told to the model; it fixes those and is told the rest next."""
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
"""The one dialect a schema may declare (`$schema`), or none: the one the checks implement."""
BUILT_IN_DIALECTS = frozenset(
    f"{scheme}://json-schema.org/{path}"
    for scheme in ("http", "https")
    for path in (
        "draft-04/schema",
        "draft-06/schema",
        "draft-07/schema",
        "draft/2019-09/schema",
        "draft/2020-12/schema",
    )
)
"""The meta-schemas the engine carries: nothing is fetched to read them."""
_LINEAR_PATTERNS = jsonschema_rs.RegexOptions()


class SchemaRefused(ValueError):
    """A schema this module cannot check with: its message says why, for the run's failure."""


def _no_fetching(uri: str) -> Any:
    raise ValueError(f"a workflow does not fetch schemas ({uri})")


_NOTHING_FETCHED = jsonschema_rs.Registry([], retriever=_no_fetching)
"""Where the meta-schema check looks up what a schema names: the engine's own, never the network."""


def foreign_dialect(schema: Any) -> str | None:
    """The root `$schema` of `schema` when it names another dialect than Draft 2020-12 (as
    JSON); None when it names that one, or none."""
    if not isinstance(schema, dict) or "$schema" not in schema:
        return None
    declared = schema["$schema"]
    if isinstance(declared, str) and declared.rstrip("#") in (
        DRAFT_2020_12,
        DRAFT_2020_12.replace("https:", "http:", 1),
    ):
        return None
    return bounded(json.dumps(declared))


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


def check(
    schema: dict[str, Any], *, linear: bool = True, foreign_dialects_refused: bool = True
) -> None:
    """Raise SchemaRefused when `schema` is not a valid Draft 2020-12 schema, or (`linear`)
    declares another dialect, refers outside itself or has a pattern the linear-time engine
    cannot match. `linear` False: validity alone, by the `jsonschema` package, as runs recorded
    before the engine checked. `foreign_dialects_refused` False: as runs recorded before the
    dialect was checked, one the engine carries is read, and another is left out (they fetched
    it) rather than refused."""
    if not linear:
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as error:
            raise SchemaRefused(f"is not a valid JSON schema: {error.message}") from None
        return
    try:
        _check_linear(schema, foreign_dialects_refused)
    except SchemaRefused:
        raise
    except Exception as error:  # whatever the engine raises is the schema's refusal
        message = getattr(error, "message", None) or str(error)
        raise SchemaRefused(f"cannot be used: {bounded(message)}") from None


def _check_linear(schema: dict[str, Any], foreign_dialects_refused: bool) -> None:
    if (dialect := foreign_dialect(schema)) is not None:
        if foreign_dialects_refused:
            raise SchemaRefused(
                f"declares $schema {dialect}: only JSON Schema Draft 2020-12 is checked here, "
                f'and nothing is fetched; leave $schema out, or set it to "{DRAFT_2020_12}"'
            )
        declared = schema["$schema"]
        if not isinstance(declared, str) or declared.rstrip("#") not in BUILT_IN_DIALECTS:
            schema = {key: value for key, value in schema.items() if key != "$schema"}
    try:
        jsonschema_rs.meta.validate(schema, registry=_NOTHING_FETCHED)
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
            if (invalid := _not_a_regex(pattern)) is not None:
                raise SchemaRefused(
                    f"has the pattern {bounded(repr(pattern))}, which is not a regular "
                    f"expression: {invalid}"
                ) from None
            raise SchemaRefused(
                f"has the pattern {bounded(repr(pattern))}, which cannot be matched in linear "
                "time: backreferences and lookaround are not supported (a backtracking match of "
                "the model's text could hold the worker for minutes); rewrite it without them"
            ) from None
    try:
        _validator(_canonical(schema))
    except jsonschema_rs.ValidationError as error:
        raise SchemaRefused(f"cannot be used: {bounded(error.message)}") from None


def _not_a_regex(pattern: str) -> str | None:
    """Why `pattern` is no regular expression at all (Python's parser, which reads what the
    linear engine reads and more, says so), rather than one that engine cannot match; None when
    it is one (or too deep for the parser to say)."""
    try:
        re.compile(pattern)
    except re.error as error:
        return str(error)
    except (RecursionError, OverflowError):
        return None
    return None


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


@functools.lru_cache(maxsize=64)
def _validator(canonical: str) -> Any:
    """A validator of the schema (as `_canonical` wrote it), built once per worker."""
    return jsonschema_rs.Draft202012Validator(
        json.loads(canonical),
        validate_formats=False,
        pattern_options=_LINEAR_PATTERNS,
        retriever=_no_fetching,
    )
