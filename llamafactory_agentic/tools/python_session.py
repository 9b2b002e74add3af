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

"""`python_session`: one sandboxed interpreter per trajectory whose variables persist across its calls.

The interpreter is started in the python tool's sandbox (`tools/sandbox/isolation.py`: same isolation levels, per-call
uid, resource limits, private /tmp of `disk_mb`, scrubbed environment) and runs `SESSION_REPL`, a small loop that reads
one call per line on a pipe, runs it in one namespace and answers with its bounded output (docs/tools.md
"Environments"). Per call as in the python tool (docs/algorithms.md §7.2): a last bare expression is printed, exit
of the code with status 0 -> stdout, an exception -> the traceback (stderr), empty -> `Tool(python_session) returned
empty output.`; plus:

* deadline: `timeout_s` wall clock per call; past it the interpreter is killed and restarted: `Execution timed out
  after N seconds. The session was restarted: its variables are lost.`;
* CPU: each call may use `cpu_time_s` seconds (SIGXCPU raises in the code); the whole session `session_cpu_time_s`
  (the hard limit: the kernel kills the interpreter, which restarts);
* state: RLIMIT_AS of `memory_mb` bounds everything the session holds (a `MemoryError` is an ordinary exception);
  output is cut to `max_output_chars` per call; files go to the sandbox's /tmp of `disk_mb`;
* lifetime: closed with its trajectory (process group and per-call uid killed). A killed trainer leaves nothing
  behind: the `bwrap`/`unshare` sandboxes die with the launcher thread (`--die-with-parent`), and at every level the
  interpreter ends itself when the pipe from the trainer hangs up (a watchdog thread polls it) or its parent dies
  (`PR_SET_PDEATHSIG`).
"""

import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..common.log import get_logger
from ..hparams import PYTHON_ISOLATION, PYTHON_MAX_OUTPUT_CHARS, PYTHON_TIMEOUT_S
from .base import (
    STATUS_ERROR,
    STATUS_TIMEOUT,
    ToolOutput,
    TransientToolError,
    check_number,
    truncate_middle,
)
from .environment import RESET_META, Environment, environment_tool
from .registry import register_tool
from .sandbox import percall
from .sandbox.isolation import (
    _RLIMIT_NAMES,
    DISK_MB,
    RUN_AS,
    SANDBOXES,
    SYSTEM_PATH,
    _code_env,
    _code_workdir,
    _limits,
    _sandbox_command,
    measure_isolation,
)
from .sandbox.process import code_result, rewrite_last_expression, timeout_text


logger = get_logger(__name__)

SESSION_MARK = "lfa-python-session"  # argv of every session interpreter (found in /proc by tests and `doctor`)
RESTARTED = "The session was restarted: its variables are lost."

# The interpreter's loop, run with `python -c SESSION_REPL SESSION_MARK MAX_BYTES TOKEN`. Protocol on the original
# stdin/stdout (kept on private descriptors; the code's stdin is /dev/null, its stdout and stderr are files in the
# working directory): the trainer sends one JSON line {"code": str, "cpu": int}, the loop answers one JSON line
# {"exit": 0 | 1, "out": [head, tail, size], "err": [head, tail, size]} where head/tail are the first and last
# MAX_BYTES bytes (latin-1 text) of the call's output and size its length in bytes. The first line it writes is
# {"ready": true}.
SESSION_REPL = r"""
import ctypes, json, os, resource, select, signal, sys, threading, traceback
MAX = int(sys.argv[2])
parent = os.getppid()
proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
try:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: end with the parent
except Exception:
    pass
if os.getppid() != parent:  # the parent died before the request above
    os._exit(0)
def _watch():  # the trainer died or closed the session: the pipe hangs up
    poller = select.poll()
    poller.register(proto_in.fileno(), select.POLLHUP | select.POLLERR)
    while True:
        for _, ev in poller.poll(200):
            if ev & (select.POLLHUP | select.POLLERR):
                try:
                    os.killpg(0, signal.SIGKILL)
                finally:
                    os._exit(0)
threading.Thread(target=_watch, daemon=True).start()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails with an OSError instead of killing
class CPUTimeLimit(Exception):
    pass
def _xcpu(signum, frame):
    raise CPUTimeLimit("CPU time limit of %d seconds per call exceeded." % CALL_CPU[0])
signal.signal(signal.SIGXCPU, _xcpu)
CALL_CPU = [0]
files = []
for fd, name in ((1, ".session-out"), (2, ".session-err")):
    f = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(f, fd)
    os.close(f)
def _grab(fd):
    size = os.fstat(fd).st_size
    os.lseek(fd, 0, 0)
    head = os.read(fd, min(size, MAX))
    tail = b""
    if size > 2 * MAX:
        os.lseek(fd, size - MAX, 0)
        tail = os.read(fd, MAX)
    elif size > MAX:
        tail = os.read(fd, size - MAX)
    return [head.decode("latin-1"), tail.decode("latin-1"), size]
ns = {"__name__": "__main__", "__builtins__": __builtins__}
proto_out.write(b'{"ready": true}\n')
while True:
    line = proto_in.readline()
    if not line:
        os._exit(0)
    req = json.loads(line)
    for fd in (1, 2):
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    used = resource.getrusage(resource.RUSAGE_SELF)
    CALL_CPU[0] = req["cpu"]
    if hard != resource.RLIM_INFINITY:
        limit = min(hard, int(used.ru_utime + used.ru_stime) + 1 + req["cpu"])
        resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
    code = 0
    try:
        exec(compile(req["code"], "<stdin>", "exec"), ns)
    except SystemExit as exc:
        code = 0 if exc.code in (None, 0) else 1
        if code and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:
        code = 1
        tb = exc.__traceback__
        traceback.print_exception(type(exc), exc, tb.tb_next if tb is not None else None)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    if hard != resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    reply = {"exit": code, "out": _grab(1), "err": _grab(2)}
    proto_out.write(json.dumps(reply).encode("ascii") + b"\n")
"""

_LAUNCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="python-session-launcher")
# `bwrap --die-with-parent` and `setpriv --pdeathsig` end a sandbox with the THREAD that started it: every session is
# started by this one long-lived thread, not by the executor's workers


def _bounded(part: list, max_chars: int) -> str:
    r"""Observation text of one `[head, tail, size]` output part: stripped, first and last halves of `max_chars`.

    The loop sends the first and last `4 * max_chars` bytes (enough for `max_chars` characters at each end); the
    characters it did not send are counted as one character per byte in the omission line.
    """
    head_b, tail_b = part[0].encode("latin-1"), part[1].encode("latin-1")
    middle = int(part[2]) - len(head_b) - len(tail_b)
    if middle <= 0:
        return truncate_middle((head_b + tail_b).decode("utf-8", errors="replace"), max_chars)
    head = head_b.decode("utf-8", errors="replace").lstrip()
    tail = tail_b.decode("utf-8", errors="replace").rstrip()
    half = max_chars // 2
    rest = max_chars - half
    omitted = middle + max(0, len(head) - half) + max(0, len(tail) - rest)
    return f"{head[:half]}\n[… {omitted} characters omitted …]\n{tail[len(tail) - rest :]}"


class PythonSession(Environment):
    r"""A persistent, sandboxed Python interpreter for one trajectory (see the module docstring).

    Args:
        timeout_s: wall-clock limit per call in seconds (default `agentic_python_timeout`'s); the tool's `timeout`.
        max_output_chars: output cap per call (default `agentic_python_max_output_chars`'s).
        memory_mb: RLIMIT_AS of the interpreter in MiB: bounds the whole session's state (None: unlimited).
        cpu_time_s: CPU seconds per call (default `ceil(timeout_s) + 1`).
        session_cpu_time_s: CPU seconds of the whole session (default 16 x `cpu_time_s`); the kernel kills the
            interpreter there (the session restarts, its variables lost).
        max_processes, max_file_mb, disk_mb, isolation, executable, run_as: as the python tool's (`run_python_code`);
            `disk_mb` bounds all files of the session.

    Raises:
        TransientToolError: the sandbox could not be started (the executor retries).
    """

    name = "python_session"
    default_tag = "python_session"

    def __init__(
        self,
        timeout_s: float = PYTHON_TIMEOUT_S,
        max_output_chars: int = PYTHON_MAX_OUTPUT_CHARS,
        memory_mb: int | None = 4096,
        cpu_time_s: float | None = None,
        session_cpu_time_s: float | None = None,
        max_processes: int | None = 256,
        max_file_mb: int | None = 256,
        disk_mb: int | None = DISK_MB,
        isolation: str = PYTHON_ISOLATION,
        executable: str | None = None,
        run_as: str = "auto",
    ) -> None:
        r"""Start the sandboxed interpreter (the arguments are described in the class docstring)."""
        self.check_params(dict(timeout_s=timeout_s, max_output_chars=max_output_chars, memory_mb=memory_mb,
                               cpu_time_s=cpu_time_s, session_cpu_time_s=session_cpu_time_s,
                               max_processes=max_processes, max_file_mb=max_file_mb, disk_mb=disk_mb,
                               isolation=isolation, run_as=run_as))  # fmt: skip
        self.timeout_s = float(timeout_s)
        self.max_output_chars = int(max_output_chars)
        self.memory_mb, self.max_processes, self.max_file_mb, self.disk_mb = (memory_mb, max_processes, max_file_mb,
                                                                              disk_mb)  # fmt: skip
        self.cpu_time_s = max(1, math.ceil(cpu_time_s if cpu_time_s is not None else math.ceil(self.timeout_s) + 1))
        self.session_cpu_time_s = max(
            self.cpu_time_s, math.ceil(session_cpu_time_s if session_cpu_time_s else 16 * self.cpu_time_s)
        )
        self.executable = executable or sys.executable
        self.report = measure_isolation(isolation, self.executable, run_as)
        self.proc: subprocess.Popen | None = None
        self.uid: int | None = None
        self.workdir: str | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self.token = uuid.uuid4().hex[:16]  # in the interpreter's argv: names its processes in /proc
        self._start()

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        r"""Names and values of the tool config's `params` (raises `ValueError` naming the bad one)."""
        super().check_params(params)
        if "timeout_s" in params:
            check_number("timeout_s", params["timeout_s"])
        if "max_output_chars" in params:
            check_number("max_output_chars", params["max_output_chars"], integer=True, minimum=2, inclusive=True)
        for key in ("memory_mb", "max_processes", "max_file_mb", "disk_mb"):
            if key in params:
                check_number(key, params[key], integer=True, allow_none=True)
        for key in ("cpu_time_s", "session_cpu_time_s"):
            if key in params:
                check_number(key, params[key], allow_none=True)
        isolation = params.get("isolation", "auto")
        if isolation != "auto" and isolation not in SANDBOXES:
            raise ValueError(f"`isolation` must be auto or one of {', '.join(SANDBOXES)}, got {isolation!r}")
        if params.get("run_as", "auto") not in RUN_AS:
            raise ValueError(f"`run_as` must be one of {', '.join(RUN_AS)}, got {params.get('run_as')!r}")

    # ------------------------------------------------------------------ process
    def _start(self) -> None:
        r"""Start the interpreter in the sandbox and wait for its `ready` line (raises `TransientToolError`)."""
        sandbox, as_nobody = self.report.sandbox, self.report.as_nobody
        limits, _ = _limits(self.timeout_s, self.memory_mb, self.session_cpu_time_s, self.max_processes,
                            self.max_file_mb)  # fmt: skip
        own_uid = as_nobody and percall.per_call_uid_error() is None
        try:
            self.uid = percall.acquire_uid() if own_uid else None
        except RuntimeError as exc:
            raise TransientToolError(str(exc)) from exc
        uid = self.uid if self.uid is not None else 65534
        self.workdir = tempfile.mkdtemp(prefix="lfa-session-")
        namespaced = sandbox in ("bwrap", "unshare") and (as_nobody or sandbox == "bwrap")
        code_workdir = _code_workdir(self.workdir) if namespaced else self.workdir
        try:
            if as_nobody:
                os.chown(self.workdir, uid, uid)
            args = ["-c", SESSION_REPL, SESSION_MARK, str(4 * self.max_output_chars), self.token]
            inner = percall.net_filter_command(self.executable, args) if sandbox == "rlimits-only" else [
                self.executable, *args]  # fmt: skip
            prlimit = shutil.which("prlimit", path=SYSTEM_PATH)
            if prlimit is None:
                raise TransientToolError(
                    "util-linux prlimit is needed for python_session (apt-get install util-linux)"
                )
            inner = [prlimit] + [f"--{_RLIMIT_NAMES[r]}={soft}:{hard}" for r, soft, hard in limits] + ["--"] + inner
            try:
                cmd, popen_kwargs = _sandbox_command(sandbox, as_nobody, code_workdir, self.executable, inner, uid,
                                                     namespaced, self.disk_mb)  # fmt: skip
            except FileNotFoundError as exc:
                raise TransientToolError(str(exc)) from exc
            env = _code_env(self.executable, code_workdir)

            def _popen() -> subprocess.Popen:
                return subprocess.Popen(cmd, cwd=self.workdir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                                        **popen_kwargs)  # fmt: skip

            try:
                self.proc = _LAUNCHER.submit(_popen).result()
            except OSError as exc:
                raise TransientToolError(f"could not start the interpreter: {exc}") from exc
            self._buffer = b""
            reply = self._read_reply(time.monotonic() + max(30.0, self.timeout_s))
            if not (isinstance(reply, dict) and reply.get("ready")):
                raise TransientToolError(f"the session interpreter did not start: {self._stderr_tail()}")
        except BaseException:
            self._stop()
            raise

    def _stderr_tail(self) -> str:
        r"""What the sandbox wrote to its stderr before the loop took it over (bounded), for start-up errors."""
        if self.proc is None or self.proc.stderr is None:
            return "no output"
        try:
            if self.proc.poll() is None:
                ready, _, _ = select.select([self.proc.stderr], [], [], 0.2)
                if not ready:
                    return "no output"
            data = os.read(self.proc.stderr.fileno(), 4000)
        except OSError:
            return "no output"
        return data.decode("utf-8", errors="replace").strip()[-1000:] or f"exit status {self.proc.poll()}"

    def _read_reply(self, deadline: float) -> dict | None:
        r"""One JSON line from the interpreter before `deadline` (None: timeout, hang-up or a malformed line)."""
        proc = self.proc
        fd = proc.stdout.fileno()
        limit = 16 * self.max_output_chars + 65536
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or len(self._buffer) > limit:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            return None

    def _stop(self) -> None:
        r"""Kill the interpreter's sandbox and every process of its uid; remove its working directory."""
        proc, self.proc = self.proc, None
        if proc is not None:
            for stream in (proc.stdin,):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                os.killpg(proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.kill()
                proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                logger.warning("[agentic-tools] python session pid %d did not exit after SIGKILL", proc.pid)
            for stream in (proc.stdout, proc.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
        if self.uid is not None:
            uid, self.uid = self.uid, None
            left = percall.kill_uid(uid)
            if left:
                logger.warning("[agentic-tools] %d processes of the session's uid %d survived SIGKILL", left, uid)
            if self.report.sandbox == "rlimits-only":
                percall.remove_files(uid, percall.world_writable_dirs())
            percall.release_uid(uid)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _restart(self, why: str) -> ToolOutput:
        r"""Kill the interpreter, start a fresh one, and return `why` + the restart notice (status error/timeout)."""
        status = STATUS_TIMEOUT if why.startswith("Execution timed out") else STATUS_ERROR
        self._stop()
        try:
            self._start()
        except TransientToolError as exc:  # the next call starts it again (`step`)
            logger.warning("[agentic-tools] python session could not restart: %s", exc)
        return ToolOutput(f"{why} {RESTARTED}", status, meta={RESET_META: "after"})

    # ------------------------------------------------------------------ contract
    def step(self, call: str, timeout_s: float) -> ToolOutput:
        r"""Run `call` in the session's namespace (see the module docstring); never raises but at start-up."""
        with self._lock:
            restarted = False
            if self.proc is None or self.proc.poll() is not None:
                self._stop()
                self._start()  # TransientToolError when the sandbox cannot start
                restarted = True
            budget = min(float(timeout_s), self.timeout_s)
            request = json.dumps({"code": rewrite_last_expression(call), "cpu": self.cpu_time_s}) + "\n"
            try:
                self.proc.stdin.write(request.encode("utf-8", errors="replace"))
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                return self._restart("The session's interpreter ended.")
            deadline = time.monotonic() + budget
            reply = self._read_reply(deadline)
            if reply is None:
                if self.proc.poll() is None and time.monotonic() >= deadline:
                    return self._restart(timeout_text(float(f"{budget:.3g}")))
                if self.proc.poll() is None:
                    return self._restart("The session's interpreter sent a malformed reply.")
                return self._restart(f"The session's interpreter was killed (exit status {self.proc.returncode}: "
                                     f"memory limit of {self.memory_mb} MiB or CPU limit of "
                                     f"{self.session_cpu_time_s} seconds per session?).")  # fmt: skip
            out = _bounded(reply["out"], self.max_output_chars)
            err = _bounded(reply["err"], self.max_output_chars)
            meta = {RESET_META: "before"} if restarted else {}  # state lost before this call: it holds this call
            status, text = code_result(self.name, reply.get("exit") == 0, out, err, "Error.")
            return ToolOutput(text, status, meta=meta)

    def close(self) -> None:
        r"""Kill the interpreter and release its uid and files."""
        with self._lock:
            self._stop()


@register_tool("python_session")
class PythonSessionTool(environment_tool(PythonSession)):
    r"""`<python_session>code</python_session>`: a persistent sandboxed interpreter per trajectory (`PythonSession`).

    Params: those of `PythonSession` (the tool's `timeout` is its per-call `timeout_s`), `max_sessions` and
    `replay_timeout_s` (`EnvironmentTool`).
    """

    def __init__(self, **kwargs: Any) -> None:
        r"""Create the tool; `timeout_s` is the session's per-call deadline (`call_timeout_s`)."""
        super().__init__(**kwargs)
        self.params["timeout_s"] = self.call_timeout_s

    @property
    def executable(self) -> str:
        r"""The sessions' interpreter (`agentic_python_min_isolation`'s check and hint name it)."""
        return self.params.get("executable") or sys.executable

    def isolation_report(self):
        r"""Measured isolation of the sessions (the executor's `calls_at_<level>` metric, `doctor`)."""
        return measure_isolation(self.params.get("isolation", PYTHON_ISOLATION), self.executable,
                                 self.params.get("run_as", "auto"))  # fmt: skip

    backend = "local"


__all__ = ["SESSION_MARK", "PythonSession", "PythonSessionTool"]
