"""Console plumbing that every command line of the project shares (starter.py, worker.py, the
benchmarks): a bad command line is one line on stderr and exit status 2, people's messages go to
stderr so that stdout carries only the answer or the JSON, every message names the command as
it was typed (`program`: `durable-agent`, or `starter.py` in the checkout), and the process exits
without the interpreter's teardown. Nothing here knows about runs."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, NoReturn

import click

_program: ContextVar[str] = ContextVar("program", default="starter.py")


def program() -> str:
    """The command as this process was invoked (`durable-agent`, `starter.py`), for the usage
    lines, the errors and the commands a message tells a person to paste. "starter.py" when
    the CLI is called from Python (the tests), where no command was typed."""
    return _program.get()


def invoked_as(name: str) -> None:
    """Name the command `name` in this context's messages (`program`)."""
    _program.set(name)


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


class CommandLineError(SystemExit):
    """A command line that cannot be used: its one line is on stderr already."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """The benchmarks' parser: one line on stderr and exit status 2, as `parse` does."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise CommandLineError(2)


class _Help(click.HelpFormatter):
    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        super().write_usage(prog, args, "usage: ")


class Argument(click.Argument):
    """A positional argument, named in messages by what it is (`the prompt`)."""

    def __init__(self, param_decls: Sequence[str], said_as: str, **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self.said_as = said_as


def said_as(param: click.Parameter | None) -> str:
    """How a message names a parameter: an argument by what it is, an option by its flag."""
    if isinstance(param, Argument):
        return param.said_as
    return param.opts[0] if param is not None else "the value"


class Command(click.Command):
    """A command whose --help (or -h) starts `usage:` and shows each option's default and
    environment variable."""

    context_class = type("Context", (click.Context,), {"formatter_class": _Help})


def parse(command: click.Command, prog: str, argv: Sequence[str]) -> Any:
    """What `command`'s callback makes of `argv`. A bad command line (click's own errors, and
    the `click.UsageError`s of the command's rules) is `PROG: error: REASON (see --help)` on
    stderr and CommandLineError(2); --help is CommandLineError(0) once printed. Every word that
    reaches the command as text is UTF-8: other bytes of argv, which Python keeps as lone
    surrogates, would fail only when sent."""
    try:
        settings: dict[str, Any] = {"help_option_names": ["-h", "--help"], "show_default": True}
        with command.make_context(prog, list(argv), max_content_width=100, **settings) as ctx:
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
            raise click.UsageError(f"{what} is not UTF-8 text: {bad_byte(error)}") from None
        except UnicodeEncodeError:
            pass  # a surrogate that no byte of argv stands for
        raise click.UsageError(f"{what} is not UTF-8 text") from None


def bad_byte(error: UnicodeDecodeError) -> str:
    return f"byte 0x{error.object[error.start]:02x} at offset {error.start}"


def say(line: str) -> None:
    """A line for the person at the terminal: on stderr, at once."""
    print(line, file=sys.stderr, flush=True)


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
