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

r"""MCP client tool: the tools of a Model Context Protocol server, each called by its own tag.

A configured MCP server (docs/tools.md "MCP servers") yields one `MCPTool` per server tool, tagged with the tool's
name: a server with tools `add` and `lookup` gives the model `<add>{"a": 1, "b": 2}</add>` and
`<lookup>france</lookup>`. The call body is a JSON object of arguments; a tool whose input schema has exactly one
string property also takes a bare string (`<lookup>france</lookup>` is `{"key": "france"}`).

Transports (the `mcp` package, 2.x client API): `command` + `args` starts a stdio server process; `url` connects to a
streamable-HTTP server (`headers` sent with every request). One connection per server is shared by its tools and by
the executor's worker threads: it lives on a private asyncio event loop thread, calls are sent to it with
`asyncio.run_coroutine_threadsafe`, and a lost connection (the server process died, the HTTP server went away) is
dropped and opened again by the next attempt, so the tool's retries (tenacity, `BaseTool.execute_args`) reconnect.

Observations: the text parts of the result (images and other binary parts as `[image/png content]` lines; the
structured content as JSON when there is no text), cut to `max_output_chars`. A result the server flags `isError`
becomes an "error" observation with the server's message (not retried); a timeout, a lost connection or a failed
connect is retried while the call's `timeout_s` allows and then becomes a "timeout" or "error" observation. Nothing
raises into the rollout. Results are cached by the executor like search results (`cache.tools` names the tags; the
key is the canonical JSON of the arguments, `MCPTool.cache_key`).
"""

import asyncio
import concurrent.futures
import contextvars
import json
import os
import sys
import threading
from typing import Any

from ..common.log import get_logger
from ..data.tags import reserved_tag_error
from ..hparams import MCP_MAX_RESULT_BYTES, PYTHON_MAX_OUTPUT_CHARS
from .base import (
    STATUS_EMPTY,
    STATUS_ERROR,
    STATUS_OK,
    BaseTool,
    ToolError,
    ToolOutput,
    TransientToolError,
    canonical_json,
    check_number,
    empty_output_text,
    error_text,
    truncate_middle,
)
from .registry import ToolConfigError, describe_value, register_tool


logger = get_logger(__name__)

INSTALL_HINT = "install the MCP client: pip install 'llamafactory-agentic[mcp]' (the `mcp` package, 2.x)"
SERVER_KEYS = ("command", "args", "env", "cwd", "url", "headers")
PROBE_TIMEOUT_S = 5.0  # most seconds a ping after a timed-out call may take before the server is restarted
_CALL = contextvars.ContextVar("agentic_mcp_call", default=None)  # the call an HTTP request belongs to
_TAG_PATTERN = r"[A-Za-z_][A-Za-z0-9_\-]*"


def _import_mcp() -> Any:
    try:
        import mcp  # noqa: F401
        from mcp import Client  # noqa: F401 - the 2.x client API
    except ImportError as exc:
        raise ToolError(f"the `mcp` package is missing or too old ({exc}): {INSTALL_HINT}") from exc
    return mcp


class _SessionStop(asyncio.Event):
    r"""The event that ends one session; `wedged` is set when it ends because the server stopped answering."""

    def __init__(self) -> None:
        super().__init__()
        self.wedged = False


class MCPServerConnection:
    r"""One MCP server session, opened lazily, shared by threads, reopened after it is lost.

    Args:
        server: label of the server (messages, logs, cache metadata).
        command, args, env, cwd: a stdio server: the program, its arguments, extra environment variables (added to
            this process's environment) and working directory.
        url, headers: a streamable-HTTP server: its endpoint (e.g. `http://127.0.0.1:8000/mcp`) and HTTP headers.
        connect_timeout_s: seconds allowed for starting the server and the protocol handshake.
        errlog: where a stdio server's stderr goes (default this process's stderr).
        max_result_bytes: bound of one message from the server (a stdio line, an SSE event); a longer answer is
            dropped unread and its call ends as an error observation at once.

    Raises:
        ValueError: neither or both of `command` and `url`.
    """

    def __init__(
        self,
        server: str,
        command: str | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        headers: dict[str, str] | None = None,
        connect_timeout_s: float = 30.0,
        errlog: Any = None,
        max_result_bytes: int = MCP_MAX_RESULT_BYTES,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        if bool(command) == bool(url):
            raise ValueError(
                f"MCP server `{server}` needs exactly one of `command` (stdio) or `url` (streamable HTTP)"
            )
        self.server = server
        self.command, self.args = command, [str(a) for a in args or []]
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.cwd, self.url = cwd, url
        self.headers = {str(k): str(v) for k, v in (headers or {}).items()}
        self.connect_timeout_s = check_number("connect_timeout_s", connect_timeout_s)
        self.errlog = errlog
        self.max_result_bytes = check_number("max_result_bytes", max_result_bytes, integer=True, minimum=1024,
                                             inclusive=True)  # fmt: skip
        self._probe: asyncio.Task | None = None
        self._http: Any = None  # the HTTP session's `mcp_http.CallStreams`
        self.restarts = 0  # sessions dropped because the server stopped answering (a failed ping after a timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._client: Any = None  # the entered mcp.Client; only touched on the loop thread
        self._stop: _SessionStop | None = None
        self._runner: asyncio.Task | None = None
        self._lock: asyncio.Lock | None = None
        self.connects = 0  # sessions opened so far (the first one included)
        self._closed = False

    def describe(self) -> str:
        r"""`stdio: command args` or `http: url` (never the headers, which may hold keys)."""
        return f"stdio: {' '.join([self.command, *self.args])}" if self.command else f"http: {self.url}"

    # ------------------------------------------------------------------ event loop thread
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._closed:
                raise ToolError(f"the connection to MCP server `{self.server}` is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def _serve() -> None:
                    asyncio.set_event_loop(loop)
                    self._lock = asyncio.Lock()
                    ready.set()
                    loop.run_forever()

                self._thread = threading.Thread(target=_serve, name=f"mcp-{self.server}", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def _submit(self, coro: Any, timeout_s: float) -> Any:
        r"""Run `coro` on the loop thread; wait at most `timeout_s` (then cancel it and raise a transient error)."""
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TransientToolError(
                f"no answer from MCP server `{self.server}` within {timeout_s:g} seconds"
            ) from None

    # ------------------------------------------------------------------ session (runs on the loop thread)
    def _transport(self, stop: Any = None) -> Any:
        r"""The session's transport (a new one per session).

        stdio: `mcp_stdio.bounded_stdio_client` (byte bound, environment allowlist); HTTP: the package's client with
        a transport that can close one call's response stream (`mcp_http.CallStreams`) and `max_sse_event_size`.
        `stop`: the session's `_SessionStop`; a stdio server dropped as wedged is killed without the exit grace.
        """
        if self.command:
            from .mcp_stdio import bounded_stdio_client, server_environment

            return bounded_stdio_client(self.command, self.args, server_environment(self.env), self.cwd,
                                        self.errlog or sys.stderr, self.max_result_bytes,
                                        kill_at_once=(lambda: stop.wedged) if stop is not None else None)  # fmt: skip
        import httpx2
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

        from .mcp_http import CallStreams

        self._http = CallStreams(httpx2.AsyncHTTPTransport(), self.max_result_bytes, _CALL)
        timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
        client = httpx2.AsyncClient(transport=self._http, headers=self.headers or None, timeout=timeout)
        return streamable_http_client(self.url, http_client=client, max_sse_event_size=self.max_result_bytes)

    async def _run_session(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        r"""Open the session, hand it over through `ready`, keep it until `stop` (enter and exit in one task)."""
        from mcp import Client

        client = None
        try:
            async with Client(self._transport(stop), mode="legacy", cache=None) as client:
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - a dying transport may raise anything on exit
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                logger.debug("[agentic-tools] MCP server %s session ended: %r", self.server, exc)
        finally:
            if self._client is client:
                self._client = None

    async def _connected(self) -> Any:
        assert self._lock is not None
        probe = self._probe
        if probe is not None and not probe.done():  # a ping after a timeout decides whether the session is kept
            await asyncio.wait([probe])
        async with self._lock:
            if self._client is not None and self._runner is not None and not self._runner.done():
                return self._client
            ready: asyncio.Future = asyncio.get_running_loop().create_future()
            stop = _SessionStop()
            runner = asyncio.create_task(self._run_session(ready, stop))
            self._stop, self._runner = stop, runner
            try:
                client = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout_s)
            except asyncio.TimeoutError:
                ready.cancel()  # nobody waits for it any more
                stop.set()
                runner.cancel()
                raise TransientToolError(
                    f"MCP server `{self.server}` ({self.describe()}) did not answer the handshake within "
                    f"{self.connect_timeout_s:g} seconds"
                ) from None
            except Exception as exc:  # noqa: BLE001 - a server that cannot start: retried, then an observation
                raise TransientToolError(
                    f"cannot connect to MCP server `{self.server}` ({self.describe()}): {_describe_exc(exc)}"
                ) from None
            self._client = client
            self.connects += 1
            return client

    def _drop(self, client: Any, wedged: bool = False) -> None:
        if self._client is client:
            self._client = None
            if self._stop is not None:
                self._stop.wedged = wedged
                self._stop.set()

    async def _call(self, method: str, timeout_s: float, *args: Any, **kwargs: Any) -> Any:
        r"""`client.<method>(*args, **kwargs)` on a live session (reopened first when it was lost).

        A `read_timeout_seconds` keyword is cut to what is left of `timeout_s` after a reconnect.
        """
        from mcp.shared.exceptions import MCPError

        from .mcp_stdio import TOO_LARGE, TOO_LARGE_TEXT

        start = asyncio.get_running_loop().time()
        client = await self._connected()
        if "read_timeout_seconds" in kwargs:
            left = timeout_s - (asyncio.get_running_loop().time() - start)
            kwargs["read_timeout_seconds"] = max(0.05, left)
        call, streams = _CallToken(), self._http  # the HTTP transport of this session (a reconnect makes a new one)
        _CALL.set(call)  # the HTTP requests of this call carry it (the transport runs them in copies of our context)
        try:
            return await getattr(client, method)(*args, **kwargs)
        except MCPError as exc:
            if exc.code == -32001:  # REQUEST_TIMEOUT: the server may be busy or wedged; a ping tells which
                self._start_probe(client, timeout_s)
                raise TransientToolError(
                    f"MCP server `{self.server}` did not answer within {timeout_s:g} seconds"
                ) from None
            if exc.code == -32000 and "byte limit" in str(exc.message):  # an SSE event over `max_result_bytes`:
                # this call's answer was too long; the HTTP session (one POST per request) is fine
                raise ToolError(
                    f"MCP server `{self.server}`: the answer is over the bound of {self.max_result_bytes} bytes "
                    f"(`max_result_bytes` of the server entry); it was dropped ({exc.message})"
                ) from None
            if exc.code == -32000:  # CONNECTION_CLOSED: the server process died or the stream broke
                self._drop(client)
                raise TransientToolError(
                    f"connection to MCP server `{self.server}` lost ({exc.message}); it is reopened on the next call"
                ) from None
            if exc.code == TOO_LARGE:
                raise ToolError(f"MCP server `{self.server}`: {exc.message}") from None
            if TOO_LARGE_TEXT in str(exc.message):  # a JSON answer cut off by `mcp_http.CallStreams`
                raise ToolError(
                    f"MCP server `{self.server}`: {TOO_LARGE_TEXT} of {self.max_result_bytes} bytes "
                    "(`max_result_bytes` of the server entry); it was dropped"
                ) from None
            raise ToolError(f"MCP server `{self.server}` refused the request: {exc.message}") from None
        except (ToolError, asyncio.CancelledError):
            raise
        except RuntimeError as exc:  # the answer arrived and the client refused it (e.g. it breaks the tool's own
            # output schema): this call's error; the session and the other calls on it are fine
            raise ToolError(f"MCP server `{self.server}` answered {method} with a result the client refused: "
                            f"{_first_line(str(exc))}") from None  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - transport errors (HTTP, broken pipes): reconnect next time
            self._drop(client)
            raise TransientToolError(
                f"MCP server `{self.server}` call failed ({_describe_exc(exc)}); it is reopened on the next call"
            ) from None
        finally:
            if streams is not None:
                await streams.close_call(call)  # a timed-out call's response stream is not left open

    def _start_probe(self, client: Any, timeout_s: float) -> None:
        r"""After a timed-out call, ping the server in the background (one ping at a time).

        No answer within `PROBE_TIMEOUT_S` (or the call's `timeout_s`, if shorter) means it is wedged (a stopped
        process, half a line written): the session is dropped, so the next call (which waits for the ping) starts it
        again.
        A server that is only busy with the slow call answers the ping and keeps its session and other calls.
        """
        if self._client is not client or (self._probe is not None and not self._probe.done()):
            return
        wait_s = min(PROBE_TIMEOUT_S, timeout_s)

        async def _probe() -> None:
            try:
                await asyncio.wait_for(client.session.send_ping(), wait_s)
            except Exception as exc:  # noqa: BLE001 - no answer, a refused ping, a broken stream: all mean restart
                self.restarts += 1
                logger.warning(
                    "[agentic-tools] MCP server %s (%s) did not answer a ping within %g s after a timed-out call "
                    "(%s): restarting it",
                    self.server,
                    self.describe(),
                    wait_s,
                    _describe_exc(exc),
                )
                self._drop(client, wedged=True)

        self._probe = asyncio.get_running_loop().create_task(_probe())

    # ------------------------------------------------------------------ public, thread-safe
    def list_tools(self) -> list[Any]:
        r"""The server's tools (`mcp_types.Tool`: `name`, `description`, `input_schema`), every page.

        Raises:
            TransientToolError: the server cannot be started or reached within `connect_timeout_s`.
            ToolError: `mcp` is not installed, or the server refused the request.
        """
        _import_mcp()
        budget = 2 * self.connect_timeout_s

        async def _all() -> list[Any]:
            tools, cursor = [], None
            while True:
                page = await self._call("list_tools", budget, cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools

        return self._submit(_all(), budget + 1.0)

    def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float) -> Any:
        r"""One `tools/call` (an `mcp_types.CallToolResult`), waiting at most `timeout_s` seconds for the answer.

        A lost session is reopened first (that time counts too, bounded by `connect_timeout_s`).

        Raises:
            TransientToolError: timeout, lost connection, failed connect (worth another attempt).
            ToolError: the server refused the request (a JSON-RPC error) or `mcp` is missing.
        """
        _import_mcp()
        coro = self._call("call_tool", timeout_s, name, arguments, read_timeout_seconds=timeout_s)
        return self._submit(coro, timeout_s + self.connect_timeout_s + 1.0)

    def close(self) -> None:
        r"""End the session (a stdio server process is stopped) and the loop thread; idempotent."""
        with self._start_lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None:
            return

        async def _shutdown() -> None:
            if self._stop is not None:
                self._stop.set()
            if self._runner is not None:
                try:
                    await asyncio.wait_for(self._runner, 10.0)
                except BaseException:  # noqa: BLE001 - the session is going away either way
                    pass

        try:
            asyncio.run_coroutine_threadsafe(_shutdown(), loop).result(timeout=15.0)
        except Exception as exc:  # noqa: BLE001
            logger.debug("[agentic-tools] closing MCP server %s: %r", self.server, exc)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5.0)


class _CallToken:
    r"""Identity of one MCP call in `_CALL` (weakly referenced by `mcp_http.CallStreams`)."""


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def _describe_exc(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)  # an exception group (anyio task groups wrap the real cause)
    if isinstance(inner, (list, tuple)) and inner:
        return "; ".join(_describe_exc(e) for e in inner)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# ---------------------------------------------------------------------- shared connections
_POOL: dict[str, tuple[MCPServerConnection, int]] = {}
_POOL_LOCK = threading.Lock()


def _pool_key(server: dict[str, Any]) -> str:
    return canonical_json(
        {k: server.get(k) for k in (*SERVER_KEYS, "server", "connect_timeout_s", "max_result_bytes")}
    )


def acquire_connection(server: dict[str, Any]) -> MCPServerConnection:
    r"""The shared connection for these server settings (`server` label plus `SERVER_KEYS`), reference-counted."""
    key = _pool_key(server)
    with _POOL_LOCK:
        conn, refs = _POOL.get(key, (None, 0))
        if conn is None or conn._closed:
            conn, refs = MCPServerConnection(**server), 0
        _POOL[key] = (conn, refs + 1)
        return conn


def release_connection(conn: MCPServerConnection) -> None:
    r"""Drop one reference; the last one closes the connection."""
    with _POOL_LOCK:
        for key, (pooled, refs) in list(_POOL.items()):
            if pooled is conn:
                if refs > 1:
                    _POOL[key] = (pooled, refs - 1)
                    return
                del _POOL[key]
                break
    conn.close()


def _tool_entries(server: str, tools: Any) -> list[tuple[str, str | None]]:
    r"""`tools:` of a server entry as `(mcp tool name, tag or None)` pairs: names, or `{name, tag}` mappings."""
    if tools is None:
        return []
    if isinstance(tools, str):
        tools = [tools]
    if not isinstance(tools, list):
        raise ValueError(f"`tools` of MCP server `{server}` must be a list of tool names, got {describe_value(tools)}")
    out = []
    for item in tools:
        if isinstance(item, str) and item:
            out.append((item, None))
        elif isinstance(item, dict) and isinstance(item.get("name"), str) and set(item) <= {"name", "tag"}:
            out.append((item["name"], item.get("tag")))
        else:
            raise ValueError(
                f"`tools` of MCP server `{server}`: each item is a tool name or {{name: ..., tag: ...}}, got {describe_value(item)}"
            )
    for name, tag in out:
        _check_mcp_tag(server, name, tag)
    return out


def _check_mcp_tag(server: str, name: str, tag: str | None, listing: list[str] | None = None) -> None:
    r"""Refuse a server tool whose tag would be reserved (`think`, `answer`, `result`; docs/tools.md "Reserved tags").

    Raises:
        ValueError: naming the server, the tool and the `tools: [{name, tag}]` entry that renames it (with the other
            tools of `listing`, when the whole server was asked for).
    """
    effective = tag or name
    others = [n for n in (listing or []) if n != name]
    entry = ", ".join([*others, f"{{name: {name}, tag: {server}_{name}}}"])
    message = reserved_tag_error(effective, f"rename it in the server's entry with `tools: [{entry}]`")
    if message is not None:
        raise ValueError(f"MCP server `{server}`, tool {name!r}: {message}")


@register_tool("mcp")
class MCPTool(BaseTool):
    r"""One tool of an MCP server, called as `<tag>{json arguments}</tag>` (see the module docstring).

    A tool config names a whole server in `mcp_servers:` (docs/tools.md); `build_all` turns it into one tool per
    server tool. As a `tools:` entry (`name: mcp`), `params` take `tool` (one tool) or `tools` (several) beside the
    server settings.

    Args:
        tool: name of the tool on the server (the default tag; a name that is not a word needs a `tag`).
        server: label of the server (default: the command's or the URL's last part).
        command, args, env, cwd, url, headers, connect_timeout_s, max_result_bytes: the server
            (`MCPServerConnection`).
        input_schema: the tool's JSON schema (filled in from the server's listing by `build_all`); used to take a
            bare string body for a tool with one string property.
        max_output_chars: observation cap in characters (head and tail kept, default
            `agentic_python_max_output_chars`'s).
        connection: an already acquired shared connection (used by `build_all`; owned by the tool afterwards).
        **kwargs: `BaseTool` arguments (tag, timeout_s, retries, call_limit, dedup, backoff_s).

    Raises:
        ValueError: a bad server setting, a missing `tool`, a tool name that is not a usable tag without `tag`.
    """

    name = "mcp"
    default_tag = "mcp"

    def __init__(
        self,
        tool: str | None = None,
        server: str | None = None,
        command: str | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        headers: dict[str, str] | None = None,
        connect_timeout_s: float = 30.0,
        max_result_bytes: int = MCP_MAX_RESULT_BYTES,
        input_schema: dict[str, Any] | None = None,
        max_output_chars: int = PYTHON_MAX_OUTPUT_CHARS,
        connection: MCPServerConnection | None = None,
        **kwargs: Any,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        if not isinstance(tool, str) or not tool:
            raise ValueError("an MCP tool needs `tool`: the name of the tool on the server (or list them in `tools`)")
        import re

        if kwargs.get("tag") is None and not re.fullmatch(_TAG_PATTERN, tool):
            raise ValueError(
                f"MCP tool name {tool!r} is not a usable tag: give it one with {{name: {tool}, tag: ...}}"
            )
        if kwargs.get("tag") is None:
            kwargs["tag"] = tool
        super().__init__(**kwargs)
        self.name = self.tag  # the name the model calls it by: metrics, cache (`cache.tools`) and error texts
        self.mcp_tool = tool
        self.max_output_chars = check_number("max_output_chars", max_output_chars, integer=True, minimum=2,
                                             inclusive=True)  # fmt: skip
        self.input_schema = input_schema if isinstance(input_schema, dict) else None
        if connection is None:
            settings = _server_settings(server, command, args, env, cwd, url, headers, connect_timeout_s,
                                        max_result_bytes)  # fmt: skip
            MCPServerConnection(**settings)  # validates now; the pooled one is acquired below
            connection = acquire_connection(settings)
        self.connection = connection
        self.server = connection.server
        if headers:
            self.add_secrets(*[str(v) for v in headers.values()])

    @classmethod
    def accepted_params(cls, params: dict[str, Any]) -> set[str]:
        r"""Arguments a tool config may give (`tools` included, which `build_all` expands)."""
        import inspect

        names = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs", "connection"}
        return names | {"tools", "tag", "timeout_s", "retries", "call_limit", "dedup", "backoff_s"}

    @classmethod
    def build_all(cls, **kwargs: Any) -> list["MCPTool"]:
        r"""The tools of one server: `tool` (one) or `tools` (a list; None: every tool the server lists).

        Connects to the server and lists its tools, so a wrong command, an unreachable URL or a tool name the server
        does not have is reported before training starts.

        Raises:
            ValueError: a bad server setting, an unknown tool name (the message lists the server's tools), or a
                server that cannot be started or reached.
        """
        tools = kwargs.pop("tools", None)
        if kwargs.get("tool") is not None:
            if tools is not None:
                raise ValueError("give an MCP tool entry either `tool` (one) or `tools` (several), not both")
            wanted: list[tuple[str, str | None]] = [(kwargs.pop("tool"), kwargs.pop("tag", None))]
        else:
            wanted = _tool_entries(str(kwargs.get("server")), tools)
            if kwargs.get("tag") is not None:
                raise ValueError("a whole MCP server takes no `tag`: give each tool one with tools: [{name, tag}]")
            kwargs.pop("tag", None)
        server_kw = {k: kwargs.pop(k, None) for k in ("server", *SERVER_KEYS)}
        limits = {"connect_timeout_s": kwargs.pop("connect_timeout_s", 30.0),
                  "max_result_bytes": kwargs.pop("max_result_bytes", MCP_MAX_RESULT_BYTES)}  # fmt: skip
        settings = _server_settings(**limits, **server_kw)
        MCPServerConnection(**settings)  # validate before starting anything
        conn = acquire_connection(settings)
        built: list[MCPTool] = []
        try:
            try:
                listing = {t.name: t for t in conn.list_tools()}
            except ToolError as exc:
                raise ValueError(f"MCP server `{conn.server}` ({conn.describe()}): {exc}") from None
            if not wanted:
                wanted = [(name, None) for name in listing]
                for name in listing:
                    _check_mcp_tag(conn.server, name, None, list(listing))
            missing = [name for name, _ in wanted if name not in listing]
            if missing:
                raise ValueError(
                    f"MCP server `{conn.server}` has no tool {', '.join(map(repr, missing))}; it has: "
                    f"{', '.join(sorted(listing)) or 'none'}"
                )
            for name, tag in wanted:
                _check_mcp_tag(conn.server, name, tag)
                tool = cls(tool=name, tag=tag, input_schema=listing[name].input_schema, connection=conn,
                           headers=server_kw["headers"], **kwargs)  # fmt: skip
                if built:
                    acquire_connection(settings)  # one reference per tool: each tool's close() releases one
                built.append(tool)
        except BaseException:
            for tool in built:
                tool.close()
            if not built:
                release_connection(conn)
            raise
        return built

    def parse(self, content: str) -> dict[str, Any]:
        r"""Arguments object from the call body: a JSON object, or a bare string for a one-string-property tool.

        Raises:
            ToolError: the body is not a JSON object and the tool does not take a single string.
        """
        body = content.strip()
        if body.startswith("{"):
            try:
                value = json.loads(body)
            except json.JSONDecodeError as exc:
                raise ToolError(f"the call body is not valid JSON ({exc.msg} at character {exc.pos})") from None
            if isinstance(value, dict):
                return value
        single = self._single_string_property()
        if single is not None:
            return {single: body}
        props = sorted((self.input_schema or {}).get("properties") or {})
        example = "{" + ", ".join(f'"{p}": ...' for p in props) + "}"
        raise ToolError(f"<{self.tag}> takes a JSON object of arguments such as {example}, got {body[:80]!r}")

    def _single_string_property(self) -> str | None:
        props = (self.input_schema or {}).get("properties") or {}
        if len(props) == 1:
            (name, spec), = props.items()  # fmt: skip
            if isinstance(spec, dict) and spec.get("type") == "string":
                return name
        return None

    def cache_key(self, args: dict[str, Any]) -> str:
        r"""Canonical JSON of the arguments (sorted keys, compact)."""
        return canonical_json(args)

    def backend_name(self) -> str:
        r"""`mcp:<server>/<tool>` (stored in the cache metadata)."""
        return f"mcp:{self.server}/{self.mcp_tool}"

    def limit_observation(self, text: str) -> str:
        r"""`text` cut to `max_output_chars` (head and tail kept), as a live result is."""
        return truncate_middle(text, self.max_output_chars) if len(text) > self.max_output_chars else text

    def run(self, args: dict[str, Any]) -> ToolOutput:
        r"""One `tools/call` within `timeout_s`; see the module docstring for how results become observations."""
        result = self.connection.call_tool(self.mcp_tool, args, self.timeout_s)
        text = self.limit_observation(result_text(result))
        if getattr(result, "is_error", False):
            return ToolOutput(error_text(self.name, text or "the server reported an error"), STATUS_ERROR)
        if not text:
            return ToolOutput(empty_output_text(self.name), STATUS_EMPTY)
        return ToolOutput(text, STATUS_OK)

    def close(self) -> None:
        r"""Release this tool's reference to the shared server connection (the last one stops the server)."""
        conn, self.connection = getattr(self, "connection", None), None
        if conn is not None:
            release_connection(conn)

    def __repr__(self) -> str:
        r"""Standard `__repr__` (no headers: they may hold keys)."""
        return (
            f"MCPTool(tag={self.tag!r}, tool={self.mcp_tool!r}, server={self.server!r}, timeout_s={self.timeout_s}, "
            f"retries={self.retries})"
        )


def _server_settings(
    server: str | None = None,
    command: str | None = None,
    args: Any = None,
    env: Any = None,
    cwd: str | None = None,
    url: str | None = None,
    headers: Any = None,
    connect_timeout_s: float = 30.0,
    max_result_bytes: int = MCP_MAX_RESULT_BYTES,
) -> dict[str, Any]:
    if args is not None and not (isinstance(args, list) and all(isinstance(a, (str, int, float)) for a in args)):
        raise ValueError(f"MCP server `args` must be a list of strings, got {describe_value(args)}")
    for key, value in (("env", env), ("headers", headers)):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"MCP server `{key}` must be a mapping of names to strings, got {describe_value(value)}")
    if server is None:  # a label for messages: the host of the URL or the program's name
        from urllib.parse import urlsplit

        server = (urlsplit(str(url)).netloc if url else os.path.basename(str(command or ""))) or "mcp"
    return {
        "server": str(server),
        "command": command,
        "args": list(args or []),
        "env": dict(env or {}),
        "cwd": cwd,
        "url": url,
        "headers": dict(headers or {}),
        "connect_timeout_s": connect_timeout_s,
        "max_result_bytes": max_result_bytes,
    }


def result_text(result: Any) -> str:
    r"""Observation text of an MCP `CallToolResult`: its text parts joined by newlines.

    Resource parts give their text (or `[mime content]`), images and audio `[mime content]`; a result without
    parts gives its structured content as JSON.
    """
    parts: list[str] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(str(getattr(item, "text", "")))
        elif kind == "resource":
            resource = getattr(item, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(
                str(text) if text is not None else f"[{getattr(resource, 'mime_type', None) or 'binary'} content]"
            )
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(item, 'uri', '')}]")
        else:
            parts.append(f"[{getattr(item, 'mime_type', None) or kind or 'binary'} content]")
    text = "\n".join(p for p in parts if p).strip()
    if not text and getattr(result, "structured_content", None) is not None:
        text = canonical_json(result.structured_content)
    return text


def mcp_server_specs(path: str, entries: Any, environ: dict[str, str] | None = None) -> list[Any]:
    r"""`ToolSpec`s (tool `mcp`) of a tool config's `mcp_servers:` list, validated.

    Each entry: `name` (the server label), `command` + `args` (+ `env`, `cwd`) or `url` (+ `headers`), optional
    `tools` (names or `{name, tag}`; default every tool of the server), `timeout`, `retries`, `call_limit`, `dedup`,
    `connect_timeout`, `max_output_chars`, `max_result_bytes`.

    Raises:
        ToolConfigError: naming the file, the entry and the fix.
    """
    from .registry import ToolSpec, _check_entry, checked_entry

    if not isinstance(entries, list):
        raise ToolConfigError(f"{path}: `mcp_servers` must be a list of servers ({{name, command/args | url}})")
    allowed = ("name", "command", "args", "env", "cwd", "url", "headers", "tools", "timeout", "retries",
               "call_limit", "dedup", "connect_timeout", "max_output_chars", "max_result_bytes")  # fmt: skip
    specs = []
    for i, entry in enumerate(entries):
        where = f"{path}: mcp_servers[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ToolConfigError(f"{where} needs a `name` (a label for the server), got {describe_value(entry)}")
        where = f"{where} ({entry['name']})"
        if not set(entry) - set(allowed) and bool(entry.get("command")) == bool(entry.get("url")):
            raise ToolConfigError(
                f"{where} needs exactly one of `command` (a stdio server, with `args`) or `url` (a streamable-HTTP "
                "server such as http://127.0.0.1:8000/mcp)"
            )
        entry, secrets = checked_entry(where, entry, allowed, environ)
        _check_entry(where, entry)
        try:
            _tool_entries(entry["name"], entry.get("tools"))
            settings = _server_settings(entry["name"], *(entry.get(k) for k in SERVER_KEYS))
            if entry.get("connect_timeout") is not None:
                settings["connect_timeout_s"] = check_number("connect_timeout", entry["connect_timeout"])
            if entry.get("max_result_bytes") is not None:
                settings["max_result_bytes"] = check_number("max_result_bytes", entry["max_result_bytes"],
                                                            integer=True, minimum=1024, inclusive=True)  # fmt: skip
            if entry.get("max_output_chars") is not None:
                check_number("max_output_chars", entry["max_output_chars"], integer=True, minimum=2, inclusive=True)
        except ValueError as exc:
            raise ToolConfigError(f"{where}: {exc}") from None
        params = {**settings, "tools": entry.get("tools")}
        if entry.get("max_output_chars") is not None:
            params["max_output_chars"] = entry["max_output_chars"]
        specs.append(
            ToolSpec(
                name="mcp",
                timeout=entry.get("timeout"),
                retries=entry.get("retries"),
                call_limit=entry.get("call_limit"),
                dedup=entry.get("dedup"),
                params=params,
                secrets=secrets,
                where=where,
            )
        )
    return specs


__all__ = [
    "MCPServerConnection",
    "MCPTool",
    "acquire_connection",
    "mcp_server_specs",
    "release_connection",
    "result_text",
]
