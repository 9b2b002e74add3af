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


Sandboxes, isolation levels and their measurement: `tools/sandbox/isolation.py`; the interpreter process:
`tools/sandbox/process.py`; per-call limits: `tools/sandbox/percall.py`.
"""

import sys
from typing import Any

from ..common import outbound
from ..common.log import get_logger
from ..hparams import PYTHON_ISOLATION, PYTHON_MAX_OUTPUT_CHARS, PYTHON_TIMEOUT_S, TOOL_RETRIES
from .base import (
    STATUS_TIMEOUT,
    BaseTool,
    ToolError,
    ToolOutput,
    TransientToolError,
    check_number,
    truncate_middle,
)
from .registry import register_tool
from .sandbox.isolation import (
    DISK_MB,
    RUN_AS,
    SANDBOXES,
    IsolationReport,
    _execute,
    measure_isolation,
)
from .sandbox.process import code_result, rewrite_last_expression, timeout_text


logger = get_logger(__name__)


def run_python_code(
    code: str,
    timeout_s: float = PYTHON_TIMEOUT_S,
    max_output_chars: int = PYTHON_MAX_OUTPUT_CHARS,
    memory_mb: int | None = 4096,
    cpu_time_s: float | None = None,
    max_processes: int | None = 256,
    max_file_mb: int | None = 256,
    isolation: str = PYTHON_ISOLATION,
    executable: str | None = None,
    run_as: str = "auto",
    workdir_root: str | None = None,
    disk_mb: int | None = DISK_MB,
) -> tuple[str, str]:
    r"""Run `code` in a fresh sandboxed interpreter and return `(status, text)`.

    Args:
        code: Python source (the last bare expression is printed, see `rewrite_last_expression`).
        timeout_s: wall-clock limit in seconds; the whole process tree is killed when it passes.
        max_output_chars: cap on the observation (first and last halves kept around an omission line).
        memory_mb: RLIMIT_AS in MiB (None: unlimited).
        cpu_time_s: RLIMIT_CPU in seconds (default: `ceil(timeout_s) + 1`); SIGXCPU at the limit, SIGKILL one second
            later; reported as an error observation naming the signal and the limit.
        max_processes: RLIMIT_NPROC (binding whenever the code runs unprivileged, i.e. at every level but `none`);
            as root with per-call uids it counts this call's processes and threads only.
        max_file_mb: RLIMIT_FSIZE in MiB (largest file the code may write).
        disk_mb: all files of the call together, in MiB (None: unbounded): the size of the sandbox's private /tmp
            tmpfs (`bwrap`, `unshare`; held in RAM), or, without a mount namespace, the sum of the files it owns in
            its working directory and the host's world-writable folders, checked every 0.1 s (`percall`).
        isolation: "auto" or a sandbox of `SANDBOXES` (see `measure_isolation`).
        executable: interpreter (default `sys.executable`, so the training environment's packages are importable).
        run_as: "auto" or "self" (see `measure_isolation`).
        workdir_root: folder in which the host working directory is created (default: the system temp dir); inside
            `bwrap`/`unshare` the code works in a folder of that name on its private /tmp.

    Returns:
        `("ok", stdout)`, `("empty", "Tool(python) returned empty output.")`, `("error", stderr)` or
        `("timeout", "Execution timed out after N seconds.")`.

    Raises:
        TransientToolError: the sandbox could not be started.
    """
    executable = executable or sys.executable
    report = measure_isolation(isolation, executable, run_as)
    return _execute(code, report.sandbox, report.as_nobody, executable, timeout_s, max_output_chars, memory_mb,
                    cpu_time_s, max_processes, max_file_mb, workdir_root, disk_mb=disk_mb)  # fmt: skip


REMOTE_MAX_RESPONSE_BYTES = 8 << 20  # most bytes of a SandboxFusion answer read (common/outbound.py)


def run_remote_code(
    url: str, code: str, timeout_s: float, max_output_chars: int, client: Any = None
) -> tuple[str, str]:
    r"""Run `code` on a SandboxFusion-compatible service (`POST {url}/run_code`).

    Request: `{"code": ..., "language": "python", "run_timeout": timeout_s}`; response fields used:
    `run_result.{status, return_code, stdout, stderr}` and the top-level `status`/`message`.

    The request ends within `timeout_s + 10` seconds whole and reads `REMOTE_MAX_RESPONSE_BYTES` at most
    (`common/outbound.py`); `client` should come from `outbound.outbound_client` (None: one for this call).

    Raises:
        TransientToolError: HTTP 429/5xx, connection problems, timeouts or a malformed response.
        ToolError: other HTTP errors, an answer over the byte bound or a redirect.
    """
    import httpx

    payload = {"code": rewrite_last_expression(code), "language": "python", "run_timeout": timeout_s}
    endpoint = url.rstrip("/") + ("" if url.rstrip("/").endswith("/run_code") else "/run_code")
    own = client is None
    client = outbound.outbound_client() if own else client
    try:  # the whole request ends within the run's time plus 10 s; the answer is read to 8 MiB (docs/tools.md)
        response = outbound.fetch(client, "POST", endpoint, json=payload, deadline_s=timeout_s + 10,
                                  max_bytes=REMOTE_MAX_RESPONSE_BYTES)  # fmt: skip
    except outbound.OutboundError as exc:
        raise ToolError(f"sandbox answer refused: {exc}") from exc
    except httpx.TimeoutException as exc:
        raise TransientToolError(f"sandbox request timed out: {exc}") from exc
    except httpx.HTTPError as exc:
        raise TransientToolError(f"sandbox request failed: {exc}") from exc
    finally:
        if own:
            client.close()
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
    succeeded = run.get("return_code") == 0 and run.get("status") in (None, "Finished")
    return code_result("python", succeeded, stdout, stderr, f"Process ended with status {run.get('status')}.")


@register_tool("python")
class PythonTool(BaseTool):
    r"""`<python>code</python>`: run the code in a fresh sandboxed interpreter (see the module docstring).

    Args:
        timeout_s: wall-clock limit per execution in seconds (default `agentic_python_timeout`'s).
        max_output_chars: output cap (default `agentic_python_max_output_chars`'s).
        memory_mb, cpu_time_s, max_processes, max_file_mb, disk_mb, isolation, executable, run_as: see
            `run_python_code`.
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
        timeout_s: float = PYTHON_TIMEOUT_S,
        max_output_chars: int = PYTHON_MAX_OUTPUT_CHARS,
        memory_mb: int | None = 4096,
        cpu_time_s: float | None = None,
        max_processes: int | None = 256,
        max_file_mb: int | None = 256,
        disk_mb: int | None = DISK_MB,
        isolation: str = PYTHON_ISOLATION,
        executable: str | None = None,
        run_as: str = "auto",
        backend: str = "local",
        sandbox_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring).

        Raises:
            ValueError: a limit that is not a positive number, an unknown `isolation`, `run_as` or `backend`.
        """
        kwargs.setdefault("retries", TOOL_RETRIES)
        # the executor waits timeout + grace; retries only happen for start-up failures, never for timeouts
        super().__init__(timeout_s=timeout_s, **kwargs)
        if backend not in ("local", "sandbox_fusion"):
            raise ValueError(f"unknown python backend {backend!r}; use local or sandbox_fusion")
        if backend == "sandbox_fusion" and not sandbox_url:
            raise ValueError("the sandbox_fusion backend needs sandbox_url")
        if isolation != "auto" and isolation not in SANDBOXES:
            raise ValueError(f"`isolation` must be auto or one of {', '.join(SANDBOXES)}, got {isolation!r}")
        if run_as not in RUN_AS:
            raise ValueError(f"`run_as` must be one of {', '.join(RUN_AS)}, got {run_as!r}")
        self.max_output_chars = check_number(
            "max_output_chars", max_output_chars, integer=True, minimum=2, inclusive=True
        )
        self.memory_mb = check_number("memory_mb", memory_mb, integer=True, allow_none=True)
        self.cpu_time_s = check_number("cpu_time_s", cpu_time_s, allow_none=True)
        self.max_processes = check_number("max_processes", max_processes, integer=True, allow_none=True)
        self.max_file_mb = check_number("max_file_mb", max_file_mb, integer=True, allow_none=True)
        self.disk_mb = check_number("disk_mb", disk_mb, integer=True, allow_none=True)
        self.isolation = isolation
        self.executable = executable or sys.executable
        self.run_as = run_as
        self.backend = backend
        self.sandbox_url = sandbox_url
        self._client = None

    def parse(self, content: str) -> str:
        r"""The code itself, stripped; the cache key is the same string (whitespace inside code is significant)."""
        return content.strip()

    def isolation_report(self) -> IsolationReport:
        r"""Measured isolation of this tool's executions (a "remote" report for the SandboxFusion backend)."""
        if self.backend == "sandbox_fusion":
            return IsolationReport("remote", "remote")
        return measure_isolation(self.isolation, self.executable, self.run_as)

    def isolation_level(self) -> str:
        r"""Measured isolation level of this tool's executions (one of `ISOLATION_LEVELS`, or "remote")."""
        return self.isolation_report().level

    def backend_name(self) -> str:
        r"""See the base class."""
        return f"python:{self.backend}"

    def run(self, args: str) -> ToolOutput:
        r"""See the base class."""
        if self.backend == "sandbox_fusion":
            if self._client is None:
                self._client = outbound.outbound_client()
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
                disk_mb=self.disk_mb,
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


__all__ = ["PythonTool", "run_python_code", "run_remote_code"]
