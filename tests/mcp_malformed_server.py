"""An MCP server over stdio that answers `tools/call` with a result the protocol does not allow.

    python tests/mcp_malformed_server.py

The SDK's servers cannot send one, so this speaks the wire format itself: newline-delimited
JSON-RPC, the `initialize` handshake, one tool `pay` that is not read-only, and a `tools/call`
answer whose `content` is not a list. Each call is written to MCP_TEST_JOURNAL first, so a test
can see that it reached the server (and may have been applied) before the reply went wrong.
"""

from __future__ import annotations

import json
import os
import sys


def _answer(request_id: object, result: dict[str, object]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification (notifications/initialized)
        if method == "initialize":
            _answer(
                request_id,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "malformed", "version": "1"},
                },
            )
        elif method == "tools/list":
            schema = {"type": "object", "properties": {"amount": {"type": "integer"}}}
            _answer(request_id, {"tools": [{"name": "pay", "inputSchema": schema}]})
        elif method == "tools/call":
            with open(os.environ["MCP_TEST_JOURNAL"], "a", encoding="utf-8") as journal:
                journal.write(json.dumps({"tool": "pay", **message["params"]}) + "\n")
            _answer(request_id, {"content": "paid, but this is not a list of blocks"})
        else:
            _answer(request_id, {})


if __name__ == "__main__":
    main()
