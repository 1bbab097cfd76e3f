"""Text a model (or any stranger) wrote, as a person may be shown it: each character that is not
printable as its escape. A prompt-injected reply is the text a person reads before deciding, at
the CLI (serving/command_line.py), in the Web UI's details (reporting.py) and in the console
(which does the same in JavaScript). Pure."""

from __future__ import annotations


def visible(text: str, *, lines: bool = False) -> str:
    """`text` with each character that is not printable (ESC, CR, a backspace, a bidi override
    or isolate, a line separator...) as its escape (`\\x1b`, `\\u202e`), so that the text cannot
    move a terminal's cursor, hide or rewrite what is on the screen, reorder what a person reads,
    or forge a line of a question: a plan step with a newline shows as one step. Newlines and
    tabs are kept when `lines` (a message's, an answer's own lines)."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or (lines and c in "\n\t") else c.encode("unicode_escape").decode()
        for c in text
    )
