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

r"""The stdio transport of the MCP tool: a server process, its newline-delimited JSON-RPC, a byte bound per message.

Used instead of the `mcp` package's `stdio_client` (docs/tools.md "MCP servers") for two reasons:

* **Byte bound.** The package's reader joins every chunk to the unfinished line (`buffer + chunk`), which is quadratic:
  a 50 MB result took 40 s, longer than the call's timeout, and the next call timed out behind it. Here a line is
  collected in a `bytearray` (linear), and a line longer than `max_message_bytes` is not kept: its head and tail are,
  to find its JSON-RPC `id`, and the request gets an error answer at once (`TOO_LARGE`), so the call ends as an
  observation in milliseconds while the rest of the line is read and dropped.
* **Environment.** The server gets `ENV_ALLOWLIST` from this process plus the entry's own `env`, never the trainer's
  whole environment (`HF_TOKEN`, `OPENAI_API_KEY`, ...); a server that needs a secret names it in `env`, e.g.
  `env: {API_KEY: "${API_KEY}"}`.

The process runs in its own session (process group); closing the transport closes its stdin, waits `EXIT_GRACE_S`
and kills the whole group (a stopped or wedged server included).
"""

import json
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio


# variables a stdio MCP server inherits from this process (docs/tools.md "MCP servers"); everything else is passed
# only when the entry's `env` names it
ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "TMPDIR",
    "TZ",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
# JSON-RPC error code of the answer given to a request whose response was over the byte bound (the implementation-
# defined server-error range; the mcp package uses -32000 and -32001 there)
TOO_LARGE = -32090
TOO_LARGE_TEXT = "the answer is over the bound"  # the start of the messages about an answer over the bound
EXIT_GRACE_S = 1.0
_KEEP = 4096  # bytes kept of each end of an oversized line, to find its id
_ID_FIRST = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_ID_LAST = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$')


def server_environment(extra: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    r"""The environment of a stdio server: `ENV_ALLOWLIST` from `environ` (default this process's) plus `extra`."""
    source = os.environ if environ is None else environ
    return {**{k: source[k] for k in ENV_ALLOWLIST if k in source}, **extra}


class LineReader:
    r"""Newline-delimited messages from byte chunks, in linear time, each at most `max_bytes` long.

    `feed(chunk)` returns the items completed by the chunk: a line's bytes, or for a line over `max_bytes` a
    `(size, id)` pair (`id` None when neither end of the line shows one).
    """

    def __init__(self, max_bytes: int) -> None:
        r"""Start with an empty line; `max_bytes` is the bound of one line (newline excluded)."""
        self.max_bytes = max_bytes
        self._line = bytearray()
        self._size = 0  # bytes of the current line, dropped ones included
        self._tail = b""  # last bytes of an oversized line

    def feed(self, chunk: bytes) -> list[Any]:
        r"""The lines (bytes) and oversized-line markers (`(size, id)`) that `chunk` completes, in order."""
        out: list[Any] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            self._add(piece)
            if end < 0:
                return out
            out.append(self._finish())
            start = end + 1

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._size <= self.max_bytes:
            self._line += piece
            return
        if len(self._line) < _KEEP:  # the head: the first bytes of the line, from this piece too
            self._line += piece[: _KEEP - len(self._line)]
        elif len(self._line) > _KEEP:  # just went over: keep the head only
            del self._line[_KEEP:]
        self._tail = (self._tail + piece)[-_KEEP:]

    def _finish(self) -> Any:
        size, line, tail = self._size, bytes(self._line), self._tail
        self._line, self._size, self._tail = bytearray(), 0, b""
        if size <= self.max_bytes:
            return line
        found = _ID_FIRST.match(line) or _ID_LAST.search(tail)
        return (size, json.loads(found.group(1)) if found else None)


def _too_large_answer(request_id: Any, size: int, max_bytes: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": TOO_LARGE,
            "message": f"{TOO_LARGE_TEXT} of {max_bytes} bytes (`max_result_bytes` of the server entry): {size} "
            "bytes; it was dropped",
        },
    }


@asynccontextmanager
async def bounded_stdio_client(
    command: str,
    args: list[str],
    env: dict[str, str],
    cwd: str | None,
    errlog: Any,
    max_message_bytes: int,
    kill_at_once: Callable[[], bool] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    r"""Start `command args` and yield the `(read_stream, write_stream)` pair that `mcp.Client` takes as a transport.

    Args:
        command: the server program.
        args: its arguments.
        env: its whole environment (`server_environment`).
        cwd: its working directory (None: this process's).
        errlog: where its stderr goes (a file object with a descriptor).
        max_message_bytes: bound of one message from the server; a longer one is dropped and its request answered
            with a `TOO_LARGE` error.
        kill_at_once: asked when the transport closes; True skips the `EXIT_GRACE_S` grace and kills the process
            group at once (a server that did not answer a ping: a stopped process never exits on its own).

    Raises:
        OSError: the program cannot be started.
    """
    import mcp_types
    from mcp.shared.message import SessionMessage

    process = await anyio.open_process([command, *args], env=env, cwd=cwd, stderr=errlog, start_new_session=True)
    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[Any](0)

    def parse(raw: bytes) -> Any:
        try:
            return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(raw, by_name=False))
        except ValueError as exc:  # handed to the session, which reports it; the text itself is not echoed
            return ValueError(f"the MCP server wrote a line that is not a JSON-RPC message ({type(exc).__name__})")

    async def read_stdout() -> None:
        lines = LineReader(max_message_bytes)
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    for item in lines.feed(chunk):
                        if isinstance(item, tuple):
                            size, request_id = item
                            if request_id is None:
                                item = ValueError(f"dropped a message of {size} bytes without a visible id")
                            else:
                                item = json.dumps(_too_large_answer(request_id, size, max_message_bytes)).encode()
                        await read_writer.send(item if isinstance(item, Exception) else parse(item))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            pass

    async def write_stdin() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the connection end instead of waiting forever

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, grace_s=0.0 if kill_at_once is not None and kill_at_once() else EXIT_GRACE_S)
            tg.cancel_scope.cancel()


async def _stop(process: Any, grace_s: float = EXIT_GRACE_S) -> None:
    r"""Close stdin, give the server `grace_s` seconds to exit, then kill its process group."""
    try:
        await process.stdin.aclose()
    except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    if grace_s > 0:
        with anyio.move_on_after(grace_s):
            await process.wait()
    if process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the whole session: a stopped server and its children too
        except (ProcessLookupError, PermissionError):
            pass
        with anyio.move_on_after(2.0):
            await process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            try:
                await stream.aclose()
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass


__all__ = ["ENV_ALLOWLIST", "TOO_LARGE", "TOO_LARGE_TEXT", "LineReader", "bounded_stdio_client", "server_environment"]
