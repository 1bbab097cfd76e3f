"""Serve agent runs from this checkout: the demo's tools, or yours with --tools.

    python worker.py [--address HOST:PORT] [--namespace NS] [--task-queue QUEUE]
                     [--tools MODULE[:ATTR] ...] [--mcp-config FILE]

The same command as `durable-agent worker` from an installed project; it lives in
durable_agent/worker.py. An app's own worker serves runs with `plugins=[AgentPlugin()]` instead
(docs/client.md). The checkout must be installed editable first: `pip install -e .`.
"""

if __name__ == "__main__":
    from durable_agent.cli.worker import main
    from durable_agent.serving.command_line import exit_now

    exit_now(main())
