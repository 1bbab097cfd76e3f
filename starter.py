"""Start an agent run from this checkout and print its answer, or decide on and follow runs.

    python starter.py "PROMPT" [--provider scripted|openai|anthropic] [--plan] [--json] ...
    python starter.py SUBCOMMAND ...     (approve, calls, watch, result, fork, worker, ...)

The same command as `durable-agent` from an installed project; it lives in
cli/starter.py, which lists every subcommand, and docs/cli.md describes them. The
checkout must be installed editable first: `pip install -e .`.
"""

if __name__ == "__main__":
    from durable_agent.cli.starter import console_main

    console_main()
