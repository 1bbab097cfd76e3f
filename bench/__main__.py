"""`python -m bench [--quick] [--json PATH]`: the benchmark suite (bench/suite.py)."""

import asyncio

from bench.suite import main
from durable_agent.serving.command_line import exit_now

exit_now(asyncio.run(main()))
