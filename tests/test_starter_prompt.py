"""Where a prompt comes from, in a subprocess as people meet it: the command line (UTF-8 only),
a file (`--prompt-file`, for a prompt longer than a command line's word may be) or standard
input (`-`). Whatever is wrong with it is one line on stderr and exit status 2, before anything
starts."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_agent.workflows.inputs import AgentInput

REPO = Path(__file__).resolve().parent.parent
HIDDEN = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
LATIN_1 = "Où est ma commande ?".encode("latin-1")
"""A prompt typed at a terminal whose encoding is not UTF-8: its "ù" is the byte 0xf9."""


async def starter(*argv: str | bytes, stdin: bytes = b"", cwd: Path = REPO) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in HIDDEN}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "starter.py"),
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(
    ("argv", "stdin", "said"),
    [
        ([LATIN_1], b"", "the prompt is not UTF-8 text: byte 0xf9 at offset 1"),
        (["chat", LATIN_1], b"", "the prompt is not UTF-8 text: byte 0xf9 at offset 1"),
        (["send", "wf", LATIN_1, "--address", "localhost:1"], b"", "the message is not UTF-8"),
        (["hi", "--system", LATIN_1], b"", "--system is not UTF-8 text: byte 0xf9"),
        (["-"], LATIN_1, "standard input is not UTF-8 text: byte 0xf9 at offset 1"),
        (["--prompt-file", "latin-1.txt"], b"", "latin-1.txt is not UTF-8 text: byte 0xf9"),
        (["chat", "--prompt-file", "latin-1.txt"], b"", "latin-1.txt is not UTF-8 text"),
        (["--prompt-file", "missing.txt"], b"", "missing.txt: No such file or directory"),
        (["hi", "--prompt-file", "latin-1.txt"], b"", "the prompt or --prompt-file FILE, not"),
        ([], b"", "the prompt is missing"),
        (["chat", "-"], b"hi\n", "chat reads its messages from standard input"),
        (["-", "--plan"], b"hi\n", "--plan asks at this terminal, on standard input"),
        (["--prompt-file", "blank.txt"], b"", "the prompt is empty"),
    ],
    ids=[
        "argv",
        "chat-argv",
        "send-argv",
        "system-argv",
        "stdin",
        "file",
        "chat-file",
        "missing-file",
        "both",
        "none",
        "chat-stdin",
        "plan-stdin",
        "blank-file",
    ],
)
async def test_a_prompt_that_cannot_be_used_is_one_line_and_exit_2(
    argv: list[str | bytes], stdin: bytes, said: str, tmp_path: Path
) -> None:
    (tmp_path / "latin-1.txt").write_bytes(LATIN_1)
    (tmp_path / "blank.txt").write_text(" \n")
    code, out, err = await starter(*argv, stdin=stdin, cwd=tmp_path)

    assert code == 2, err
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("starter.py"), err
    assert said in err, err


async def started_prompt(client: Client, workflow_id: str) -> str:
    """The prompt of the run as it started, from its history (no worker serves it)."""
    handle = client.get_workflow_handle(workflow_id)
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    (agent_input,) = await client.data_converter.decode(started.input.payloads, [AgentInput])
    await handle.terminate("the test read its prompt")
    assert isinstance(agent_input, AgentInput)
    return agent_input.prompt


async def test_a_prompt_from_a_file_or_standard_input_reaches_the_run_whole(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    address = temporal_env.client.service_client.config.target_host
    on = ("--address", address, "--task-queue", task_queue, "--no-wait", "--json")
    # 300 KB: more than Linux lets one word of a command line have (128 KiB).
    long_prompt = "Résumé of the case, line by line: €\n" * 8_000
    assert len(long_prompt.encode()) > 300_000
    (tmp_path / "case.txt").write_text(long_prompt, encoding="utf-8")
    piped = "Where is my order?\nMy email is a@b.com. — Ada\n"

    code, out, err = await starter("--prompt-file", str(tmp_path / "case.txt"), *on)
    assert code == 0, err
    from_file = json.loads(out)["workflow_id"]
    code, out, err = await starter("-", *on, stdin=piped.encode())
    assert code == 0, err
    from_stdin = json.loads(out)["workflow_id"]

    assert await started_prompt(temporal_env.client, from_file) == long_prompt
    assert await started_prompt(temporal_env.client, from_stdin) == piped
