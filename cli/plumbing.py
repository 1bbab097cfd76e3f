"""Console plumbing that every command line of the project shares (starter.py, worker.py, the
benchmarks): a bad command line is one line on stderr and exit status 2, people's messages go to
stderr so that stdout carries only the answer or the JSON, and the process exits without the
interpreter's teardown. Nothing here knows about runs."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys


class CommandLineError(SystemExit):
    """A command line that cannot be used: its one line is on stderr already."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """Bad command lines get one line on stderr and exit status 2, not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise CommandLineError(2)


def temporal_address(explicit: str | None) -> str | None:
    """--address, else $TEMPORAL_ADDRESS, else None (an empty value counts as none)."""
    return explicit or os.environ.get("TEMPORAL_ADDRESS") or None


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
