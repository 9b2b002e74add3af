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

"""Python interpreter tool: one fresh, sandboxed interpreter process per call.

Behaviour (docs/algorithms.md §7.2; `ARPO/verl_arpo_entropy/verl/workers/rollout/tools/python_tool.py:45-91`):
a last top-level bare expression that is not a `print(...)` call is printed; exit 0 -> stripped stdout; otherwise the
stripped stderr (traceback); empty successful output -> `Tool(python) returned empty output.` (never retried);
timeout -> `Execution timed out after N seconds.`. Fixes of docs/algorithms.md §12: output capped at `max_output_chars`
(first and last halves around an omission line, pipes read incrementally), own session and process group, temporary
working directory, scrubbed environment, CPU/memory/process/file-size limits, the whole process tree killed on timeout.

Isolation, probed once per interpreter at first use (`isolation_level()`):

* `bwrap`: bubblewrap sandbox: read-only root file system, private /tmp, no network, own pid/ipc/uts namespaces;
  the sandbox dies with its parent, so killing it kills every process the code started. Folders of the interpreter
  that lie under /tmp (e.g. a CI clone under /tmp: the venv prefix, `sys.path` entries and editable-install sources)
  are bound read-only into the private /tmp; otherwise the interpreter could not start there and a weaker level
  would be chosen.
* `unshare`: `unshare --user --map-root-user --net --pid --mount --mount-proc --fork --kill-child`: no network,
  own pid namespace; the file system is only protected by ordinary permissions. A silent `/bin/sh` is the init
  (pid 1) of the namespace, so that the code is an ordinary process: pid 1 ignores signals it has no handler for
  (SIGXCPU would not end it), and `unshare` cannot pass a SIGKILL death on to itself (it fails with
  `unshare: sigprocmask unblock failed`); the shell turns the death into the exit status 128 + signal.
* `rlimits-only`: resource limits and a process group; the code runs under the same silent `/bin/sh` so that
  `os.kill(os.getppid(), 9)` does not reach the trainer. No network or file-system isolation.

When running as root and the interpreter is usable by uid 65534 (`nobody`), the code runs as `nobody` so that
RLIMIT_NPROC (fork bombs) applies and host processes cannot be signalled. As root with an interpreter `nobody` cannot
read (e.g. a venv under /root), RLIMIT_NPROC does not bind root; fork bombs are then only ended by the timeout (pid
namespace teardown with bwrap/unshare, process-group kill otherwise).

Resource limits are set by util-linux `prlimit`, exec'd between the sandbox and the interpreter (no Python code runs
between fork and exec, which `preexec_fn` would do and which is unsafe in a threaded trainer); `preexec_fn` is only
the fallback when `prlimit` is missing. The CPU-time limit is soft N s / hard N + 1 s: SIGXCPU at N s, SIGKILL one
second later if the code handles SIGXCPU; either death is reported as an error observation naming the signal and
the limit. The program is sent on stdin (`python -`), so tracebacks read
`File "<stdin>", line N` on every call, and `input()` sees an immediate EOF.

Stronger isolation for clusters: install bubblewrap (`apt-get install bubblewrap`) and allow unprivileged user
namespaces (`kernel.unprivileged_userns_clone=1`, Ubuntu 24.04: an AppArmor profile for bwrap); better still run the
code in a separate sandbox service (`backend: sandbox_fusion`, SandboxFusion in its own container or VM) and cap
processes per sandbox with cgroups (e.g. `systemd-run --user --scope -p TasksMax=64 -p MemoryMax=4G`).
"""

import ast
import json
import logging
import math
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from .base import (
    STATUS_EMPTY,
    STATUS_ERROR,
    STATUS_OK,
    STATUS_TIMEOUT,
    BaseTool,
    BoundedText,
    ToolError,
    ToolOutput,
    TransientToolError,
    empty_output_text,
    truncate_middle,
)
from .registry import register_tool


logger = logging.getLogger(__name__)

ISOLATION_LEVELS = ("bwrap", "unshare", "rlimits-only")
NOBODY_ID = 65534
_PROBE_LOCK = threading.Lock()
_PROBED: dict[tuple[str, str, bool], bool] = {}
_NOBODY_OK: dict[str, bool] = {}
_PATHS_LOCK = threading.Lock()
_BWRAP_BINDS: dict[str, list[str]] = {}
BWRAP_PRIVATE_DIRS = ("/tmp",)  # hidden by bwrap's `--tmpfs /tmp`
# Silent intermediate shell (`sh -c SCRIPT sh CMD...`): the shell's own stderr goes to /dev/null (no "Killed" or
# "CPU time limit exceeded" job messages, which dash/bash print for a child killed by a signal), the command keeps
# the original stderr (fd 3); the subshell execs the command, the shell exits with its status (128 + signal).
SILENT_SHELL = ["/bin/sh", "-c", 'exec 3>&2 2>/dev/null; ("$@") 2>&3 3>&-; exit $?', "sh"]
# Run by the interpreter itself: its prefixes, `sys.path`, and the source folders of editable installs (PEP 610
# `direct_url.json`; setuptools' editable finders import them from there without a `sys.path` entry).
_QUERY_PATHS = """
import json, sys, urllib.parse
from importlib import metadata
paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix] + [p for p in sys.path if p]
for dist in metadata.distributions():
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except (ValueError, OSError):
        continue
    url = info.get("url") if isinstance(info, dict) else None
    if isinstance(url, str) and url.startswith("file:") and (info.get("dir_info") or {}).get("editable"):
        paths.append(urllib.parse.unquote(urllib.parse.urlparse(url).path))
print(json.dumps(paths))
"""


def timeout_text(timeout_s: float) -> str:
    r"""`Execution timed out after N seconds.` (English; docs/algorithms.md §12)."""
    return f"Execution timed out after {timeout_s:g} seconds."


def rewrite_last_expression(code: str) -> str:
    r"""Print the value of a last top-level bare expression unless it is a `print(...)` call.

    Only the source span of that expression is replaced by `print(<expr>)`, so line numbers in tracebacks stay
    unchanged. Unparsable code is returned unchanged (it then fails with Python's own SyntaxError message).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    node = tree.body[-1]
    value = node.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "print":
        return code
    if node.end_lineno is None or node.end_col_offset is None:
        return code
    lines = code.splitlines(keepends=True)
    # ast offsets are in UTF-8 bytes
    start_line = lines[node.lineno - 1].encode("utf-8")
    end_line = lines[node.end_lineno - 1].encode("utf-8")
    prefix = b"".join(line.encode("utf-8") for line in lines[: node.lineno - 1]) + start_line[: node.col_offset]
    suffix = end_line[node.end_col_offset :] + b"".join(line.encode("utf-8") for line in lines[node.end_lineno :])
    segment = ast.get_source_segment(code, node)
    if segment is None:
        return code
    return prefix.decode("utf-8") + "print(" + segment + ")" + suffix.decode("utf-8")


def _is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _bwrap_interpreter_binds(executable: str) -> list[str]:
    r"""Folders `executable` needs that bwrap's private /tmp would hide, outermost only (cached per interpreter).

    The interpreter is asked (outside the sandbox, with a scrubbed environment like the code's) for its prefixes,
    `sys.path` and the source folders of its editable installs (whose start-up `.pth` hooks must stay importable);
    the folder of the executable and of its resolved path are added. Entries that lie (literally or
    after resolving symlinks) under a folder of `BWRAP_PRIVATE_DIRS` and exist are returned, to be bound read-only.
    """
    with _PATHS_LOCK:
        if executable in _BWRAP_BINDS:
            return _BWRAP_BINDS[executable]
        paths = [os.path.dirname(executable), os.path.dirname(os.path.realpath(executable))]
        try:
            proc = subprocess.run(
                [executable, "-s", "-c", _QUERY_PATHS],
                cwd="/",
                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
                capture_output=True,
                timeout=30,
            )
            if proc.returncode == 0:
                paths += [p for p in json.loads(proc.stdout.decode("utf-8")) if isinstance(p, str) and p]
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            logger.info("[agentic-tools] could not ask %s for its paths: %s", executable, exc)
        hidden = set()
        for path in paths:
            for candidate in (os.path.normpath(os.path.abspath(path)), os.path.realpath(path)):
                if any(_is_under(candidate, d) for d in BWRAP_PRIVATE_DIRS) and os.path.exists(candidate):
                    hidden.add(candidate)
        outermost = []
        for path in sorted(hidden, key=len):
            if path not in BWRAP_PRIVATE_DIRS and not any(_is_under(path, kept) for kept in outermost):
                outermost.append(path)
        _BWRAP_BINDS[executable] = outermost
        return outermost


def _sandbox_prefix(level: str, workdir: str, executable: str) -> list[str]:
    if level == "bwrap":
        binds = []
        for path in _bwrap_interpreter_binds(executable):
            binds += ["--ro-bind", path, path]
        return [
            "bwrap",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
            *binds,
            "--bind", workdir, workdir,
            "--chdir", workdir,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--",
        ]  # fmt: skip
    if level == "unshare":
        return [
            "unshare", "--user", "--map-root-user", "--net", "--pid", "--mount", "--mount-proc", "--fork",
            "--kill-child", "--", *SILENT_SHELL,
        ]  # fmt: skip
    return list(SILENT_SHELL)


def _drop_kwargs(drop: bool) -> dict[str, Any]:
    return {"user": NOBODY_ID, "group": NOBODY_ID, "extra_groups": []} if drop else {}


def _can_drop_privileges(executable: str) -> bool:
    r"""Root only: whether `executable` runs as uid 65534 (it must be readable by `nobody`)."""
    if os.geteuid() != 0:
        return False
    with _PROBE_LOCK:
        if executable not in _NOBODY_OK:
            try:
                proc = subprocess.run(
                    [executable, "-c", "pass"], cwd="/", capture_output=True, timeout=30, **_drop_kwargs(True)
                )
                _NOBODY_OK[executable] = proc.returncode == 0
            except (OSError, subprocess.SubprocessError):
                _NOBODY_OK[executable] = False
        return _NOBODY_OK[executable]


def _probe_level(level: str, executable: str, drop: bool) -> bool:
    key = (level, executable, drop)
    with _PROBE_LOCK:
        if key in _PROBED:
            return _PROBED[key]
        ok = False
        if level == "rlimits-only":
            ok = True
        elif shutil.which(level):
            workdir = tempfile.mkdtemp(prefix="lfa-probe-")
            try:
                if drop:
                    os.chown(workdir, NOBODY_ID, NOBODY_ID)
                cmd = _sandbox_prefix(level, workdir, executable) + [executable, "-c", "import socket"]
                proc = subprocess.run(cmd, cwd=workdir, capture_output=True, timeout=30, **_drop_kwargs(drop))
                ok = proc.returncode == 0
                if not ok:
                    logger.info(
                        "[agentic-tools] %s unavailable: %s", level, proc.stderr.decode(errors="replace")[-300:]
                    )
            except (OSError, subprocess.SubprocessError) as exc:
                logger.info("[agentic-tools] %s unavailable: %s", level, exc)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        _PROBED[key] = ok
        return ok


def isolation_level(preferred: str = "auto", executable: str | None = None, run_as: str = "auto") -> str:
    r"""The isolation level code execution gets on this machine: "bwrap", "unshare" or "rlimits-only".

    Probed once per (level, interpreter) at first use: the sandbox is started with the interpreter and must exit 0.

    Args:
        preferred: "auto" (the strongest that works), or one level to try first (falls back if it fails);
            the environment variable `AGENTIC_PYTHON_ISOLATION` overrides "auto".
        executable: interpreter to probe with (default `sys.executable`).
        run_as: "auto" (root: run as `nobody` if the interpreter allows) or "self".
    """
    executable = executable or sys.executable
    drop = run_as == "auto" and _can_drop_privileges(executable)
    if preferred == "auto":
        preferred = os.environ.get("AGENTIC_PYTHON_ISOLATION", "auto")
    order = list(ISOLATION_LEVELS)
    if preferred in ISOLATION_LEVELS:
        order.remove(preferred)
        order.insert(0, preferred)
    elif preferred != "auto":
        raise ValueError(f"unknown isolation {preferred!r}; use auto, {', '.join(ISOLATION_LEVELS)}")
    for level in order:
        if _probe_level(level, executable, drop):
            return level
    return "rlimits-only"


def _limits_preexec(limits: list[tuple[int, int, int]]):
    def _apply() -> None:
        for res, soft, hard in limits:
            try:
                resource.setrlimit(res, (soft, hard))
            except (ValueError, OSError):
                pass

    return _apply


def run_python_code(
    code: str,
    timeout_s: float = 120.0,
    max_output_chars: int = 4000,
    memory_mb: int | None = 4096,
    cpu_time_s: float | None = None,
    max_processes: int | None = 256,
    max_file_mb: int | None = 256,
    isolation: str = "auto",
    executable: str | None = None,
    run_as: str = "auto",
    workdir_root: str | None = None,
) -> tuple[str, str]:
    r"""Run `code` in a fresh sandboxed interpreter and return `(status, text)`.

    Args:
        code: Python source (the last bare expression is printed, see `rewrite_last_expression`).
        timeout_s: wall-clock limit in seconds; the whole sandbox / process group is SIGKILLed when it passes.
        max_output_chars: cap of the returned text (first and last halves around an omission line).
        memory_mb: RLIMIT_AS in MiB (None: unlimited).
        cpu_time_s: RLIMIT_CPU in seconds (default `ceil(timeout_s) + 1`): SIGXCPU when it is reached, SIGKILL one
            second later; reported as an error observation naming the signal and the limit.
        max_processes: RLIMIT_NPROC (binding for non-root users, or for root when the code runs as `nobody`).
        max_file_mb: RLIMIT_FSIZE in MiB (largest file the code may write).
        isolation: see `isolation_level`.
        executable: interpreter (default `sys.executable`, so the training environment's packages are importable).
        run_as: "auto" or "self" (see `isolation_level`).
        workdir_root: folder in which the temporary working directory is created (default: the system temp dir).

    Returns:
        `("ok", stdout)`, `("empty", "Tool(python) returned empty output.")`, `("error", stderr)` or
        `("timeout", "Execution timed out after N seconds.")`.
    """
    executable = executable or sys.executable
    level = isolation_level(isolation, executable, run_as)
    drop = run_as == "auto" and _can_drop_privileges(executable)
    cpu = max(1, math.ceil(cpu_time_s if cpu_time_s is not None else math.ceil(timeout_s) + 1))
    # (resource, soft, hard): SIGXCPU at the soft CPU limit; SIGKILL at the hard one if the code handles SIGXCPU
    limits: list[tuple[int, int, int]] = [(resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_CORE, 0, 0)]
    if memory_mb:
        limits.append((resource.RLIMIT_AS, int(memory_mb) * 1024 * 1024, int(memory_mb) * 1024 * 1024))
    if max_processes:
        limits.append((resource.RLIMIT_NPROC, int(max_processes), int(max_processes)))
    if max_file_mb:
        limits.append((resource.RLIMIT_FSIZE, int(max_file_mb) * 1024 * 1024, int(max_file_mb) * 1024 * 1024))

    workdir = tempfile.mkdtemp(prefix="lfa-py-", dir=workdir_root)
    try:
        if drop:
            os.chown(workdir, NOBODY_ID, NOBODY_ID)
        source = rewrite_last_expression(code).encode("utf-8", errors="replace")
        inner = [executable, "-"]  # program read from stdin: tracebacks say `File "<stdin>"`, stable across calls
        preexec = None
        prlimit = shutil.which("prlimit")
        if prlimit:  # limits set by a tiny exec'd helper: no Python code between fork and exec (thread-safe)
            names = {
                resource.RLIMIT_CPU: "cpu",
                resource.RLIMIT_CORE: "core",
                resource.RLIMIT_AS: "as",
                resource.RLIMIT_NPROC: "nproc",
                resource.RLIMIT_FSIZE: "fsize",
            }
            inner = [prlimit] + [f"--{names[r]}={soft}:{hard}" for r, soft, hard in limits] + ["--"] + inner
        else:  # documented as unsafe with threads, used only when util-linux's prlimit is missing
            preexec = _limits_preexec(limits)
        cmd = _sandbox_prefix(level, workdir, executable) + inner
        bin_dir = os.path.dirname(executable)
        env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONHASHSEED": "0",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
        }
        return _run_and_collect(cmd, workdir, env, source, timeout_s, max_output_chars, preexec, drop, cpu)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _write_program(proc: subprocess.Popen, source: bytes) -> None:
    try:
        proc.stdin.write(source)
    except (BrokenPipeError, OSError, ValueError):
        pass  # the sandbox died before reading its program: the exit status tells why
    finally:
        try:
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _signal_text(rc: int, cpu_time_s: int) -> str | None:
    r"""Readable cause of a death by signal: rc < 0 (Popen) or 128 + signal (sandbox/shell exit status); else None."""
    if not (rc < 0 or 128 < rc < 128 + 65):
        return None
    signum = -rc if rc < 0 else rc - 128
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = str(signum)
    if signum == signal.SIGXCPU:
        return f"Process killed by signal SIGXCPU: CPU time limit of {cpu_time_s} seconds exceeded."
    if signum == signal.SIGKILL:
        return f"Process killed by signal SIGKILL (CPU time limit of {cpu_time_s} seconds or memory exhausted?)."
    return f"Process killed by signal {name}."


def _run_and_collect(
    cmd, workdir, env, source, timeout_s, max_output_chars, preexec, drop, cpu_time_s
) -> tuple[str, str]:
    start = time.monotonic()
    deadline = start + timeout_s
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            preexec_fn=preexec,
            **_drop_kwargs(drop),
        )
    except OSError as exc:
        raise TransientToolError(f"could not start the interpreter: {exc}") from exc
    # The interpreter reads the whole program before running it, so writing it all first cannot deadlock; the
    # closed stdin then gives `input()` an immediate EOF.
    if len(source) < 60_000:  # fits in the pipe buffer: no thread needed
        _write_program(proc, source)
    else:
        threading.Thread(target=_write_program, args=(proc, source), daemon=True).start()
    out, err = BoundedText(max_output_chars), BoundedText(max_output_chars)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    timed_out = False
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = proc.poll() is None
                break
            if exited_at is not None and now - exited_at > 1.0:
                break  # the interpreter exited but a leftover child still holds the pipes: it is killed below
            for key, _ in sel.select(timeout=min(0.2, deadline - now)):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    key.data.feed_bytes(chunk)
                else:
                    sel.unregister(key.fileobj)
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
                _kill_group(proc)  # stragglers in the group (daemons the code left behind)
    finally:
        sel.close()
        _kill_group(proc)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.warning("[agentic-tools] python sandbox pid %d did not exit after SIGKILL", proc.pid)
        proc.stdout.close()
        proc.stderr.close()
    if timed_out:
        return STATUS_TIMEOUT, timeout_text(timeout_s)
    if proc.returncode == 0:
        text = out.value()
        return (STATUS_OK, text) if text else (STATUS_EMPTY, empty_output_text("python"))
    text = err.value() or out.value()
    cause = _signal_text(proc.returncode, cpu_time_s)
    if cause:  # what the code printed before it was killed, then why it ended
        text = f"{text}\n{cause}" if text else cause
    elif not text:
        text = f"Process exited with code {proc.returncode} and no output."
    return STATUS_ERROR, text


def run_remote_code(
    url: str, code: str, timeout_s: float, max_output_chars: int, client: Any = None
) -> tuple[str, str]:
    r"""Run `code` on a SandboxFusion-compatible service (`POST {url}/run_code`).

    Request: `{"code": ..., "language": "python", "run_timeout": timeout_s}`; response fields used:
    `run_result.{status, return_code, stdout, stderr}` and the top-level `status`/`message`.

    Raises:
        TransientToolError: HTTP 429/5xx, connection problems or a malformed response.
        ToolError: other HTTP errors.
    """
    import httpx

    payload = {"code": rewrite_last_expression(code), "language": "python", "run_timeout": timeout_s}
    endpoint = url.rstrip("/") + ("" if url.rstrip("/").endswith("/run_code") else "/run_code")
    try:
        if client is not None:
            response = client.post(endpoint, json=payload, timeout=timeout_s + 10)
        else:
            response = httpx.post(endpoint, json=payload, timeout=timeout_s + 10)
    except httpx.TimeoutException as exc:
        raise TransientToolError(f"sandbox request timed out: {exc}") from exc
    except httpx.HTTPError as exc:
        raise TransientToolError(f"sandbox request failed: {exc}") from exc
    if response.status_code == 429 or response.status_code >= 500:
        raise TransientToolError(f"sandbox returned HTTP {response.status_code}")
    if response.status_code >= 400:
        raise ToolError(f"sandbox returned HTTP {response.status_code}")
    try:
        data = response.json()
        run = data.get("run_result") or {}
        if not isinstance(run, dict):
            raise TypeError("run_result is not an object")
    except (ValueError, TypeError, AttributeError) as exc:
        raise TransientToolError(f"malformed sandbox response: {exc}") from exc
    if run.get("status") == "TimeLimitExceeded":
        return STATUS_TIMEOUT, timeout_text(timeout_s)
    if not run:
        message = str(data.get("message") or data.get("status") or "no run result")
        raise TransientToolError(f"sandbox error: {message}")
    stdout = truncate_middle(str(run.get("stdout") or ""), max_output_chars)
    stderr = truncate_middle(str(run.get("stderr") or ""), max_output_chars)
    if run.get("return_code") == 0 and run.get("status") in (None, "Finished"):
        return (STATUS_OK, stdout) if stdout else (STATUS_EMPTY, empty_output_text("python"))
    return STATUS_ERROR, stderr or stdout or f"Process ended with status {run.get('status')}."


@register_tool("python")
class PythonTool(BaseTool):
    r"""`<python>code</python>`: run the code in a fresh sandboxed interpreter (see the module docstring).

    Args:
        timeout_s: wall-clock limit per execution in seconds (`agentic_python_timeout`, default 120).
        max_output_chars: output cap (`agentic_python_max_output_chars`, default 4000).
        memory_mb, cpu_time_s, max_processes, max_file_mb, isolation, executable, run_as: see `run_python_code`.
        backend: "local" or "sandbox_fusion" (remote HTTP service at `sandbox_url`).
        sandbox_url: base URL of the SandboxFusion-compatible service.
        **kwargs: `BaseTool` arguments (tag, retries, call_limit, dedup).
    """

    name = "python"
    default_tag = "python"
    retry_on_empty = False  # docs/algorithms.md §12: empty successful output is not retried
    default_dedup = False  # code may be random or stateful outside the sandbox: run every call

    def __init__(
        self,
        timeout_s: float = 120.0,
        max_output_chars: int = 4000,
        memory_mb: int | None = 4096,
        cpu_time_s: float | None = None,
        max_processes: int | None = 256,
        max_file_mb: int | None = 256,
        isolation: str = "auto",
        executable: str | None = None,
        run_as: str = "auto",
        backend: str = "local",
        sandbox_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        kwargs.setdefault("retries", 3)
        # the executor waits timeout + grace; retries only happen for start-up failures, never for timeouts
        super().__init__(timeout_s=float(timeout_s), **kwargs)
        if backend not in ("local", "sandbox_fusion"):
            raise ValueError(f"unknown python backend {backend!r}; use local or sandbox_fusion")
        if backend == "sandbox_fusion" and not sandbox_url:
            raise ValueError("the sandbox_fusion backend needs sandbox_url")
        self.max_output_chars = int(max_output_chars)
        self.memory_mb = memory_mb
        self.cpu_time_s = cpu_time_s
        self.max_processes = max_processes
        self.max_file_mb = max_file_mb
        self.isolation = isolation
        self.executable = executable or sys.executable
        self.run_as = run_as
        self.backend = backend
        self.sandbox_url = sandbox_url
        self._client = None

    def parse(self, content: str) -> str:
        r"""The code itself, stripped; the cache key is the same string (whitespace inside code is significant)."""
        return content.strip()

    def isolation_level(self) -> str:
        r"""Isolation this tool's executions get ("remote" for the SandboxFusion backend)."""
        if self.backend == "sandbox_fusion":
            return "remote"
        return isolation_level(self.isolation, self.executable, self.run_as)

    def backend_name(self) -> str:
        r"""See the base class."""
        return f"python:{self.backend}"

    def run(self, args: str) -> ToolOutput:
        r"""See the base class."""
        if self.backend == "sandbox_fusion":
            import httpx

            if self._client is None:
                self._client = httpx.Client()
            status, text = run_remote_code(
                self.sandbox_url, args, self.timeout_s, self.max_output_chars, client=self._client
            )
        else:
            status, text = run_python_code(
                args,
                timeout_s=self.timeout_s,
                max_output_chars=self.max_output_chars,
                memory_mb=self.memory_mb,
                cpu_time_s=self.cpu_time_s,
                max_processes=self.max_processes,
                max_file_mb=self.max_file_mb,
                isolation=self.isolation,
                executable=self.executable,
                run_as=self.run_as,
            )
        return ToolOutput(text, status)

    def execute_args(self, args: Any, start: float | None = None):
        r"""As `BaseTool.execute_args`, but the retry budget does not stop at `timeout_s` (a timeout is final)."""
        result = super().execute_args(args, start=start)
        if result.status == STATUS_TIMEOUT and not result.text.startswith("Execution timed out"):
            result.text = timeout_text(self.timeout_s)
        return result

    def close(self) -> None:
        r"""See the base class."""
        if self._client is not None:
            self._client.close()
            self._client = None


__all__ = [
    "ISOLATION_LEVELS",
    "PythonTool",
    "STATUS_OK",
    "isolation_level",
    "rewrite_last_expression",
    "run_python_code",
    "run_remote_code",
    "timeout_text",
]
