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

Run: `python mcp_test_server.py stdio`, `python mcp_test_server.py http PORT` or `... http-json PORT`. Tools: `add(a, b)`, `lookup(key)`,
`sleep(seconds)` (async: other calls are served meanwhile), `fail(message)` (an `isError` result), `calls()`
(tool calls this process has served, which tells a test whether a result came from the cache), `sleeping()` (running
`sleep` calls), `bad_output()` (structured content that breaks its own output schema), `big(n_bytes)`, `wedge(half_line)`
(the process stops itself, optionally after half a line) and `env(name)`; `think(thought)` with `$MCP_TEST_THINK` set. With
`$MCP_TEST_PID_FILE` set, the process writes its PID there at start (the tests kill it to simulate a crash).
"""

import os
import signal
import sys
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent


server = MCPServer("agentic-test")
_CALLS = {"n": 0}
_SLEEPING = {"n": 0}
_WIRE = os.dup(1)  # the stdio wire (the SDK points fd 1 at stderr while it serves), for `wedge`'s half line
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
    _SLEEPING["n"] += 1
    try:
        await anyio.sleep(seconds)
    finally:
        _SLEEPING["n"] -= 1
    return f"slept {seconds}"


@server.tool()
def block(seconds: float) -> str:
    """Sleep in a worker thread, which a cancellation does not stop (the answer comes after `seconds` whatever)."""
    _count()
    time.sleep(seconds)
    return f"blocked {seconds}"


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


@server.tool()
async def sleeping() -> int:
    """How many `sleep` calls are running now (a cancelled or abandoned one ends its count when it stops)."""
    return _SLEEPING["n"]


@server.tool()
def bad_output() -> CallToolResult:
    """Answer structured content that breaks the tool's own output schema (`n` must be an integer)."""
    _count()
    return CallToolResult(content=[TextContent(type="text", text="n is seven")], structured_content={"n": "seven"})


@server.tool()
def big(n_bytes: int) -> str:
    """A text result of `n_bytes` characters (the result size tests)."""
    _count()
    return "x" * n_bytes


@server.tool()
def wedge(half_line: bool) -> str:
    """Stop answering for good: with `half_line`, after writing half a JSON-RPC line to stdout (no newline)."""
    if half_line:
        os.write(_WIRE, b'{"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": "par')
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen: no reply, no ping, until killed
    return "unreachable"


@server.tool()
def env(name: str) -> str:
    """The server process's environment variable `name` (`<unset>` when it has none)."""
    return os.environ.get(name, "<unset>")


# `bad_output`'s published output schema, which its answer breaks (a published schema without a model is not checked
# by the server, so the answer reaches the client as a broken server would send it)
server._tool_manager.get_tool("bad_output").fn_metadata.output_schema = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
}

if os.environ.get("MCP_TEST_THINK"):  # a server with a tool named like a reserved tag (docs/tools.md)

    @server.tool()
    def think(thought: str) -> str:
        """Record a thought (as some public MCP servers offer)."""
        return f"noted: {thought}"


if __name__ == "__main__":
    if os.environ.get("MCP_TEST_PID_FILE"):
        with open(os.environ["MCP_TEST_PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif sys.argv[1:2] == ["http-json"]:  # answers each request with one JSON body instead of an SSE stream
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), json_response=True)
    else:
        server.run("stdio")
