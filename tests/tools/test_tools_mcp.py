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

"""The MCP client tool (tools/mcp_tool.py) against a real MCP server process (tests/tools/mcp_test_server.py).

Every call goes through `build_executor_from_args` and `ToolExecutor`, the path rollouts use: tools named by the
server's tool names, the SQLite tool cache, timeouts, a killed server (stdio and streamable HTTP) and retries.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamafactory_agentic.tools import ToolCall, build_executor_from_args, load_tool_config
from llamafactory_agentic.tools.registry import ToolConfigError


SERVER = Path(__file__).with_name("mcp_test_server.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_config(tmp_path: Path, server_yaml: str, cache_tools: str = "[add, lookup, calls]") -> Path:
    config = tmp_path / "tools.yaml"
    config.write_text(
        f"mcp_servers:\n{server_yaml}cache:\n  path: {tmp_path / 'cache.sqlite'}\n  tools: {cache_tools}\n"
    )
    return config


def _stdio_server(pid_file: Path, extra: str = "") -> str:
    return (
        f"  - name: calc\n    command: {sys.executable}\n    args: ['{SERVER}', stdio]\n"
        f"    env: {{MCP_TEST_PID_FILE: '{pid_file}'}}\n{extra}"
    )


def _executor(config: Path):
    return build_executor_from_args(SimpleNamespace(agentic_tool_config=str(config)))


def _kill(pid_file: Path) -> None:
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    time.sleep(0.3)  # let the client's reader see the pipe close


def _one(ex, tool: str, body: str):
    return ex.execute([ToolCall(tool, body, "traj-0")])[0]


def test_mcp_stdio_tools_by_name_cached(tmp_path):
    """One server entry gives one tool per server tool, each called by its name; a repeated call is a cache hit."""
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    timeout: 20\n"))
    with _executor(config) as ex:
        assert {"add", "lookup", "sleep", "fail", "calls"} <= set(ex.tools)
        r = _one(ex, "add", '{"a": 2, "b": 40}')
        assert (r.text, r.status, r.cached) == ("42", "ok", False)
        r = _one(ex, "lookup", "france")  # one string property: a bare body is that argument
        assert (r.text, r.status) == ("Paris", "ok")
        assert ex.cache.flush(10)
        again = _one(ex, "add", '{"b": 40,  "a": 2}')  # same arguments, other order and spacing: same cache key
        assert (again.text, again.status, again.cached) == ("42", "ok", True)
        served = _one(ex, "calls", "{}")
        assert served.text == "3"  # add, lookup, calls: the cached add never reached the server
        metrics = ex.pop_metrics()
        assert metrics["tools/add/cache_hits"] == 1 and metrics["tools/add/calls"] == 2
        entry = ex.cache.get("add", '{"a":2,"b":40}')
        assert entry is not None and entry.result == "42" and entry.backend == "mcp:calc/add"


def test_mcp_error_result_and_bad_body_are_observations(tmp_path):
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    timeout: 20\n    retries: 3\n"))
    with _executor(config) as ex:
        r = _one(ex, "fail", '{"message": "no such row"}')
        assert r.status == "error" and "no such row" in r.text and r.text.startswith("Error: Tool(fail)")
        r = _one(ex, "add", "two plus two")
        assert r.status == "error" and '{"a": ..., "b": ...}' in r.text
        r = _one(ex, "add", '{"a": 1')
        assert r.status == "error" and "not valid JSON" in r.text
        assert _one(ex, "calls", "{}").text == "2"  # the isError result was not retried, bad bodies never sent
        assert ex.cache.flush(10) and ex.cache.count("fail") == 0


def test_mcp_timeout_returns_quickly_and_server_stays_usable(tmp_path):
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    timeout: 1.5\n    retries: 3\n"))
    with _executor(config) as ex:
        start = time.perf_counter()
        r = _one(ex, "sleep", '{"seconds": 30}')
        elapsed = time.perf_counter() - start
        assert r.status == "timeout" and "within 1.5 seconds" in r.text
        assert elapsed < 4.0, elapsed  # bounded by the tool's timeout, not by the server's 30 s
        assert _one(ex, "add", '{"a": 1, "b": 1}').text == "2"


def test_mcp_stdio_server_crash_is_an_observation_then_reconnects(tmp_path):
    pid_file = tmp_path / "pid"
    config = _write_config(tmp_path, _stdio_server(pid_file, "    timeout: 20\n    retries: 1\n"))
    with _executor(config) as ex:
        assert _one(ex, "add", '{"a": 1, "b": 2}').text == "3"
        first_pid = pid_file.read_text()
        _kill(pid_file)
        start = time.perf_counter()
        r = _one(ex, "add", '{"a": 5, "b": 5}')
        assert r.status == "error" and "connection to MCP server `calc` lost" in r.text
        assert time.perf_counter() - start < 2.0
        r = _one(ex, "add", '{"a": 5, "b": 5}')  # the next call starts the server again
        assert (r.text, r.status) == ("10", "ok")
        assert pid_file.read_text() != first_pid and ex.tools["add"].connection.connects == 2


def test_mcp_crash_is_retried_within_the_call(tmp_path):
    pid_file = tmp_path / "pid"
    config = _write_config(tmp_path, _stdio_server(pid_file, "    timeout: 30\n    retries: 2\n"))
    with _executor(config) as ex:
        assert _one(ex, "lookup", "japan").text == "Tokyo"
        _kill(pid_file)
        r = _one(ex, "lookup", "peru")  # attempt 1: connection lost; attempt 2 reconnects
        assert (r.text, r.status) == ("Lima", "ok")
        assert ex.pop_metrics()["tools/lookup/backend_calls"] == 2  # two executions, each ended as one result


def _start_http_server(port: int, mode: str = "http") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(SERVER), mode, str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                pytest.fail("the streamable-HTTP MCP test server exited")
            time.sleep(0.1)
    proc.kill()
    pytest.fail("the streamable-HTTP MCP test server did not start")


def test_mcp_streamable_http_server(tmp_path):
    port = _free_port()
    proc = _start_http_server(port)
    try:
        server = (
            f"  - name: web\n    url: http://127.0.0.1:{port}/mcp\n    headers: {{X-Token: '${{MCP_TEST_TOKEN}}'}}\n"
            "    tools: [add, {name: lookup, tag: capital}]\n    timeout: 10\n    retries: 1\n"
        )
        config = _write_config(tmp_path, server, cache_tools="[add, capital]")
        os.environ["MCP_TEST_TOKEN"] = "tok-1234-secret"
        try:
            ex = _executor(config)
        finally:
            del os.environ["MCP_TEST_TOKEN"]
        with ex:
            assert set(ex.tools) == {"add", "capital"}  # only the listed tools, `lookup` under its own tag
            assert _one(ex, "capital", '{"key": "peru"}').text == "Lima"
            assert _one(ex, "add", '{"a": 20, "b": 22}').text == "42"
            assert "tok-1234-secret" not in repr(ex.tools["add"])
            proc.kill()
            proc.wait()
            r = _one(ex, "add", '{"a": 1, "b": 1}')
            assert r.status == "error" and "MCP server `web`" in r.text
            r = _one(ex, "add", '{"a": 1, "b": 1}')  # still down: a clear connect error, quickly
            assert r.status == "error" and "cannot connect to MCP server `web`" in r.text
            proc = _start_http_server(port)
            r = _one(ex, "add", '{"a": 1, "b": 1}')  # back: the next call reconnects
            assert (r.text, r.status) == ("2", "ok")
            assert ex.cache.flush(10)
            assert _one(ex, "capital", '{"key": "peru"}').cached  # cached before the restart
    finally:
        proc.kill()
        proc.wait()


def test_mcp_tool_as_plain_tools_entry(tmp_path):
    config = tmp_path / "tools.yaml"
    config.write_text(
        "tools:\n  - name: mcp\n    tag: capital\n    timeout: 20\n"
        f"    params: {{command: '{sys.executable}', args: ['{SERVER}', stdio], tool: lookup}}\n"
    )
    with _executor(config) as ex:
        assert set(ex.tools) == {"capital"}
        assert _one(ex, "capital", "Japan").text == "Tokyo"


@pytest.mark.parametrize(
    "server_yaml, message",
    [
        ("  - name: calc\n    command: python\n    url: http://x/mcp\n", "exactly one of `command`"),
        ("  - name: calc\n", "exactly one of `command`"),
        ("  - name: calc\n    command: python\n    toolz: [add]\n", "unknown keys ['toolz']"),
        ("  - {command: python}\n", "needs a `name`"),
        ("  - name: calc\n    command: python\n    timeout: -1\n", "`timeout` must be a number > 0"),
        ("  - name: calc\n    command: python\n    tools: [{name: add, tagg: x}]\n", "each item is a tool name"),
    ],
)
def test_mcp_config_errors_name_the_entry(tmp_path, server_yaml, message):
    config = tmp_path / "tools.yaml"
    config.write_text(f"mcp_servers:\n{server_yaml}")
    with pytest.raises(ToolConfigError) as info:
        load_tool_config(config)
    assert "mcp_servers[0]" in str(info.value) and message in str(info.value)


def test_mcp_unknown_tool_and_dead_command_fail_before_training(tmp_path):
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    tools: [add, multiply]\n"))
    with pytest.raises(ToolConfigError, match=r"mcp_servers\[0\] \(calc\): .*has no tool 'multiply'; it has: add"):
        _executor(config)
    config = _write_config(
        tmp_path, "  - name: broken\n    command: /nonexistent/mcp-server\n    connect_timeout: 5\n"
    )
    with pytest.raises(ToolConfigError, match=r"mcp_servers\[0\] \(broken\): .*cannot connect to MCP server"):
        _executor(config)


def test_mcp_duplicate_tag_is_refused(tmp_path):
    config = tmp_path / "tools.yaml"
    server = _stdio_server(tmp_path / "pid", "    tools: [add]\n")
    config.write_text(
        "tools:\n  - name: my_add\n    class: http\n    tag: add\n    params: {url: 'http://127.0.0.1:9/x'}\n"
        f"mcp_servers:\n{server}"
    )
    with pytest.raises(ToolConfigError, match=r"tag <add> is already used by tool"):
        _executor(config)


# ---------------------------------------------------------------------- reserved tags (issue 34 medium 11)
@pytest.mark.parametrize("tag", ["think", "answer", "result"])
def test_reserved_tags_are_refused_by_name(tmp_path, tag):
    # before: accepted; `think` received every thought, `answer` never ran, `result` became a stop string
    config = tmp_path / "tools.yaml"
    config.write_text(f"tools:\n  - name: python\n    tag: {tag}\n")
    with pytest.raises(ToolConfigError) as info:
        load_tool_config(config)
    message = str(info.value)
    assert f"tools[0] (python): tag <{tag}> is reserved" in message and f"`tag: {tag}_tool` in this entry" in message


def _think_server(pid_file: Path, extra: str) -> str:
    # the test server with a tool named `think` (its `env` sets MCP_TEST_THINK)
    return _stdio_server(pid_file, extra).replace("env: {", "env: {MCP_TEST_THINK: '1', ", 1)


def test_an_mcp_think_tool_is_refused_with_the_rename_and_works_renamed(tmp_path):
    config = _write_config(tmp_path, _think_server(tmp_path / "pid", "    tools: [add, think]\n"))
    with pytest.raises(ToolConfigError, match=r"mcp_servers\[0\] \(calc\): MCP server `calc`, tool 'think': tag "
                       r"<think> is reserved .*`tools: \[\{name: think, tag: calc_think\}\]`"):  # fmt: skip
        load_tool_config(config)  # a listed tool: refused when the file is read
    config = _write_config(tmp_path, _think_server(tmp_path / "pid", "    timeout: 20\n"))
    with pytest.raises(ToolConfigError) as info:
        _executor(config)  # every tool of the server: refused when the server lists it, before training
    assert "MCP server `calc`, tool 'think': tag <think> is reserved" in str(info.value)
    assert "{name: think, tag: calc_think}]`" in str(info.value) and "tools: [add, lookup" in str(info.value)
    renamed = "    tools: [add, {name: think, tag: calc_think}]\n    timeout: 20\n"
    config = _write_config(tmp_path, _think_server(tmp_path / "pid", renamed))
    with _executor(config) as ex:
        assert set(ex.tools) == {"add", "calc_think"}
        assert _one(ex, "calc_think", "plan the search").text == "noted: plan the search"


# ---------------------------------------------------------------------- issue 34 medium 9 and lows
def test_mcp_schema_violation_is_that_calls_error_only(tmp_path):
    # before: the client's RuntimeError dropped the shared session: the concurrent `sleep` on the same server died
    # with "connection to MCP server `calc` lost" and the server process was restarted
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    timeout: 20\n    retries: 1\n"))
    with _executor(config) as ex:
        slow, bad = ex.execute([ToolCall("sleep", '{"seconds": 2}', "traj-0"), ToolCall("bad_output", "{}", "traj-1")])
        assert (slow.text, slow.status) == ("slept 2.0", "ok")
        assert bad.status == "error" and "a result the client refused" in bad.text
        assert "'seven' is not of type 'integer'" in bad.text
        assert ex.tools["add"].connection.connects == 1  # one session all along


def test_mcp_huge_stdio_result_is_refused_fast_and_the_next_call_answers(tmp_path):
    # before: 20 MB took the SDK's quadratic reader past the 8 s timeout (and a 50 MB result took 40 s), and the next
    # call timed out behind it; now the line is dropped at the byte bound (default 4 MiB) as it streams in
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    timeout: 8\n    retries: 1\n"))
    with _executor(config) as ex:
        start = time.perf_counter()
        r = _one(ex, "big", '{"n_bytes": 20000000}')
        elapsed = time.perf_counter() - start
        assert r.status == "error" and "over the bound of 4194304 bytes (`max_result_bytes`" in r.text, r.text
        assert elapsed < 6.0, elapsed  # the server's own JSON encoding of 40 MB is most of it
        start = time.perf_counter()
        assert _one(ex, "add", '{"a": 1, "b": 2}').text == "3"
        assert time.perf_counter() - start < 1.0
        assert _one(ex, "big", '{"n_bytes": 1000}').text == "x" * 1000  # under the bound: whole
        assert ex.tools["add"].connection.connects == 1


def test_mcp_max_result_bytes_is_an_entry_key(tmp_path):
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    max_result_bytes: 20000\n    timeout: 10\n"))
    with _executor(config) as ex:
        assert _one(ex, "big", '{"n_bytes": 9000}').status == "ok"
        r = _one(ex, "big", '{"n_bytes": 30000}')
        assert r.status == "error" and "over the bound of 20000 bytes" in r.text
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    max_result_bytes: 10\n"))
    with pytest.raises(ToolConfigError, match=r"mcp_servers\[0\] \(calc\): `max_result_bytes` must be a whole number"):
        load_tool_config(config)


@pytest.mark.parametrize("half_line", [False, True])
def test_mcp_wedged_stdio_server_is_restarted_after_a_timeout(tmp_path, half_line):
    # before: a server that stopped answering (here SIGSTOP, after half a JSON-RPC line or none) was kept: every
    # later call timed out too, for good
    pid_file = tmp_path / "pid"
    extra = "    timeout: 1.5\n    retries: 2\n"
    config = _write_config(tmp_path, _stdio_server(pid_file, extra))
    with _executor(config) as ex:
        first_pid = pid_file.read_text()
        r = _one(ex, "wedge", json.dumps({"half_line": half_line}))
        assert r.status == "timeout"
        start = time.perf_counter()
        while time.perf_counter() - start < 20.0:  # a call waits for the ping (1.5 s), then the server restarts
            r = _one(ex, "add", '{"a": 20, "b": 22}')  # (a call that runs past its 1.5 s meanwhile: "timeout")
            if r.status == "ok":
                break
        assert (r.text, r.status) == ("42", "ok"), r.text
        connection = ex.tools["add"].connection
        assert connection.restarts == 1 and pid_file.read_text() != first_pid
        deadline = time.perf_counter() + 3.0  # killed at once (no exit grace), reaped by the closing transport
        while True:
            try:
                os.kill(int(first_pid), 0)
            except ProcessLookupError:
                break
            if time.perf_counter() > deadline:
                pytest.fail(f"the wedged server {first_pid} is still alive 3 s after the restart")
            time.sleep(0.05)


def test_mcp_busy_server_is_not_restarted_by_a_timeout(tmp_path):
    # the ping after a timeout tells a busy server (answers the ping) from a wedged one: no restart, no lost calls
    config = _write_config(tmp_path, _stdio_server(tmp_path / "pid", "    timeout: 1\n    retries: 1\n"))
    with _executor(config) as ex:
        assert _one(ex, "sleep", '{"seconds": 10}').status == "timeout"
        assert _one(ex, "add", '{"a": 1, "b": 1}').text == "2"
        assert ex.tools["add"].connection.restarts == 0 and ex.tools["add"].connection.connects == 1


def test_mcp_stdio_server_gets_an_allowlisted_environment(tmp_path, monkeypatch):
    # before: the server inherited the trainer's whole environment and echoed HF_TOKEN / OPENAI_API_KEY back
    monkeypatch.setenv("HF_TOKEN", "hf_trainer_secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-trainer-secret")
    server = _stdio_server(tmp_path / "pid", "    timeout: 10\n").replace(
        "env: {", "env: {SERVER_KEY: given-on-purpose, ", 1
    )
    config = _write_config(tmp_path, server)
    with _executor(config) as ex:
        assert _one(ex, "env", "HF_TOKEN").text == "<unset>"
        assert _one(ex, "env", "OPENAI_API_KEY").text == "<unset>"
        assert _one(ex, "env", "PATH").text == os.environ["PATH"]  # on the allowlist
        assert _one(ex, "env", "SERVER_KEY").text == "given-on-purpose"  # named in the entry's `env`


def _connections_to(port: int) -> int:
    import psutil

    return sum(1 for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port == port
               and c.status == psutil.CONN_ESTABLISHED)  # fmt: skip


@pytest.mark.parametrize("mode", ["http", "http-json"])  # answers as SSE streams or as one JSON body
def test_mcp_http_stream_of_a_timed_out_call_is_closed_and_results_are_bounded(tmp_path, mode):
    # before: each timed-out call kept its POST response stream (one TCP connection) open until the server answered
    # (3 timed-out calls: 4 connections); now the call's stream is closed when it times out. And an answer over
    # `max_result_bytes` was an SSE "lost connection" (the session was reopened, the call retried) or, as a JSON body,
    # read whole (5 MB); now it is that call's error either way, not retried
    port = _free_port()
    proc = _start_http_server(port, mode)
    try:
        server = f"  - name: web\n    url: http://127.0.0.1:{port}/mcp\n    timeout: 1\n    retries: 2\n"
        config = _write_config(tmp_path, server, cache_tools="[]")
        with _executor(config) as ex:
            assert _one(ex, "add", '{"a": 1, "b": 1}').text == "2"
            before = _connections_to(port)
            for _ in range(3):  # `block` runs in a server thread that no cancellation stops (6 s)
                assert _one(ex, "block", '{"seconds": 6}').status == "timeout"
            time.sleep(0.3)
            assert _connections_to(port) <= before, (before, _connections_to(port))
            assert _one(ex, "add", '{"a": 2, "b": 2}').text == "4"
            served = int(_one(ex, "calls", "{}").text)
            r = _one(ex, "big", '{"n_bytes": 5000000}')
            assert r.status == "error" and "over the bound of 4194304 bytes (`max_result_bytes`" in r.text, r.text
            assert int(_one(ex, "calls", "{}").text) == served + 2  # `big` once (not retried), then this `calls`
            assert ex.tools["add"].connection.connects == 1
    finally:
        proc.kill()
        proc.wait()
