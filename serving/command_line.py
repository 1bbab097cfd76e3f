"""How every program of the project meets its command line: `durable-agent` (cli/), the codec
server, the benchmarks and the tests' worker processes. Each declares its options with click and
parses them here, so that they all behave alike: a bad command line is one line on stderr, `PROG:
error: REASON (see --help)`, and exit status 2, PROG the command as it was typed; --help (or -h)
starts `usage:` and shows each option's default and environment variable; messages for people go
to stderr, so that stdout carries only the answer or the JSON. Here, not in cli/, because the
library's codec server uses it too, and the library never imports the CLI. Nothing here knows
about runs."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from ..workflows.visible_text import visible


class CommandLineError(SystemExit):
    """A command line that cannot be used: its one line is on stderr already."""


def refuse(message: str) -> NoReturn:
    """A command line that breaks one of its command's rules: one line, exit status 2."""
    raise click.UsageError(message)


class Argument(click.Argument):
    """A positional argument, named in messages by what it is (`the prompt`)."""

    def __init__(self, param_decls: Sequence[str], said_as: str, **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self.said_as = said_as


class Several(click.Option):
    """An option that takes several values after one flag (`--steps 5 10 20`), up to the next
    word that starts with `-`; given again, it adds to them."""

    def __init__(self, param_decls: Sequence[str], **attrs: Any) -> None:
        super().__init__(param_decls, multiple=True, **attrs)


def said_as(param: click.Parameter | None) -> str:
    """How a message names a parameter: an argument by what it is, an option by its flag."""
    if isinstance(param, Argument):
        return param.said_as
    return param.opts[0] if param is not None else "the value"


class _Help(click.HelpFormatter):
    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, args, "usage: ")


class Command(click.Command):
    """A command whose --help (or -h) starts `usage:` and shows each option's default and
    environment variable."""

    context_class = type("Context", (click.Context,), {"formatter_class": _Help})

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # click gives an option a fixed number of values: `--steps 5 10` is said to it as
        # `--steps 5 --steps 10`.
        several = {flag for p in self.params if isinstance(p, Several) for flag in p.opts}
        words: list[str] = []
        flag, given = None, False
        for word in args:
            if flag is not None and not word.startswith("-"):
                words += [flag, word]
                given = True
                continue
            if flag is not None and not given:
                words.append(flag)  # no value: click says so
            flag, given = (word, False) if word in several else (None, False)
            if flag is None:
                words.append(word)
        if flag is not None and not given:
            words.append(flag)
        return super().parse_args(ctx, words)


def parse(
    command: click.Command, argv: Sequence[str] | None = None, prog: str | None = None
) -> Any:
    """What `command`'s callback makes of `argv` (default: this process's), its messages naming
    the program `prog` (default: as it was typed). A bad command line (click's own errors, and
    the `click.UsageError`s of the command's rules) is `PROG: error: REASON (see --help)` on
    stderr and CommandLineError(2); --help is CommandLineError(0) once printed. Every word that
    reaches the command as text is UTF-8: other bytes of argv, which Python keeps as lone
    surrogates, would fail only when sent."""
    prog = prog or invoked_name()
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        settings: dict[str, Any] = {"help_option_names": ["-h", "--help"], "show_default": True}
        with command.make_context(prog, words, max_content_width=100, **settings) as ctx:
            for param in command.params:
                value = ctx.params.get(param.name or "")
                for word in value if isinstance(value, tuple) else (value,):
                    if isinstance(word, str):
                        check_utf8(said_as(param), word)
            return command.invoke(ctx)
    except click.exceptions.Exit as done:
        raise CommandLineError(done.exit_code) from None
    except click.ClickException as error:
        sys.stderr.write(f"{prog}: error: {error.format_message().rstrip('.')} (see --help)\n")
        raise CommandLineError(2) from None


def check_utf8(what: str, text: str) -> None:
    """UsageError naming the first byte of `text` that is not UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:  # the bytes argv had, back, to name the first that is not UTF-8
            text.encode("utf-8", "surrogateescape").decode("utf-8")
        except UnicodeDecodeError as error:
            refuse(f"{what} is not UTF-8 text: {bad_byte(error)}")
        except UnicodeEncodeError:
            pass  # a surrogate that no byte of argv stands for
        refuse(f"{what} is not UTF-8 text")


def bad_byte(error: UnicodeDecodeError) -> str:
    return f"byte 0x{error.object[error.start]:02x} at offset {error.start}"


def invoked_name() -> str:
    """How a person typed this process's command, to type it again: the script's name
    (`durable-agent` on the PATH, `starter.py` in the checkout), or `python -m MODULE`."""
    main = sys.modules.get("__main__")
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    package = getattr(main, "__package__", None)
    if not package:  # a script: the console script or the checkout's file
        return script or "durable-agent"
    module = os.path.splitext(script)[0]
    return f"python -m {package if module == '__main__' else f'{package}.{module}'}"


def say(line: str) -> None:
    """A line for the person at the terminal: on stderr, at once, each character that would
    act on the terminal shown as its escape (workflows/visible_text.py): a model's words are in
    many lines."""
    print(visible(line, lines=True), file=sys.stderr, flush=True)


def for_stdout(text: str) -> str:
    """An answer for stdout: as it is for a pipe or a file, whose reader wants the model's own
    bytes; `visible`, its lines kept, for a terminal (as `ls` shows a file's name)."""
    return visible(text, lines=True) if sys.stdout.isatty() else text


def one_line(error: BaseException) -> str:
    """An error's message (its first line), for a one-line report."""
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else ""


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown, once everything is printed: the Temporal SDK's
    Rust threads can abort that teardown with "PyGILState_Release: thread state ... must be
    current" (temporalio/sdk-python#300), turning a clean exit into status 134."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    logging.shutdown()
    os._exit(code)
