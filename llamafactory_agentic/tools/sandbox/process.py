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

r"""One interpreter process of the python tool.

The program goes in on stdin, the output is read incrementally and bounded, the whole process group is killed on
timeout and exit signals are explained; `rewrite_last_expression` prints a last bare expression.

Used by the sandbox (`isolation._execute`) for model code and for the isolation probe.
"""

import ast
import os
import selectors
import signal
import subprocess
import threading
import time

from ...common.log import get_logger
from ..base import (
    STATUS_EMPTY,
    STATUS_ERROR,
    STATUS_OK,
    STATUS_TIMEOUT,
    BoundedText,
    TransientToolError,
    empty_output_text,
)
from . import percall


logger = get_logger(__name__)


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
    cmd, workdir, env, source, timeout_s, max_output_chars, preexec, popen_kwargs, cpu_time_s, reap=None, check=None
) -> tuple[str, str]:
    r"""Run `cmd`, feed it `source`, collect bounded output until it exits or `timeout_s` passes.

    `reap()` (optional) kills every process of the call (its uid) as soon as the interpreter exits and at the end;
    `check()` (optional) is called every `percall.POLL_S` while the code runs, and once after it ends, and returns why
    to stop it (or None); a reason found at the end makes the call an error like one found while it ran.
    """
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
            **popen_kwargs,
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
    stopped = None
    checked_at = start
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = proc.poll() is None
                break
            if check is not None and exited_at is None and now - checked_at >= percall.POLL_S:
                checked_at = now
                stopped = check()
                if stopped:
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
                if reap is not None and sel.get_map():
                    reap()  # every process of the call's uid (daemons, detached grandchildren) holding the pipes
                _kill_group(proc)  # stragglers in the group (daemons the code left behind)
        if check is not None and stopped is None and not timed_out:
            stopped = check()  # once more at the end: files written between the last poll and the exit count too
    finally:
        sel.close()
        if reap is not None and exited_at is None:
            reap()
        _kill_group(proc)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            logger.warning("[agentic-tools] python sandbox pid %d did not exit after SIGKILL", proc.pid)
        proc.stdout.close()
        proc.stderr.close()
    if timed_out:
        return STATUS_TIMEOUT, timeout_text(timeout_s)
    if stopped:
        text = err.value() or out.value()
        return STATUS_ERROR, f"{text}\n{stopped}" if text else stopped
    if proc.returncode == 0:
        return code_result("python", True, out.value(), "", "")
    text = err.value() or out.value()
    cause = _signal_text(proc.returncode, cpu_time_s)
    if cause:  # what the code printed before it was killed, then why it ended
        text = f"{text}\n{cause}" if text else cause
    elif not text:
        text = f"Process exited with code {proc.returncode} and no output."
    return STATUS_ERROR, text


def code_result(tool_name: str, succeeded: bool, stdout: str, stderr: str, failure: str) -> tuple[str, str]:
    r"""`(status, observation)` of a finished code run, as every python tool reports it (docs/tools.md).

    Shared by the local sandbox (`_run_and_collect`), the SandboxFusion client (`python_tool.run_remote_code`) and
    the `python_session` environment.

    Args:
        tool_name: The tool's name, for the empty-output text (`Tool(python) returned empty output.`).
        succeeded: The run ended normally (exit status 0).
        stdout: Its bounded standard output, stripped.
        stderr: Its bounded standard error (the traceback), stripped.
        failure: The observation of a failed run that printed nothing.

    Returns:
        `("ok", stdout)`, `("empty", the empty-output text)` for a successful run, else `("error", stderr or stdout or
        failure)`.
    """
    if succeeded:
        return (STATUS_OK, stdout) if stdout else (STATUS_EMPTY, empty_output_text(tool_name))
    return STATUS_ERROR, stderr or stdout or failure


__all__ = ["code_result", "rewrite_last_expression", "timeout_text"]
