"""The command line, parsed into one frozen object per command: a run (`RunArgs`), each
subcommand (`ApprovePlan`, ..., `Stats`) and `Serve` (`worker`). Every check of the command line
happens here, so a command never sees an argument it cannot use: a bad one is one line on stderr
and exit status 2 (`CommandLineError`). Nothing here connects to a server."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, cast, get_args

from pydantic import TypeAdapter, ValidationError

from ..activities.mcp_config import MCP_CONFIG_VARIABLE, McpConfig, mcp_config_from
from ..activities.toolkits import DEMO_TOOLS
from ..encryption import payload_codec
from ..workflows.errors import AgentConfigurationError
from ..workflows.input_limits import (
    InputTooLarge,
    check_comment,
    check_message,
    check_reason,
)
from ..workflows.inputs import (
    DEFAULT_TASK_QUEUE,
    Limits,
    ModelSettings,
    ReasoningEffort,
    ScriptedTurn,
)
from ..workflows.providers import CATALOGUE, KEYED_PROVIDERS, PROVIDERS, Provider
from .plumbing import (
    CommandLineError,
    OneLineArgumentParser,
    say,
    temporal_address,
)

DEFAULT_STATS_LIMIT = 500
DEFAULT_EVAL_LIMIT = 10
SERVE = "worker"
"""The first word that serves runs instead (`durable-agent worker`, `starter.py worker`)."""
CHAT = "chat"
"""The first word that starts a conversation at the terminal (`starter.py chat`)."""
STDIN = "-"
"""The prompt that says: read it from standard input."""
_SCRIPT_ADAPTER = TypeAdapter(list[ScriptedTurn])

_DEFAULT_MODELS = ", ".join(
    f"{p} {f.default_model}" for p, f in CATALOGUE.items() if f.key_variable
)
"""The real providers' default models, as --model's help names them."""


@dataclass(frozen=True, kw_only=True)
class RunArgs:
    """A run to start and follow: `starter.py "PROMPT" [options]`."""

    command: ClassVar[str] = "run"
    prompt: str
    provider: Provider
    """--provider, else the provider whose key is set, else the scripted demo."""
    model: str
    """--model, else the provider's default model."""
    script: tuple[ScriptedTurn, ...] | None
    """The scripted provider's conversation from --script; None plays the built-in demo."""
    max_steps: int
    max_cost_usd: float | None
    plan: bool
    approve_all: bool
    allow: tuple[str, ...]
    label: str | None
    system: str | None
    """--system, else the support demo's system prompt when the demo's tools are served."""
    tools: tuple[str, ...]
    """--tools: the modules and toolkits the embedded worker loads; () for the demo's tools."""
    address: str | None
    """None: self-contained, on an embedded dev server with an in-process worker."""
    namespace: str
    task_queue: str
    no_wait: bool
    json: bool
    trace: bool
    linger: bool
    mcp_config: McpConfig | None = None
    """--mcp-config (or AGENT_MCP_CONFIG): MCP servers for the embedded worker's runs."""
    conversation: bool = False
    """--conversation (and `chat`): the run is a conversation (docs/conversations.md)."""
    chat: bool = False
    """`chat`: every line typed is a turn (or steers the working turn); the prompt, when not
    given, is the first line."""
    thinking_budget: int | None = None
    """--thinking-budget: Anthropic extended thinking's budget_tokens."""
    reasoning_effort: ReasoningEffort | None = None
    """--reasoning-effort: openai-responses' reasoning.effort, Anthropic's output_config.effort."""
    stream: bool = False
    """--stream, else on when stderr is a terminal (and not --json): print the model's text as
    it is written."""


@dataclass(frozen=True, kw_only=True)
class OnServer:
    """What every subcommand has: the server its runs live on, and whether to print JSON."""

    command: ClassVar[str]
    address: str
    namespace: str
    json: bool


@dataclass(frozen=True, kw_only=True)
class OfRun(OnServer):
    """A subcommand about one run."""

    workflow_id: str


@dataclass(frozen=True, kw_only=True)
class ApprovePlan(OfRun):
    command: ClassVar[str] = "approve"
    comment: str | None
    version: int | None


@dataclass(frozen=True, kw_only=True)
class RejectPlan(OfRun):
    command: ClassVar[str] = "reject"
    feedback: str
    version: int | None


@dataclass(frozen=True, kw_only=True)
class ApproveCall(OfRun):
    command: ClassVar[str] = "approve-call"
    call_id: str
    remember: bool
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class DenyCall(OfRun):
    command: ClassVar[str] = "deny-call"
    call_id: str
    remember: bool
    reason: str


@dataclass(frozen=True, kw_only=True)
class ListCalls(OfRun):
    command: ClassVar[str] = "calls"


@dataclass(frozen=True, kw_only=True)
class Watch(OfRun):
    command: ClassVar[str] = "watch"
    from_offset: int


@dataclass(frozen=True, kw_only=True)
class Status(OfRun):
    command: ClassVar[str] = "status"


@dataclass(frozen=True, kw_only=True)
class ListWaiting(OnServer):
    command: ClassVar[str] = "list"


@dataclass(frozen=True, kw_only=True)
class Result(OfRun):
    command: ClassVar[str] = "result"
    trace: bool


@dataclass(frozen=True, kw_only=True)
class Trace(OfRun):
    command: ClassVar[str] = "trace"


@dataclass(frozen=True, kw_only=True)
class Stats(OnServer):
    command: ClassVar[str] = "stats"
    label: str | None
    limit: int


@dataclass(frozen=True, kw_only=True)
class Send(OfRun):
    command: ClassVar[str] = "send"
    text: str
    wait: bool


@dataclass(frozen=True, kw_only=True)
class Interrupt(OfRun):
    command: ClassVar[str] = "interrupt"


@dataclass(frozen=True, kw_only=True)
class End(OfRun):
    command: ClassVar[str] = "end"


@dataclass(frozen=True, kw_only=True)
class ForkOptions:
    """The run options a fork and an evaluation's forks take (`_FORKED_RUN_OPTIONS`)."""

    max_steps: int | None
    """None: the original's limits (counted from the fork point)."""
    approve_all: bool
    allow: tuple[str, ...]
    task_queue: str | None
    """None: the original's."""


@dataclass(frozen=True, kw_only=True)
class Fork(OfRun, ForkOptions):
    """`fork WORKFLOW_ID --step K`: a new run from the run's step K, followed like a run."""

    command: ClassVar[str] = "fork"
    step: int
    provider: Provider | None
    """None: the original's model, or with --model only, the original's provider."""
    model: str | None
    script: tuple[ScriptedTurn, ...] | None
    """The scripted fork's replies from step K + 1."""
    system: str | None
    max_cost_usd: float | None
    label: str | None
    no_wait: bool
    trace: bool


@dataclass(frozen=True, kw_only=True)
class Diff(OnServer):
    command: ClassVar[str] = "diff"
    workflow_a: str
    workflow_b: str


@dataclass(frozen=True, kw_only=True)
class Eval(OnServer, ForkOptions):
    """`eval --label L --fork-step K --provider P --model M`: fork a label's recent runs."""

    command: ClassVar[str] = "eval"
    label: str
    fork_step: int
    provider: Provider
    model: str
    limit: int
    score: str | None
    """`module:function`, checked to be importable and callable here."""


@dataclass(frozen=True)
class Serve:
    """`worker [--address ...]`: serve runs; worker.py parses the rest."""

    command: ClassVar[str] = SERVE
    argv: tuple[str, ...]


Subcommand = (
    ApprovePlan
    | RejectPlan
    | ApproveCall
    | DenyCall
    | ListCalls
    | Watch
    | Status
    | ListWaiting
    | Result
    | Trace
    | Stats
    | Send
    | Interrupt
    | End
    | Fork
    | Diff
    | Eval
)
Command = RunArgs | Subcommand | Serve
_SUBCOMMAND_TYPES: tuple[type[OnServer], ...] = get_args(Subcommand)
"""In the order that --help lists them."""
SUBCOMMANDS = tuple(kind.command for kind in _SUBCOMMAND_TYPES)


def parse_command_line(argv: Sequence[str] | None = None) -> Command:
    """`worker` serves runs; a subcommand when the first word names one, else a run (a prompt
    that is a command's name goes after `--`)."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == [SERVE]:
        return Serve(tuple(words[1:]))
    if words[:1] == [CHAT]:
        args: RunArgs | Subcommand = parse_run(words[1:], chat=True)
    elif words and words[0] in SUBCOMMANDS:
        args = parse_subcommand(words)
    else:
        args = parse_run(words)
    try:
        payload_codec.data_converter()  # a malformed key configuration is a usage error
    except payload_codec.PayloadKeyError as error:
        say(f"starter.py: error: {error}")
        raise CommandLineError(2) from None
    return args


def parse_run(argv: list[str], *, chat: bool = False) -> RunArgs:
    parser = OneLineArgumentParser(
        prog=f"starter.py {CHAT}" if chat else "starter.py",
        description="A conversation at the terminal: each line is a turn; a line typed while a "
        "turn works steers it; Ctrl-C interrupts the turn, a second Ctrl-C (or /end, or the "
        "end of stdin) ends the conversation."
        if chat
        else "Start an agent run.",
        epilog="To decide on and follow runs on a server: starter.py {"
        + ",".join(SUBCOMMANDS)
        + "} ... (each with --help). To serve runs: starter.py worker (see worker --help).",
    )
    if chat:
        parser.add_argument("prompt", nargs="?", help="the first message")
    else:
        parser.add_argument(
            "prompt",
            nargs="?",
            help=f"what the agent should do; `{STDIN}` reads it from standard input",
        )
        parser.add_argument(
            "--conversation",
            action="store_true",
            help="the run is a conversation: after its answer it waits for the next message "
            "(self-contained: typed here, as `chat`; with --address: `starter.py send`)",
        )
    parser.add_argument(
        "--prompt-file",
        type=Path,
        metavar="FILE",
        help="read the prompt from FILE (UTF-8 text), instead of giving it: a command line's "
        "words are bounded (128 KiB each on Linux), a file's are not",
    )
    _add_run_options(parser, "run", "--provider", "--model", "--script")
    parser.add_argument(
        "--thinking-budget",
        type=_positive_int,
        metavar="N",
        help="anthropic: think for up to N tokens (at least 1024) before answering; the "
        "thinking is kept and sent back with each tool-use turn",
    )
    parser.add_argument(
        "--reasoning-effort",
        choices=get_args(ReasoningEffort),
        help="how hard a reasoning model thinks: openai-responses (none ... xhigh) or "
        "anthropic (low ... max)",
    )
    _add_run_options(parser, "run", "--max-steps", "--max-cost-usd")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="plan mode: the model submits a plan and the run waits for a person to approve it "
        "(self-contained: asked here, on stdin; with --address: `starter.py approve`)",
    )
    _add_run_options(parser, "run", "--approve-all", "--allow", "--label", "--system")
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="self-contained only: the embedded worker serves these tools instead of the "
        "demo's, as `worker --tools` does (repeatable; `demo` names the demo's)",
    )
    parser.add_argument("--address", help="Temporal frontend; without it the run is self-contained")
    parser.add_argument("--namespace", default="default")
    _add_run_options(parser, "run", "--task-queue", "--no-wait")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        help="print the model's text on stderr as it is written (real providers); "
        "default: on at a terminal, without --json",
    )
    _add_run_options(parser, "run", "--trace")
    parser.add_argument(
        "--linger",
        action="store_true",
        help="self-contained only: keep the dev server and its Web UI up after the run, "
        "until Ctrl-C, to inspect the run's history",
    )
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        help="self-contained only: MCP servers whose tools the run may use "
        f"(default: ${MCP_CONFIG_VARIABLE}; docs/mcp.md)",
    )
    args = parser.parse_args(argv)
    if chat:
        args.conversation = True
    if args.prompt == STDIN and args.plan and temporal_address(args.address) is None:
        parser.error(
            f"--plan asks at this terminal, on standard input, which `{STDIN}` takes for the "
            "prompt: give the prompt with --prompt-file FILE"
        )
    args.prompt = _prompt(parser, args.prompt, args.prompt_file, chat=chat)
    if not args.prompt.strip() and not chat:
        parser.error("the prompt is empty")
    _check_not_blank(parser, "--label", args.label)
    address = temporal_address(args.address)
    if args.linger and address is not None:
        parser.error("--linger is for self-contained runs; with --address the server is yours")
    if args.mcp_config and address is not None:
        parser.error(
            "--mcp-config is for self-contained runs; with --address, give it to the worker"
        )
    mcp_config = None
    if address is None:
        try:
            mcp_config = mcp_config_from(args.mcp_config)
        except AgentConfigurationError as error:
            parser.error(error.message)
    if chat and (args.no_wait or args.json):
        parser.error(
            "chat is at this terminal; to start a conversation and return, use "
            '"PROMPT" --conversation --address ... --no-wait'
        )
    if args.no_wait and address is None:
        parser.error(
            "--no-wait needs --address (or TEMPORAL_ADDRESS): a self-contained run "
            "stops its server when it returns"
        )
    if args.no_wait and args.trace:
        parser.error(
            "--trace prints the steps once the run has ended; with --no-wait, use "
            "`starter.py trace WORKFLOW_ID` later"
        )
    _check_not_blank(parser, "--system", args.system)
    if args.tools and address is not None:
        parser.error(
            "--tools is for the embedded worker; with --address, start the worker with --tools"
        )
    keyed = (p for p, variable in KEYED_PROVIDERS.items() if os.environ.get(variable))
    provider: Provider = args.provider or next(keyed, None) or "scripted"
    script = None
    if args.script is not None:
        if provider != "scripted":
            parser.error("--script is for the scripted provider")
        script = _read_script(parser, args.script)
    demo_tools = {"demo", DEMO_TOOLS}
    if provider == "scripted" and script is None and args.tools and not demo_tools & {*args.tools}:
        parser.error(
            "the scripted demo calls the demo's tools: with --tools, give --script or a real "
            "provider (or add --tools demo)"
        )
    model = args.model or CATALOGUE[provider].default_model
    try:  # the settings' own checks, as one line, before anything starts
        ModelSettings(
            provider=provider,
            model=model,
            thinking_budget_tokens=args.thinking_budget,
            reasoning_effort=args.reasoning_effort,
        )
    except ValidationError as error:
        message = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
        flags = {
            "thinking_budget_tokens": "--thinking-budget",
            "reasoning_effort": "--reasoning-effort",
        }
        for field, flag in flags.items():
            message = message.replace(field, flag)
        parser.error(message)
    run = RunArgs(
        prompt=args.prompt,
        provider=provider,
        model=model,
        script=script,
        max_steps=args.max_steps,
        max_cost_usd=args.max_cost_usd,
        plan=args.plan,
        approve_all=args.approve_all,
        allow=tuple(args.allow),
        label=args.label,
        system=args.system,
        tools=tuple(args.tools),
        address=address,
        namespace=args.namespace,
        task_queue=args.task_queue,
        no_wait=args.no_wait,
        json=args.json,
        trace=args.trace,
        linger=args.linger,
        mcp_config=mcp_config,
        conversation=args.conversation,
        chat=chat,
        thinking_budget=args.thinking_budget,
        reasoning_effort=args.reasoning_effort,
        stream=args.stream if args.stream is not None else sys.stderr.isatty() and not args.json,
    )
    _check_utf8_words(parser, run)
    return run


def parse_subcommand(argv: list[str]) -> Subcommand:
    common = OneLineArgumentParser(add_help=False)
    common.add_argument(
        "--address", help="Temporal frontend (default: $TEMPORAL_ADDRESS; one is needed)"
    )
    common.add_argument("--namespace", default="default")
    common.add_argument("--json", action="store_true", help="print JSON on stdout")
    parser = OneLineArgumentParser(
        prog="starter.py", description="Decide on and follow agent runs on a Temporal server."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(kind: type[OnServer], help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(kind.command, parents=[common], help=help, description=help)
        if issubclass(kind, OfRun):
            sub.add_argument("workflow_id", help="the run's workflow id")
        if kind in (ApproveCall, DenyCall):
            sub.add_argument("call_id", help="the tool call's id (see `calls`)")
            sub.add_argument(
                "--remember",
                action="store_true",
                help="decide the run's later calls of the same tool the same way",
            )
        return sub

    approve = command(ApprovePlan, "approve the plan a run waits with")
    approve.add_argument("--comment", help="a note for the model, passed on with the approval")
    reject = command(RejectPlan, "reject the plan a run waits with; the model plans again")
    reject.add_argument("--feedback", required=True, help="what the model should change")
    for decide in (approve, reject):
        decide.add_argument(
            "--version",
            type=_positive_int,
            help="decide only if plan version N is the one waiting (default: whichever waits)",
        )
    approve_call = command(ApproveCall, "let a tool call that waits for a person run")
    approve_call.add_argument("--reason", help="a note kept with the decision")
    deny_call = command(
        DenyCall, "deny a tool call that waits; the model gets the reason as its result"
    )
    deny_call.add_argument("--reason", required=True, help="what the model is told")
    command(ListCalls, "list the run's tool calls that wait for a person")
    watch = command(
        Watch,
        "follow the run's progress stream, one line per event, to the run's end (a run "
        "started elsewhere, or one that has ended: then what it published)",
    )
    watch.add_argument(
        "--from",
        dest="from_offset",
        type=_non_negative_int,
        default=0,
        metavar="OFFSET",
        help="start at this event (each line starts with its offset; resume at the next one)",
    )
    command(Status, "print the run's status query as JSON")
    listing = command(ListWaiting, "list the runs whose plan or tool calls wait for approval")
    listing.add_argument(
        "--awaiting-approval",
        action="store_true",
        required=True,
        help="runs waiting on a person",
    )
    result = command(Result, "wait for the run's answer and print it like a run started here")
    result.add_argument(
        "--trace",
        action="store_true",
        help="then print its steps as a table on stderr (with --json: as the `trace` key)",
    )
    command(
        Trace,
        "print the run's steps as a table, one row per step, with totals (a running run needs "
        "its worker; an ended run does not)",
    )
    stats = command(
        Stats,
        "per label, the steps, tokens and cost of the runs that completed, and the max_steps "
        "their distribution suggests (twice the p95 of the steps)",
    )
    send = command(
        Send,
        "send a message to a conversation: it starts the next turn, or steers the working one; "
        "prints the turn's number",
    )
    send.add_argument("text", help="the message")
    send.add_argument(
        "--wait", action="store_true", help="then follow the turn and print its answer"
    )
    command(Interrupt, "stop a conversation's working turn; it then waits for a message")
    command(End, "end a conversation; prints its turns")
    stats.add_argument("--label", help="only the runs started with this --label")
    stats.add_argument(
        "--limit",
        type=_positive_int,
        default=DEFAULT_STATS_LIMIT,
        help=f"read at most N runs, newest first (default {DEFAULT_STATS_LIMIT})",
    )

    fork = command(
        Fork,
        "start a new run from the run's step K: its transcript through step K's tool results, "
        "none of those tools run again, another model, prompt or limits; followed like a run",
    )
    fork.add_argument(
        "--step", type=_non_negative_int, required=True, help="fork after this step (0: the prompt)"
    )
    _add_run_options(fork, "fork", *_FORKED_RUN_OPTIONS, "--model", "--provider", "--script")
    _add_run_options(fork, "fork", "--system", "--max-cost-usd", "--label", "--no-wait", "--trace")
    diff = commands.add_parser(
        Diff.command,
        parents=[common],
        help="where two runs' transcripts diverge, step by step, then their answers and costs",
        description="where two runs' transcripts diverge, step by step: each side's calls, "
        "arguments and results, then the answers, steps, tokens and cost",
    )
    diff.add_argument("workflow_a", help="a run's workflow id (the original, say)")
    diff.add_argument("workflow_b", help="another run's workflow id (a fork, say)")
    evaluate = command(
        Eval,
        "fork each of a label's last completed runs at step K with another model, and compare "
        "each fork with its original (tool approval on: no fork changes data unless allowed)",
    )
    _add_run_options(evaluate, "eval", "--label")
    evaluate.add_argument("--fork-step", type=_non_negative_int, required=True, metavar="K")
    _add_run_options(evaluate, "eval", "--provider", "--model")
    evaluate.add_argument(
        "--limit",
        type=_positive_int,
        default=DEFAULT_EVAL_LIMIT,
        help=f"fork the last N completed runs (default {DEFAULT_EVAL_LIMIT})",
    )
    evaluate.add_argument(
        "--score",
        metavar="MODULE:FUNCTION",
        help="score(original: AgentResult, fork: AgentResult) -> number, instead of whether "
        "the answers are equal",
    )
    _add_run_options(evaluate, "eval", *_FORKED_RUN_OPTIONS)

    args = parser.parse_args(argv)
    chosen = commands.choices[args.command]
    args.address = temporal_address(args.address)
    if args.address is None:
        chosen.error(
            f"{args.command} needs --address (or TEMPORAL_ADDRESS): the runs live on a "
            "Temporal server"
        )
    if getattr(args, "workflow_id", "x").strip() == "":
        chosen.error("the workflow id is empty")
    if args.command == "reject" and not args.feedback.strip():
        chosen.error("--feedback is empty: the model needs to know what to change")
    if args.command == "deny-call" and not args.reason.strip():
        chosen.error("--reason is empty: the model needs to know why")
    if args.command == "send" and not args.text.strip():
        chosen.error("the message is empty")
    _check_text_bounds(chosen, args)
    if args.command in (Fork.command, Eval.command):
        _check_fork_options(chosen, args)
    kind = next(kind for kind in _SUBCOMMAND_TYPES if kind.command == args.command)
    # Each type's fields are the destinations of its arguments, so this takes exactly those.
    fields: dict[str, Any] = {f.name: getattr(args, f.name) for f in dataclasses.fields(kind)}
    subcommand = cast(Subcommand, kind(**fields))  # kind is one of the Subcommand types
    _check_utf8_words(chosen, subcommand)
    return subcommand


def _check_text_bounds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Text for the run over its bound (workflows/input_limits.py) is a bad command line: the
    run would refuse it, so it is not sent."""
    texts = {
        "send": ("the message", check_message, "text"),
        "approve": ("--comment", check_comment, "comment"),
        "reject": ("--feedback", check_comment, "feedback"),
        "approve-call": ("--reason", check_reason, "reason"),
        "deny-call": ("--reason", check_reason, "reason"),
    }
    if args.command not in texts:
        return
    what, check, field = texts[args.command]
    try:
        check(getattr(args, field))
    except InputTooLarge as refused:
        # "the comment is 40,000 characters; ..." names the option the person gave it by.
        parser.error(str(refused).replace(refused.subject, what, 1))


def _prompt(
    parser: argparse.ArgumentParser, given: str | None, path: Path | None, *, chat: bool
) -> str:
    """The prompt: the argument, standard input for `-`, or --prompt-file's text. Text that is
    not UTF-8, a file that cannot be read, or both ways at once is a bad command line."""
    if given is not None and path is not None:
        parser.error("give the prompt or --prompt-file FILE, not both")
    if path is not None:
        try:
            data = path.read_bytes()
        except OSError as error:
            parser.error(f"--prompt-file {path}: {error.strerror or error}")
        return _utf8_text(parser, f"--prompt-file {path}", data)
    if given == STDIN:
        if chat:
            parser.error(
                "chat reads its messages from standard input: give the first one as an "
                "argument or with --prompt-file FILE"
            )
        if sys.stdin is None:
            parser.error(f"`{STDIN}`: there is no standard input to read the prompt from")
        if sys.stdin.isatty():
            say("reading the prompt from standard input: end it with Ctrl-D")
        return _utf8_text(parser, "standard input", sys.stdin.buffer.read())
    if given is None:
        if chat:
            return ""
        parser.error(
            f"the prompt is missing: give it as an argument, `{STDIN}` to read it from standard "
            "input, or --prompt-file FILE"
        )
    return given  # checked with every other word (_check_utf8_words)


def _utf8_text(parser: argparse.ArgumentParser, source: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")  # a byte order mark, as some editors write, is dropped
    except UnicodeDecodeError as error:
        parser.error(f"{source} is not UTF-8 text: {_bad_byte(error)}")


_SAID_AS = {
    "prompt": "the prompt",
    "text": "the message",
    "workflow_id": "the workflow id",
    "workflow_a": "the first workflow id",
    "workflow_b": "the second workflow id",
    "call_id": "the call id",
}
"""How a command's text fields are named in a message: an argument by what it is, an option by
its flag (`--system`)."""


def _check_utf8_words(parser: argparse.ArgumentParser, command: RunArgs | OnServer) -> None:
    """Every word of the command line that reached `command` as text is UTF-8: the runs take
    nothing else. Python keeps other bytes of argv as lone surrogates, which fail only when the
    text is sent (a traceback, after the server has started); here they are one line, exit 2."""
    for field in dataclasses.fields(command):
        value = getattr(command, field.name)
        for word in value if isinstance(value, tuple) else (value,):
            if isinstance(word, str) and not _is_utf8(word):
                what = _SAID_AS.get(field.name, "--" + field.name.replace("_", "-"))
                try:  # the bytes argv had, back, to name the first that is not UTF-8
                    word.encode("utf-8", "surrogateescape").decode("utf-8")
                except UnicodeDecodeError as error:
                    parser.error(f"{what} is not UTF-8 text: {_bad_byte(error)}")
                except UnicodeEncodeError:
                    pass  # a surrogate that no byte of argv stands for
                parser.error(f"{what} is not UTF-8 text")


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bad_byte(error: UnicodeDecodeError) -> str:
    return f"byte 0x{error.object[error.start]:02x} at offset {error.start}"


def _check_fork_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A fork's and an evaluation's options, made final: a bad one is one line, exit 2."""
    args.allow = tuple(args.allow)
    if args.command == Eval.command:
        _check_not_blank(parser, "--label", args.label)
        args.model = args.model or CATALOGUE[args.provider].default_model
        if args.score is not None:
            try:
                load_score(args.score)
            except ValueError as error:
                parser.error(f"--score {args.score}: {error}")
        return
    _check_not_blank(parser, "--system", args.system)
    _check_not_blank(parser, "--label", args.label)
    if args.no_wait and args.trace:
        parser.error("--trace prints the steps once the fork has ended; not with --no-wait")
    if args.script is not None:
        if args.provider != "scripted":
            parser.error("--script is for the scripted provider (give --provider scripted)")
        args.script = _read_script(parser, args.script)


def load_score(spec: str) -> Any:
    """The scoring function `module:function` names; ValueError saying why it cannot be had."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError("give it as module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name}: {error}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{module_name} has no function {name}")
    return function


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"not a non-negative integer: {text!r}")
    return value


_non_negative_int.__name__ = "non-negative integer"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"not a positive integer: {text!r}")
    return value


_positive_int.__name__ = "positive integer"


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"not a positive number: {text!r}")
    return value


_positive_float.__name__ = "positive number"


RunCommand = Literal["run", "fork", "eval"]
"""The commands that start runs: a run, a fork, an evaluation (which forks)."""


@dataclass(frozen=True)
class _RunOption:
    """An option of the commands that start runs, declared once: what it takes, and what each
    command says of it: its help, or its help with a default or `required`."""

    takes: dict[str, Any]
    run: str | dict[str, Any]
    fork: str | dict[str, Any]
    eval: str | dict[str, Any] | None = None
    """None: as `fork` says it (an evaluation's runs are forks)."""

    def said_by(self, command: RunCommand) -> dict[str, Any]:
        said = self.run if command == "run" else self.fork
        if command == "eval" and self.eval is not None:
            said = self.eval
        return {"help": said} if isinstance(said, str) else said


_RUN_OPTIONS: dict[str, _RunOption] = {
    "--provider": _RunOption(
        {"choices": PROVIDERS},
        run="default: the provider whose key is set (OPENAI_API_KEY first, then "
        "ANTHROPIC_API_KEY), else the scripted offline demo",
        fork="the fork's provider (default: the original's)",
        eval={"required": True},
    ),
    "--model": _RunOption(
        {},
        run=f"model name (defaults: {_DEFAULT_MODELS})",
        fork="the fork's model (default: the original's; with --provider, its default)",
        eval="default: the provider's default model",
    ),
    "--script": _RunOption(
        {"type": Path},
        run="scripted provider: play this conversation (a JSON list of ScriptedTurn objects) "
        "instead of the built-in support demo",
        fork="scripted provider: the fork's replies from step K + 1 (a JSON list of ScriptedTurn)",
    ),
    "--system": _RunOption(
        {},
        run="the system prompt (default: the support demo's)",
        fork="the fork's system prompt (default: the original's)",
    ),
    "--max-steps": _RunOption(
        {"type": _positive_int},
        run={"default": Limits().max_steps},
        fork="the fork's own steps, counted from the fork point (default: the original's)",
    ),
    "--max-cost-usd": _RunOption(
        {"type": _positive_float},
        run="fail the run once it has cost more",
        fork="fail the fork once it has cost more",
    ),
    "--approve-all": _RunOption(
        {"action": "store_true"},
        run="a trusted job: no tool call waits for a person (by default the calls of tools that "
        "change data do: self-contained, asked here; with --address, `approve-call`)",
        fork="no tool call of the fork waits for a person (by default, those that change data do)",
    ),
    "--allow": _RunOption(
        {"action": "append", "default": [], "metavar": "TOOL"},  # argparse appends to a copy
        run="the calls of this tool run without asking (repeatable)",
        fork="the calls of this tool run without asking (repeatable)",
    ),
    "--label": _RunOption(
        {},
        run="the kind of task (e.g. order-status), kept in the run's memo: `starter.py stats` "
        "groups runs by it",
        fork="the fork's label (default: the original's)",
        eval={"required": True, "help": "the runs' --label"},
    ),
    "--task-queue": _RunOption(
        {},
        run={"default": DEFAULT_TASK_QUEUE},
        fork="the queue the fork runs on (default: the original's)",
    ),
    "--no-wait": _RunOption(
        {"action": "store_true"},
        run="print the workflow id and return",
        fork="print the fork's id and return",
    ),
    "--trace": _RunOption(
        {"action": "store_true"},
        run="once the run has ended, print its steps as a table on stderr (with --json: the step "
        "records, as the `trace` key)",
        fork="once the fork has ended, print its steps",
    ),
}
_FORKED_RUN_OPTIONS = ("--max-steps", "--approve-all", "--allow", "--task-queue")
"""The run options a fork and an evaluation both take."""


def _add_run_options(parser: argparse.ArgumentParser, command: RunCommand, *flags: str) -> None:
    """Add these run options as `command` says them, in this order (the order of --help)."""
    for flag in flags:
        option = _RUN_OPTIONS[flag]
        parser.add_argument(flag, **option.takes, **option.said_by(command))


def _check_not_blank(parser: argparse.ArgumentParser, flag: str, value: str | None) -> None:
    if value is not None and not value.strip():
        parser.error(f"{flag} is empty")


def _read_script(parser: argparse.ArgumentParser, path: Path) -> tuple[ScriptedTurn, ...]:
    """The scripted provider's turns from --script; a file that cannot be read or is not a
    list of ScriptedTurn is one line, exit 2."""
    try:
        return tuple(_SCRIPT_ADAPTER.validate_json(path.read_bytes()))
    except (OSError, ValueError) as error:
        parser.error(f"--script {path}: {str(error).splitlines()[0]}")
