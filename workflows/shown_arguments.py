"""What a person is shown of a call that waits for their decision: the arguments the tool will
get, field by field.

The tool runs on the arguments as the workflow parsed them (workflows/dispatch.py), never on
the model's raw text, so that is what a person must see. A prefix of the raw text is not: a
`send_email` whose arguments opened with `"to": "a@b.com"`, padded the body and ended with
`"to": "attacker@evil.example"` was shown (cut at 1,000 characters) as an email to a@b.com, and
sent to the attacker. Repeated keys are refused before anyone is asked; here each field of the
parsed arguments is shown, its value cut on its own where it is long, and the text says so up
front, loudly, whenever anything is left out. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .decisions import ShownField, ToolApproval
from .effect_log import MAX_KEPT_ARGUMENT_CHARS, json_chars
from .outcomes import count

FIELD_CHARS = 300
"""A field's value (its JSON) as a waiting call's record keeps it; what is longer is cut."""
MAX_FIELDS = 30
"""Fields a record keeps; the others are counted, and the text says how many are not shown."""
NOT_WHOLE = "NOT SHOWN WHOLE"
PARSED_CHARS = MAX_KEPT_ARGUMENT_CHARS
"""A waiting call's record keeps its parsed arguments whole up to this much JSON, as an effect
of the compensation log keeps them: the records travel in the run's state, across
continue-as-new, so what they keep is bounded."""


def fields_of(arguments: Mapping[str, Any]) -> tuple[list[ShownField], int]:
    """The arguments' fields in the order the model wrote them, each value as JSON cut to
    FIELD_CHARS on its own, and how many fields past MAX_FIELDS are left out."""
    shown = []
    for name, value in list(arguments.items())[:MAX_FIELDS]:
        text = json.dumps(value, ensure_ascii=False)
        shown.append(ShownField(name=name, value=text[:FIELD_CHARS], chars=len(text)))
    return shown, max(len(arguments) - MAX_FIELDS, 0)


def parsed(arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """The arguments whole, for the record's `parsed_arguments`; None over PARSED_CHARS."""
    return dict(arguments) if json_chars(arguments) <= PARSED_CHARS else None


def text(fields: Sequence[ShownField], left_out: int, field_chars: int = FIELD_CHARS) -> str:
    """One line: the fields as a JSON object, each value cut to `field_chars` on its own (a
    cut one ends in `…`), after a warning that names what is not shown whole."""
    warning, shown = parts(fields, left_out, field_chars)
    return shown if warning is None else f"{warning}: {shown}"


def parts(
    fields: Sequence[ShownField], left_out: int, field_chars: int = FIELD_CHARS
) -> tuple[str | None, str]:
    """`text`'s two parts: the warning (None when all is shown) and the fields."""
    shown, cut = [], []
    for field in fields:
        value = field.value[:field_chars]
        if len(value) < field.chars:
            cut.append(
                f"{json.dumps(field.name, ensure_ascii=False)} has {field.chars:,} characters"
            )
            value += "…"
        shown.append(f"{json.dumps(field.name, ensure_ascii=False)}: {value}")
    if left_out:
        cut.append(f"{count(left_out, 'more field')} not shown")
    warning = f"{NOT_WHOLE} ({'; '.join(cut)})" if cut else None
    return warning, "{" + ", ".join(shown) + "}"


def whole(fields: Sequence[ShownField], left_out: int) -> bool:
    return not left_out and all(len(field.value) >= field.chars for field in fields)


def of_approval(approval: ToolApproval, field_chars: int = FIELD_CHARS) -> tuple[str | None, str]:
    """A waiting call's arguments for a line of `field_chars` a field: the warning (None when
    all is shown) and the fields. An approval recorded before 0.2.0 has only the model's
    text: its prefix, as it was shown then, with a warning when it was cut."""
    if approval.fields or approval.fields_left_out:
        return parts(approval.fields, approval.fields_left_out, field_chars)
    raw = approval.arguments
    return ("(cut)" if len(raw) > field_chars else None), raw[:field_chars]
