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

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from llamafactory_agentic.tools.python_tool import PythonTool, run_python_code
from llamafactory_agentic.tools.sandbox.isolation import (
    ISOLATION_LEVELS,
    available_sandboxes,
    measure_isolation,
    probe_sandbox,
)
from llamafactory_agentic.tools.sandbox.process import rewrite_last_expression


AVAILABLE = available_sandboxes()


@pytest.fixture()
def root():
    """Private parent folder of this test's sandbox working directories (tells our sandboxes from others').

    World-traversable (0755) so that code run as `nobody` can enter its working directory."""
    folder = tempfile.mkdtemp(prefix="lfa-test-sandboxes-")
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _sandbox_processes(root):
    """Pids of processes whose working directory lies in `root` (seen from the host, the working directory of a
    process chrooted by the `unshare` sandbox reads `<new root>/<root>/...`)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(root) or f"/root{root}/" in cwd:
            pids.append(int(pid))
    return pids


def _wait_no_sandbox_processes(root, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not _sandbox_processes(root):
            return True
        time.sleep(0.1)
    return False


def test_isolation_level_reported():
    report = measure_isolation()
    assert report.level in ISOLATION_LEVELS and report.usable
    print("isolation on this machine:", report.describe(), "available:", AVAILABLE)
    assert PythonTool().isolation_level() == report.level
    assert PythonTool().isolation_report() == report


@pytest.mark.parametrize(
    "code,expected",
    [
        ("1 + 1", "2"),
        ("x = 5\nx * 2", "10"),
        ("a = 1; a + 1", "2"),
        ("print('hi')", "hi"),
        ("print('a')\nprint('b')", "a\nb"),
        ("import math\nmath.sqrt(\n    16\n)", "4.0"),
        ("s = 'é'\ns * 2  # comment", "éé"),
        ("   \n\nprint('  padded  ')\n\n", "padded"),
    ],
)
def test_outputs_like_the_reference(code, expected):
    status, text = run_python_code(code, timeout_s=5)
    assert (status, text) == ("ok", expected)


def test_rewrite_rules():
    assert rewrite_last_expression("print(1)") == "print(1)"
    assert rewrite_last_expression("x = 1") == "x = 1"
    assert rewrite_last_expression("def f(:\n  1") == "def f(:\n  1"  # unparsable code runs unchanged
    assert rewrite_last_expression("x = 2\nx") == "x = 2\nprint(x)"


def test_empty_output_and_errors():
    assert run_python_code("x = 1", timeout_s=5) == ("empty", "Tool(python) returned empty output.")
    status, text = run_python_code("raise ValueError('boom')", timeout_s=5)
    assert status == "error" and text.startswith("Traceback") and text.endswith("ValueError: boom")
    status, text = run_python_code("def f(:\n    pass", timeout_s=5)
    assert status == "error" and "SyntaxError" in text
    status, text = run_python_code("import sys; sys.exit(3)", timeout_s=5)
    assert status == "error" and "code 3" in text


def test_empty_output_is_not_retried():
    calls = []

    class Counting(PythonTool):
        def run(self, args):
            calls.append(args)
            return super().run(args)

    result = Counting(timeout_s=5, retries=3).execute("x = 1")
    assert result.status == "empty" and result.text == "Tool(python) returned empty output."
    assert len(calls) == 1


def test_timeout_kills_the_whole_tree(root):
    code = "import subprocess, time\nsubprocess.Popen(['sleep', '30'])\nwhile True:\n    pass"
    start = time.time()
    status, text = run_python_code(code, timeout_s=1.5, workdir_root=root)
    assert (status, text) == ("timeout", "Execution timed out after 1.5 seconds.")
    assert time.time() - start < 5
    assert _wait_no_sandbox_processes(root), "a process of the timed-out sandbox survived"


@pytest.mark.parametrize("level", AVAILABLE)
def test_infinite_loop_every_level(level, root):
    status, text = run_python_code("while True:\n    pass", timeout_s=1, isolation=level, workdir_root=root)
    assert (status, text) == ("timeout", "Execution timed out after 1 seconds.")
    assert _wait_no_sandbox_processes(root)


@pytest.mark.parametrize("level", AVAILABLE)
def test_code_killing_its_parent(level, root):
    code = "import os\nos.kill(os.getppid(), 9)\nprint('alive')"
    status, text = run_python_code(code, timeout_s=3, isolation=level, workdir_root=root)
    # we are still running; the sandbox answered with some observation
    assert status in ("ok", "error") and text
    assert _wait_no_sandbox_processes(root)


def test_memory_hog_is_stopped():
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 * 1024))"
    status, text = run_python_code(code, timeout_s=10, memory_mb=512)
    assert status == "error"
    assert "MemoryError" in text or "SIGKILL" in text or "SIGSEGV" in text


@pytest.mark.parametrize("level", AVAILABLE)
def test_cpu_time_limit(level):
    """Every level: SIGXCPU at the soft limit becomes a readable error observation (under `unshare` the code used to
    be pid 1 of the namespace, and its SIGKILL death crashed `unshare` with `sigprocmask unblock failed`)."""
    code = "import sys\nsys.stderr.write('started\\n')\nwhile True:\n    pass"
    status, text = run_python_code(code, timeout_s=10, cpu_time_s=1, isolation=level)
    assert (status, text) == (
        "error",
        "started\nProcess killed by signal SIGXCPU: CPU time limit of 1 seconds exceeded.",
    )


@pytest.mark.slow
def test_cpu_time_limit_with_sigxcpu_ignored():
    """Code that ignores SIGXCPU is SIGKILLed at the hard limit (one second later), still a readable observation."""
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    status, text = run_python_code(code, timeout_s=10, cpu_time_s=1)
    assert status == "error" and "SIGKILL" in text and "CPU time limit of 1 seconds" in text
    assert "sigprocmask" not in text


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_bwrap_with_an_interpreter_under_tmp():
    """A CI clone keeps its virtual environment (and editable sources) under /tmp, which bwrap replaces by a private
    tmpfs: those folders are bound read-only so that bwrap stays usable wherever it works for the same base
    interpreter. The venv is created without pip (milliseconds); the editable install is a PEP 610 record."""
    if not probe_sandbox("bwrap", executable=os.path.realpath(sys.executable)).usable:
        pytest.skip("bwrap does not work on this machine")
    folder = tempfile.mkdtemp(prefix="lfa-venv-", dir="/tmp")
    try:
        venv = os.path.join(folder, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, capture_output=True)
        python = os.path.join(venv, "bin", "python")
        source = os.path.join(folder, "project")
        os.makedirs(source)
        with open(os.path.join(source, "data.txt"), "w") as f:
            f.write("editable source")
        site = os.path.join(venv, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
        info = os.path.join(site, "demo-0.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: demo\nVersion: 0\n")
        with open(os.path.join(info, "direct_url.json"), "w") as f:
            json.dump({"url": f"file://{source}", "dir_info": {"editable": True}}, f)
        assert measure_isolation("bwrap", executable=python).sandbox == "bwrap"
        with open(os.path.join(folder, "secret.txt"), "w") as f:
            f.write("not for the sandbox")
        code = f"import os\nprint(open({source!r} + '/data.txt').read(), os.path.exists({folder!r} + '/secret.txt'))"
        status, text = run_python_code(code, timeout_s=10, isolation="bwrap", executable=python)
        # the editable source is readable; the rest of the host's /tmp stays hidden
        assert (status, text) == ("ok", "editable source False")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_hundred_megabytes_of_output_stays_bounded():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = "import sys\nblock = 'x' * (1024 * 1024)\nfor _ in range(100):\n    sys.stdout.write(block)\n"
    status, text = run_python_code(code, timeout_s=20, max_output_chars=4000)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert status == "ok"
    omitted = 100 * 1024 * 1024 - 4000
    assert text == "x" * 2000 + f"\n[… {omitted} characters omitted …]\n" + "x" * 2000
    assert (after - before) < 60 * 1024, f"parent memory grew by {(after - before) / 1024:.0f} MiB"


def test_truncated_stderr_traceback():
    code = "import sys\nsys.stderr.write('e' * 10000)\nsys.exit(1)"
    status, text = run_python_code(code, timeout_s=5, max_output_chars=100)
    assert status == "error"
    assert text.startswith("e" * 50 + "\n[… 9900 characters omitted …]\n") and text.endswith("e" * 50)


def test_binary_output_is_decoded_safely():
    status, text = run_python_code("import sys\nsys.stdout.buffer.write(bytes(range(256)) * 10)", timeout_s=5)
    assert status == "ok"
    text.encode("utf-8")  # no lone surrogates
    assert "\ufffd" in text


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "abc123")
    status, text = run_python_code("import os\nprint(os.environ.get('SECRET_TOKEN'), os.getcwd())", timeout_s=5)
    assert status == "ok"
    value, cwd = text.split(" ")
    assert value == "None" and "/lfa-py-" in cwd


def test_fresh_interpreter_per_call():
    tool = PythonTool(timeout_s=5)
    assert tool.execute("import builtins\nbuiltins.leak = 1\nprint('set')").text == "set"
    result = tool.execute("import builtins\nprint(hasattr(builtins, 'leak'))")
    assert result.text == "False"


@pytest.mark.parametrize("level", [lv for lv in AVAILABLE if lv != "rlimits-only"])
def test_no_network_in_namespaces(level):
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')"
        status, text = run_python_code(code, timeout_s=5, isolation=level)
    finally:
        listener.close()
    assert status == "error" and ("Errno" in text or "refused" in text or "unreachable" in text)


@pytest.mark.parametrize("level", AVAILABLE)
def test_files_outside_the_working_directory(level):
    """The sentinel survives at every level but `none` (read-only system, or code running as uid 65534); the code
    writes freely in its own working directory."""
    if measure_isolation(level).level == "none":
        pytest.skip(f"{level} runs the code as root here: nothing protects the trainer's files (level none)")
    folder = tempfile.mkdtemp(dir="/var/tmp")
    sentinel = os.path.join(folder, "sentinel.txt")
    with open(sentinel, "w") as f:
        f.write("keep")
    try:
        code = f"import os, shutil\nos.remove({sentinel!r})\nprint('deleted')"
        status, text = run_python_code(code, timeout_s=5, isolation=level)
        assert status == "error"
        assert open(sentinel).read() == "keep"
        status, text = run_python_code("open('inside.txt', 'w').write('x')\nprint(open('inside.txt').read())",
                                       timeout_s=5, isolation=level)  # fmt: skip
        assert (status, text) == ("ok", "x")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("level", AVAILABLE)
def test_fork_bomb_is_bounded(level, root):
    """RLIMIT_NPROC binds the unprivileged code (every level but `none`); the pid namespace of bwrap/unshare and the
    process-group kill end the rest at the timeout."""
    if measure_isolation(level).level == "none":
        pytest.skip(f"{level} runs the code as root here: RLIMIT_NPROC does not bind root (level none)")
    code = (
        "import os, time\nn = 0\nfor _ in range(100000):\n    try:\n        if os.fork() == 0:\n"
        "            time.sleep(30)\n            os._exit(0)\n        n += 1\n    except OSError:\n        break\n"
        "print('forked', n)"
    )
    start = time.time()
    status, text = run_python_code(code, timeout_s=3, max_processes=32, isolation=level, workdir_root=root)
    assert time.time() - start < 8
    assert status == "ok" and text.startswith("forked "), text
    assert int(text.split()[1]) < 32
    assert _wait_no_sandbox_processes(root), "forked children survived the sandbox"


def test_remote_sandbox_backend(fake_server):
    """SandboxFusion cannot run here: a local fake server answers in its format."""

    def handler(method, path, headers, body):
        req = json.loads(body)
        assert path == "/run_code" and req["language"] == "python" and req["run_timeout"] == 2
        if "loop" in req["code"]:
            return 200, {"status": "Failed", "run_result": {"status": "TimeLimitExceeded", "return_code": None}}
        if "boom" in req["code"]:
            return 200, {"status": "Failed", "run_result": {"status": "Finished", "return_code": 1, "stdout": "",
                                                            "stderr": "Traceback...\nValueError: boom\n"}}  # fmt: skip
        if "http500" in req["code"]:
            return 500, {"error": "down"}
        if "garbage" in req["code"]:
            return 200, b"<html>not json"
        return 200, {"status": "Success", "run_result": {"status": "Finished", "return_code": 0,
                                                         "stdout": req["code"] + "\n", "stderr": ""}}  # fmt: skip

    server = fake_server(handler)
    tool = PythonTool(backend="sandbox_fusion", sandbox_url=server.url, timeout_s=2, retries=2, backoff_s=0.01)
    assert tool.isolation_level() == "remote"
    assert tool.execute("1 + 1").text == "print(1 + 1)"  # the expression rewrite happens before sending
    assert tool.execute("raise ValueError('boom')").text == "Traceback...\nValueError: boom"
    assert tool.execute("loop()").text == "Execution timed out after 2 seconds."
    n = len(server.requests)
    result = tool.execute("http500()")
    assert result.status == "error" and "HTTP 500" in result.text and len(server.requests) - n == 2
    assert tool.execute("garbage").status == "error"
    tool.close()


def test_executor_metrics_report_the_measured_level():
    from llamafactory_agentic.tools import ToolCall, ToolExecutor

    level = measure_isolation().level
    with ToolExecutor([PythonTool(timeout_s=10)]) as ex:
        assert ex.execute([ToolCall("python", "print(1)"), ToolCall("python", "print(2)")])[1].text == "2"
        metrics = ex.pop_metrics()
    assert metrics[f"tools/python/calls_at_{level}"] == 2
