# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""A tiny MCP server for the MCP tool tests, built with the `mcp` package's `MCPServer` (FastMCP in mcp 1.x).

Run: `python mcp_test_server.py stdio` or `python mcp_test_server.py http PORT`. Tools: `add(a, b)`, `lookup(key)`,
`sleep(seconds)` (async: other calls are served meanwhile), `fail(message)` (an `isError` result) and `calls()`
(tool calls this process has served, which tells a test whether a result came from the cache). With
`$MCP_TEST_PID_FILE` set, the process writes its PID there at start (the tests kill it to simulate a crash).
"""

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


server = MCPServer("agentic-test")
_CALLS = {"n": 0}
_CAPITALS = {"france": "Paris", "japan": "Tokyo", "peru": "Lima"}


def _count() -> None:
    _CALLS["n"] += 1


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _count()
    return a + b


@server.tool()
def lookup(key: str) -> str:
    """Capital city of a country (france, japan, peru)."""
    _count()
    return _CAPITALS.get(key.strip().lower(), f"unknown country: {key}")


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep without blocking the server, then answer (the timeout tests)."""
    _count()
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def fail(message: str) -> str:
    """Raise an error with `message` (an isError result)."""
    _count()
    raise ToolError(message)


@server.tool()
def calls() -> int:
    """Tool calls this process has served so far (this one included)."""
    _count()
    return _CALLS["n"]


if __name__ == "__main__":
    if os.environ.get("MCP_TEST_PID_FILE"):
        with open(os.environ["MCP_TEST_PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
