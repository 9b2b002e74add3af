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

"""Per-trajectory environments (docs/tools.md "Environments"): the `python_session` interpreter in its real sandbox
(bubblewrap here, or the strongest one the machine has), the executor around it, a real SQLite cache, and a trainer
process killed with SIGKILL."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from llamafactory_agentic.tools import ToolCall, ToolExecutor, open_cache
from llamafactory_agentic.tools.environment import Environment, EnvironmentTool
from llamafactory_agentic.tools.python_session import SESSION_MARK, PythonSession, PythonSessionTool
from llamafactory_agentic.tools.registry import ToolConfigError, load_tool_config, resolve_tool_class


REPO = Path(__file__).resolve().parents[2]


def session_processes(token: str | None = None) -> list[int]:
    r"""Host pids of live session interpreters (of one session when `token` is given), from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and SESSION_MARK.encode() in argv and (token is None or token.encode() in argv):
            pids.append(int(entry))
    return pids


def call(executor, code, trajectory="t"):
    return executor.execute([ToolCall("python_session", code, trajectory)])[0]


@pytest.fixture()
def executor():
    ex = ToolExecutor([PythonSessionTool(timeout_s=10)])
    yield ex
    ex.close()


def test_variables_persist_per_trajectory_and_the_python_tool_stays_stateless(executor):
    assert call(executor, "x = 40", "a").status == "empty"
    assert call(executor, "def f(y):\n    return x + y", "a").status == "empty"
    assert call(executor, "f(2)", "a").text == "42"
    other = call(executor, "x", "b")  # another trajectory: its own interpreter
    assert other.status == "error" and "NameError: name 'x' is not defined" in other.text
    assert other.text.startswith('Traceback (most recent call last):\n  File "<stdin>", line 1')
    from llamafactory_agentic.tools import PythonTool

    with ToolExecutor([PythonTool(timeout_s=10)]) as stateless:  # unchanged: a fresh interpreter per call
        assert stateless.execute([ToolCall("python", "x = 1", "a")])[0].status == "empty"
        assert "NameError" in stateless.execute([ToolCall("python", "x", "a")])[0].text
    metrics = executor.pop_metrics()
    assert metrics["tools/python_session/calls"] == 4 and metrics["tools/python_session/sessions_created"] == 2
    level = PythonSessionTool().isolation_report().level
    assert metrics[f"tools/python_session/calls_at_{level}"] == 4


def test_forked_trajectory_sees_the_shared_calls_only(executor):
    call(executor, "a = 1", "src")
    call(executor, "b = 2", "src")
    executor.fork_trajectory("src", "branch")  # an ARPO branch after call 2
    call(executor, "c = 3", "src")
    call(executor, "d = 4", "branch")
    names = "sorted(k for k in globals() if len(k) == 1)"
    assert call(executor, names, "src").text == "['a', 'b', 'c']"
    assert call(executor, names, "branch").text == "['a', 'b', 'd']"
    metrics = executor.pop_metrics()
    assert metrics["tools/python_session/forks"] == 1 and metrics["tools/python_session/replayed_calls"] == 2


def test_timeout_restarts_the_session_and_a_branch_replays_only_what_survived():
    executor = ToolExecutor([PythonSessionTool(timeout_s=2)])
    call(executor, "x = 1", "t")
    hung = call(executor, "while True:\n    pass", "t")
    assert hung.status == "timeout"
    assert hung.text == "Execution timed out after 2 seconds. The session was restarted: its variables are lost."
    assert "NameError" in call(executor, "x", "t").text  # lost with the interpreter
    call(executor, "y = 5", "t")
    executor.fork_trajectory("t", "t2")
    assert call(executor, "y * 2", "t2").text == "10"  # replayed: `y = 5` only (x and the endless loop are gone)
    assert executor.pop_metrics()["tools/python_session/replayed_calls"] == 2  # the failed `x` lookup, `y = 5`
    executor.close()


def test_replay_has_its_own_budget_and_resumes_at_the_next_call():
    for replay_timeout_s, first in ((10, "3"), (0.5, None)):
        with ToolExecutor([PythonSessionTool(timeout_s=3, replay_timeout_s=replay_timeout_s)]) as executor:
            call(executor, "import time\ntime.sleep(1.2)\na = 1", "t")
            call(executor, "time.sleep(1.2)\nb = 2", "t")
            executor.fork_trajectory("t", "u")
            result = call(executor, "a + b", "u")  # replays 2.4 s of calls, then runs its own within 3 s
            if first is not None:
                assert result.text == first and result.status == "ok"
                continue
            assert result.status == "timeout"
            assert result.text == (
                "Error: Tool(python_session) execution failed with message: the environment could not be restored "
                "within 0.5 seconds (1 earlier calls still to replay); try again"
            )
            assert call(executor, "a + b", "u").text == "3"  # the replay went on where it stopped
            assert executor.pop_metrics()["tools/python_session/replayed_calls"] == 2


def test_state_and_output_are_bounded():
    tool = PythonSessionTool(timeout_s=20, memory_mb=512, max_output_chars=100)
    with ToolExecutor([tool]) as executor:
        call(executor, "keep = 7", "t")
        big = call(executor, "blob = bytearray(2 * 1024**3)", "t")  # past RLIMIT_AS: an ordinary MemoryError
        assert big.status == "error" and big.text.rstrip().endswith("MemoryError")
        assert call(executor, "keep", "t").text == "7"  # the session survived with its state
        out = call(executor, "print('a' * 100000)", "t")
        assert out.text.startswith("a" * 50 + "\n[… 99900 characters omitted …]\n") and out.text.endswith("a" * 50)
        assert len(out.text) < 200


def test_sessions_close_with_their_trajectory_and_with_the_executor(executor):
    tool = executor.tools["python_session"]
    call(executor, "x = 1", "a")
    call(executor, "x = 1", "b")
    tokens = {t: s.env.token for t, s in tool._sessions.items()}
    assert all(session_processes(tok) for tok in tokens.values())
    executor.forget_trajectories(["a"])  # what the agent loop does when trajectory `a` finishes
    assert tool.live_sessions() == ["b"] and not session_processes(tokens["a"]) and session_processes(tokens["b"])
    executor.close()
    assert not session_processes(tokens["b"])


def test_least_recently_used_session_is_closed_and_rebuilt_by_replay():
    with ToolExecutor([PythonSessionTool(timeout_s=10, max_sessions=1)]) as executor:
        call(executor, "x = 1", "a")
        call(executor, "x = 2", "b")  # closes a's interpreter (only one kept)
        assert executor.pop_metrics()["tools/python_session/sessions_live"] == 1
        assert call(executor, "x", "a").text == "1"  # rebuilt by replaying `x = 1`
        assert call(executor, "x", "b").text == "2"


def test_results_never_come_from_the_cache(tmp_path):
    cache = open_cache(str(tmp_path / "cache.sqlite"), mode="read_write")
    executor = ToolExecutor([PythonSessionTool(timeout_s=10)], cache=cache, cache_tools=["python_session"])
    try:
        call(executor, "x = 1", "a")
        call(executor, "x = 2", "b")
        assert call(executor, "x", "a").text == "1" and call(executor, "x", "b").text == "2"
        metrics = executor.pop_metrics()
        assert metrics["tools/python_session/cache_hits"] == 0 and metrics["tools/python_session/cache_misses"] == 0
    finally:
        executor.close()
    import sqlite3

    with sqlite3.connect(tmp_path / "cache.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 0


def test_tool_config_reaches_built_in_and_own_environments(tmp_path, monkeypatch):
    (tmp_path / "counter_env.py").write_text(
        textwrap.dedent(
            """
            from llamafactory_agentic.tools import ToolOutput
            from llamafactory_agentic.tools.environment import Environment

            class Counter(Environment):
                name = "counter"
                default_tag = "count"

                def __init__(self, start: int = 0):
                    self.value = start

                def step(self, call, timeout_s):
                    self.value += int(call)
                    return ToolOutput(str(self.value))

                def fork(self):
                    twin = Counter()
                    twin.value = self.value
                    return twin
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "tools.yaml"
    config.write_text(
        "tools:\n  - name: python_session\n    timeout: 5\n    params: {memory_mb: 1024, max_sessions: 8}\n"
        "  - name: counter_env:Counter\n    params: {start: 10}\n"
    )
    from llamafactory_agentic.tools.registry import build_tool

    specs = load_tool_config(config).tools
    tools = [build_tool(spec) for spec in specs]
    assert isinstance(tools[0], PythonSessionTool) and tools[0].params["memory_mb"] == 1024
    assert isinstance(tools[1], EnvironmentTool) and tools[1].tag == "count"
    with ToolExecutor(tools) as executor:
        assert executor.execute([ToolCall("count", "5", "a")])[0].text == "15"
        executor.fork_trajectory("a", "b")  # copied by Counter.fork, no replay
        results = executor.execute([ToolCall("count", "1", "a"), ToolCall("count", "100", "b")])
        assert [r.text for r in results] == ["16", "115"]
        assert executor.execute([ToolCall("count", "x", "a")])[0].text.startswith(
            "Error: Tool(counter) execution failed with message: ValueError: invalid literal"
        )  # an exception of the environment is an observation; its state is kept
        assert executor.execute([ToolCall("count", "1", "a")])[0].text == "17"
        metrics = executor.pop_metrics()
        assert metrics["tools/counter/forks_copied"] == 1 and metrics["tools/counter/replayed_calls"] == 0
    config.write_text("tools:\n  - name: counter_env:Counter\n    params: {begin: 1}\n")
    with pytest.raises(ToolConfigError, match=r"1 unknown param .*accepts .*start"):
        load_tool_config(config)
    config.write_text("tools:\n  - name: python_session\n    params: {isolation: chroot}\n")
    with pytest.raises(ToolConfigError, match="`isolation` must be auto or one of"):
        build_tool(load_tool_config(config).tools[0])
    config.write_text("tools:\n  - name: python_session\n    dedup: true\n")
    with pytest.raises(ToolConfigError, match="`dedup` must be false"):
        build_tool(load_tool_config(config).tools[0])
    assert resolve_tool_class("python_session") is PythonSessionTool
    assert issubclass(resolve_tool_class("llamafactory_agentic.tools.python_session:PythonSession"), EnvironmentTool)
    assert not issubclass(PythonSession, EnvironmentTool) and issubclass(PythonSession, Environment)


TRAINER = """
import sys, time
from llamafactory_agentic.tools.python_session import PythonSession
session = PythonSession(timeout_s=60, isolation=sys.argv[1])
print(session.step("x = 1", 10).status, session.token, flush=True)
if sys.argv[2] == "busy":
    session.proc.stdin.write(b'{"code": "while True: pass", "cpu": 60}\\n')
    session.proc.stdin.flush()
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("isolation,phase", [("auto", "idle"), ("auto", "busy"), ("rlimits-only", "busy")])
def test_killed_trainer_leaves_no_interpreter(isolation, phase):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, isolation, phase], stdout=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)  # fmt: skip
    try:
        status, token = proc.stdout.readline().split()
        assert status == "empty" and proc.stdout.readline().strip() == "ready"
        assert session_processes(token)
        time.sleep(0.5)  # the busy loop is running
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while session_processes(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not session_processes(token), f"session interpreter survived its trainer ({isolation}, {phase})"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_run_keys_are_the_sessions_defaults_and_min_isolation_covers_them(tmp_path):
    from types import SimpleNamespace

    from llamafactory_agentic.tools import build_executor_from_args
    from llamafactory_agentic.tools.sandbox.isolation import IsolationError

    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - name: python_session\n")
    args = SimpleNamespace(agentic_tool_config=str(config), agentic_cache_path=None, agentic_python_timeout=7,
                           agentic_python_max_output_chars=300, agentic_python_min_isolation="unprivileged")  # fmt: skip
    with build_executor_from_args(args) as executor:
        tool = executor.tools["python_session"]
        assert tool.call_timeout_s == 7 and tool.params["timeout_s"] == 7 and tool.params["max_output_chars"] == 300
        assert tool.timeout_s == 21  # the executor waits for a replay (7 s + its last call's 7 s) and the call (7 s)
        assert call(executor, "print('z' * 1000)").text.count("z") == 300
    config.write_text("tools:\n  - name: python_session\n    params: {isolation: rlimits-only}\n")
    args.agentic_python_min_isolation = "confined"  # rlimits-only gives at most `unprivileged`
    with pytest.raises(IsolationError, match="agentic_python_min_isolation: confined"):
        build_executor_from_args(args)
