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

"""Security boundaries of the python tool, tested for real: the tests run as root here and in CI (issue 8 item 1).

Model-written code is run through `run_python_code` exactly as in a rollout, at every sandbox that switches a root
trainer's code to an unprivileged uid (its own per call) on this machine: `bwrap` (CI installs bubblewrap), `unshare`
(the fallback for root machines without bubblewrap, forced with `isolation=`) and `rlimits-only` (with an interpreter
any uid can read: this checkout's virtual environment may live under /root, so the system Python is used there).
Nothing is mocked.
"""

import ast
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamafactory_agentic.tools import build_executor_from_args
from llamafactory_agentic.tools.python_tool import run_python_code
from llamafactory_agentic.tools.sandbox.isolation import (
    IsolationError,
    check_min_isolation,
    measure_isolation,
    probe_sandbox,
)
from llamafactory_agentic.tools.sandbox.percall import uid_range


REPO = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not ROOT, reason="these boundaries are about a trainer running as root (CI is root)")


def _nobody_python() -> str | None:
    """An interpreter an unprivileged uid can run without a mount namespace (for the `rlimits-only` level)."""
    for exe in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(exe) and probe_sandbox("rlimits-only", exe, as_nobody=True).usable:
            return exe
    return None


@pytest.fixture(params=["bwrap", "unshare", "rlimits-only"])
def sandbox(request):
    """(sandbox, interpreter, report) for a sandbox that runs the code as an unprivileged uid here."""
    name = request.param
    executable = None if name == "rlimits-only" else sys.executable
    if name == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (CI installs it: apt-get install bubblewrap)")
    if executable is None:
        executable = _nobody_python()
        if executable is None:
            pytest.skip("no interpreter that an unprivileged uid can read without a mount namespace")
    report = probe_sandbox(name, executable, as_nobody=True)
    if name == "unshare" and not report.usable:
        pytest.skip(f"this machine does not allow mount namespaces to root: {report.error}")
    assert report.usable, report.error
    assert measure_isolation(name, executable).sandbox == name  # `isolation=` really forces it
    return name, executable, report


def _call_uid(uid) -> bool:
    """A per-call uid: from the reserved range (issue 24 items 2, 3), never 65534 shared by every call."""
    base, slots = uid_range()
    return isinstance(uid, int) and base <= uid < base + slots


def _run(sandbox, code, **kwargs):
    name, executable, _ = sandbox
    kwargs.setdefault("timeout_s", 20)
    return run_python_code(code, isolation=name, executable=executable, **kwargs)


def test_best_level_here_is_full_and_the_repro_of_issue_8_fails():
    """The issue's reproduction: as root, the code printed `0 000001fffeffffff` and the first line of /etc/shadow."""
    report = measure_isolation()
    code = (
        "import os\nprint(os.getuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
        "try:\n    print(open('/etc/shadow').read()[:10])\nexcept OSError as exc:\n    print(type(exc).__name__)"
    )
    status, text = run_python_code(code, timeout_s=20)
    uid, cap_eff = text.splitlines()[0].split()
    assert status == "ok" and uid != "0" and cap_eff == "0000000000000000", text
    assert text.splitlines()[1] in ("PermissionError", "FileNotFoundError"), text
    if shutil.which("bwrap") or probe_sandbox("unshare").usable:
        assert report.level == "full", report.describe()


def test_code_has_no_capabilities_and_an_unprivileged_uid(sandbox):
    code = (
        "import json, os\nst = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)\n"
        "print(json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(), 'groups': os.getgroups(),\n"
        "  **{k: st[k].strip() for k in ('CapEff', 'CapPrm', 'CapInh', 'CapAmb', 'NoNewPrivs') if k in st}}))"
    )
    status, text = _run(sandbox, code)
    assert status == "ok", text
    seen = json.loads(text)
    assert (
        _call_uid(seen["uid"]) and seen["uid"] == seen["euid"] == seen["gid"] and seen["groups"] in ([], [seen["gid"]])
    )
    for key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert seen[key] == "0000000000000000", (key, seen)
    if sandbox[0] != "rlimits-only" or shutil.which("setpriv"):
        assert seen["NoNewPrivs"] == "1"  # setuid binaries (su, mount, sudo) cannot give privileges back


def test_root_only_files_stay_unreadable(sandbox):
    folder = tempfile.mkdtemp(dir="/var/tmp")
    os.chmod(folder, 0o755)
    secret = os.path.join(folder, "secret")
    with open(secret, "w") as f:
        f.write("TOP-SECRET-VALUE")
    os.chmod(secret, 0o600)
    try:
        code = (
            "out = []\n"
            f"for path in ('/etc/shadow', {secret!r}, '/root/.bashrc', '/proc/{os.getpid()}/environ'):\n"
            "    try:\n        out.append(open(path).read()[:40])\n    except OSError as exc:\n"
            "        out.append(type(exc).__name__)\nprint(out)"
        )
        status, text = _run(sandbox, code)
        assert status == "ok", text
        assert "TOP-SECRET-VALUE" not in text and "root:" not in text
        read = ast.literal_eval(text)  # the list printed by the code above
        assert all(v in ("PermissionError", "FileNotFoundError", "ProcessLookupError") for v in read), text
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_no_write_to_host_paths(sandbox):
    """Under the repository, in /root, in a world-writable host folder, and after trying to remount / read-write."""
    name, _, report = sandbox
    token = uuid.uuid4().hex
    world = tempfile.mkdtemp(dir="/var/tmp")
    os.chmod(world, 0o777)
    targets = [str(REPO / f"sandbox-escape-{token}"), f"/root/sandbox-escape-{token}", f"{world}/escape-{token}"]
    code = (
        "import subprocess\n"
        "subprocess.run(['mount', '-o', 'remount,rw', '/'], capture_output=True)\n"
        "subprocess.run(['mount', '-o', 'remount,rw', '/work'], capture_output=True)\n"
        "done = []\n"
        f"for path in {targets!r}:\n"
        "    try:\n        open(path, 'w').write('escaped')\n        done.append(path)\n    except OSError:\n        pass\n"
        "print('claimed', done)"
    )
    try:
        status, text = _run(sandbox, code)
        assert status == "ok", text
        on_host = [t for t in targets if os.path.exists(t)]
        if report.level in ("confined", "full"):
            assert on_host == [], text
        else:  # `rlimits-only` (level unprivileged): only world-writable host folders are writable, as measured;
            # what the call's uid wrote there is deleted when the call ends (issue 24 item 4)
            assert name == "rlimits-only" and report.host_write and text == f"claimed {[targets[2]]!r}", text
            assert on_host == [], text
    finally:
        for target in targets[:2]:
            if os.path.exists(target):
                os.remove(target)
        shutil.rmtree(world, ignore_errors=True)


def test_no_network(sandbox):
    name, _, report = sandbox
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        code = (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('connected')\n"
            "except OSError as exc:\n    try:\n        names = [n for _, n in socket.if_nameindex()]\n"
            "    except OSError:\n        names = []\n    print('blocked', names)"
        )
        status, text = _run(sandbox, code)
    finally:
        listener.close()
    assert status == "ok", text
    if name == "rlimits-only":  # no network namespace: the seccomp filter refuses socket() (issue 24 item 8)
        assert text == "blocked []" and report.network is False and report.level == "unprivileged"
    else:
        assert text == "blocked ['lo']" and report.network is False


def test_cannot_signal_the_trainer(sandbox):
    code = f"import os\ntry:\n    os.kill({os.getpid()}, 15)\n    print('sent')\nexcept OSError as exc:\n    print(type(exc).__name__)"
    status, text = _run(sandbox, code)
    assert (status, text) in (("ok", "PermissionError"), ("ok", "ProcessLookupError"))


def _sandbox_pids(root):
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if root in os.readlink(f"/proc/{pid}/cwd"):
                pids.append(pid)
        except OSError:
            pass
    return pids


def test_fork_bomb_is_contained(sandbox):
    root = tempfile.mkdtemp(prefix="lfa-bomb-")
    os.chmod(root, 0o755)
    code = (
        "import os, time\nn = 0\nfor _ in range(100000):\n    try:\n        if os.fork() == 0:\n"
        "            time.sleep(60)\n            os._exit(0)\n        n += 1\n    except OSError:\n        break\n"
        "print('forked', n)"
    )
    try:
        start = time.time()
        status, text = _run(sandbox, code, timeout_s=5, max_processes=24, workdir_root=root)
        assert time.time() - start < 15
        assert status == "ok" and text.startswith("forked "), text
        assert int(text.split()[1]) < 24  # RLIMIT_NPROC holds for the call's uid
        deadline = time.time() + 10
        while _sandbox_pids(root) and time.time() < deadline:
            time.sleep(0.1)
        assert not _sandbox_pids(root), "forked children survived the call"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_memory_limit_holds_and_cannot_be_raised(sandbox):
    code = (
        "import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, "
        "resource.RLIM_INFINITY))\n    print('raised')\nexcept (ValueError, OSError):\n    print('kept')\n"
        "try:\n    block = bytearray(1024 * 1024 * 1024)\n    print('allocated')\nexcept MemoryError:\n    print('MemoryError')"
    )
    status, text = _run(sandbox, code, memory_mb=512)
    assert (status, text) == ("ok", "kept\nMemoryError")


def test_cpu_limit_holds_and_cannot_be_raised(sandbox):
    code = (
        "import resource, sys\ntry:\n    resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, "
        "resource.RLIM_INFINITY))\n    sys.stderr.write('raised\\n')\nexcept (ValueError, OSError):\n"
        "    sys.stderr.write('kept\\n')\nwhile True:\n    pass"
    )
    start = time.time()
    status, text = _run(sandbox, code, timeout_s=20, cpu_time_s=1)
    assert (status, text) == ("error", "kept\nProcess killed by signal SIGXCPU: CPU time limit of 1 seconds exceeded.")
    assert time.time() - start < 10


def test_measured_levels(sandbox):
    name, _, report = sandbox
    assert report.as_nobody and _call_uid(report.uid) and report.uid == report.host_uid and report.per_call_uid
    assert report.cap_eff == "0000000000000000" and report.leftover_processes == 0
    assert report.root_file_read is False and report.private_file_read is False and report.process_limit
    if name == "rlimits-only":  # the network is closed by the seccomp filter (issue 24 item 8)
        assert (report.level, report.network, report.host_write) == ("unprivileged", False, True)
    else:
        assert (report.level, report.network, report.host_write) == ("full", False, False)


def test_code_kept_as_root_is_measured_as_none():
    """`run_as: self` (or no way to switch uid) keeps root: the probe measures it and says `none`."""
    report = probe_sandbox("rlimits-only", sys.executable, as_nobody=False)
    assert report.usable and report.level == "none"
    assert report.uid == report.host_uid == 0 and report.root_file_read and report.host_write
    assert report.network is False  # the seccomp filter holds even for root code (issue 24 item 8)
    assert measure_isolation("rlimits-only", run_as="self").level == "none"
    with pytest.raises(IsolationError, match=r"agentic_python_min_isolation: unprivileged.*uid 0.*bubblewrap"):
        check_min_isolation(report, "unprivileged")
    check_min_isolation(report, "none")


def _executor_args(**kw):
    base = dict(agentic_tool_config=None, agentic_cache_path=None, agentic_search_backend="replay")
    base.update(kw)
    return SimpleNamespace(**base)


def test_rl_refuses_to_start_below_the_minimum(monkeypatch):
    """`build_executor_from_args` (called by the arpo/aepo workflow) measures the python tool and refuses below
    `agentic_python_min_isolation`, naming the key, the measurement and how to get a stronger level."""
    with build_executor_from_args(_executor_args(agentic_python_min_isolation="unprivileged")) as ex:
        assert ex.tools["python"].isolation_level() in ("unprivileged", "confined", "full")
    executable = _nobody_python()
    if executable is not None:  # `rlimits-only` as a per-call uid measures `unprivileged`: below `full`
        args = _executor_args(agentic_python_isolation="rlimits-only", agentic_python_min_isolation="full")
        monkeypatch.setattr(sys, "executable", executable)
        with pytest.raises(IsolationError) as info:
            build_executor_from_args(args)
        message = str(info.value)
        assert "agentic_python_min_isolation: full" in message and "host write POSSIBLE" in message
        assert "agentic_python_min_isolation: unprivileged" in message  # how to accept it


def test_no_bubblewrap_on_path_falls_back_to_unshare(tmp_path):
    """A root machine without bubblewrap (like the lent GPU machine): PATH without bwrap, in a fresh process."""
    if not probe_sandbox("unshare").usable:
        pytest.skip("this machine does not allow mount namespaces to root")
    env = dict(os.environ, PATH=str(Path(sys.executable).parent), AGENTIC_PYTHON_ISOLATION="")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    code = (
        "import shutil; from llamafactory_agentic.tools.python_tool import run_python_code\n"
        "from llamafactory_agentic.tools.sandbox.isolation import measure_isolation\n"
        "assert shutil.which('bwrap') is None\nr = measure_isolation()\n"
        "print(r.sandbox, r.level, run_python_code('import os\\nprint(os.getuid())')[1])"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    sandbox_name, level, uid = proc.stdout.split()
    assert (sandbox_name, level) == ("unshare", "full") and _call_uid(int(uid))


def test_a_killed_trainer_leaves_no_sandbox_behind(sandbox, tmp_path):
    """SIGKILL of the process that runs the tool: bwrap dies with its parent, `unshare` too (parent-death signal),
    and the pid namespace takes the code with it. (`rlimits-only` has no pid namespace: documented, not tested.)"""
    name, executable, _ = sandbox
    if name == "rlimits-only":
        pytest.skip("rlimits-only has no pid namespace: the code outlives a killed trainer until its CPU limit")
    root = tempfile.mkdtemp(prefix="lfa-orphan-")
    os.chmod(root, 0o755)
    code = (
        "import sys; from llamafactory_agentic.tools.python_tool import run_python_code\n"
        f"run_python_code('import time\\ntime.sleep(300)', isolation={name!r}, timeout_s=600, workdir_root={root!r})"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    trainer = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.time() + 60
        while not _sandbox_pids(root) and time.time() < deadline:
            time.sleep(0.1)
        assert _sandbox_pids(root), "the sandbox never started"
        time.sleep(0.5)
        trainer.kill()
        trainer.wait()
        deadline = time.time() + 10
        while _sandbox_pids(root) and time.time() < deadline:
            time.sleep(0.1)
        assert not _sandbox_pids(root), "sandbox processes outlived the killed trainer"
    finally:
        for pid in _sandbox_pids(root):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- issue 24: per-call limits (items 2, 3, 4, 8, low)
def _alive_named(argv0: str) -> list[int]:
    """Live processes whose argv[0] is `argv0` (zombies have an empty command line)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0", 1)[0] == argv0.encode():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("ending", ["exit", "timeout", "undumpable"])
def test_detached_grandchildren_die_with_the_call(sandbox, ending):
    """Issue 24 item 2: `os.setsid` + double fork, 40 times; the old `rlimits-only` left them all running (one call
    left 253 processes). Every process the code started is dead when the call returns, at every level, also when
    the call times out and when the grandchildren hide from /proc's owner (PR_SET_DUMPABLE 0)."""
    marker = f"lfa-detached-{uuid.uuid4().hex}"
    if ending == "undumpable":  # own interpreter under the marker name, made non-dumpable, then sleeping
        hide = "import ctypes, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); time.sleep(120)"
        start = f"os.execv(sys.executable, [{marker!r}, '-c', {hide!r}])"
    else:
        start = f"os.execv('/bin/sleep', [{marker!r}, '120'])"
    code = (
        "import os, sys, time\n"
        "for _ in range(40):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        f"            {start}\n"
        "        os._exit(0)\n"
        "    os.wait()\n"
        "print('detached')\n" + ("time.sleep(60)\n" if ending == "timeout" else "")
    )
    try:
        status, text = _run(sandbox, code, timeout_s=4 if ending == "timeout" else 20, max_processes=64)
        left = _alive_named(marker)
        assert (status, text) == (("timeout", text) if ending == "timeout" else ("ok", "detached")), text
        assert left == [], f"{len(left)} detached processes outlived the call"
    finally:
        for pid in _alive_named(marker):  # only what this test started (its marker), by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.slow
def test_a_fork_bomb_does_not_starve_a_concurrent_call(sandbox):
    """Issue 24 item 3: RLIMIT_NPROC counts per uid; with every call as uid 65534, a call that forked up to the limit
    made a concurrent innocent call fail with `can't start new thread`. Each call has its own uid now."""
    import threading

    bomb = (
        "import os, time\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\ntime.sleep(6)\nprint('forked', n)"
    )
    innocent = (
        "import threading\nts = [threading.Thread(target=sum, args=([1, 2],)) for _ in range(8)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]\nprint('threads ok')"
    )
    results = {}
    bomber = threading.Thread(target=lambda: results.update(bomb=_run(sandbox, bomb, timeout_s=15, max_processes=24)))
    bomber.start()
    try:
        time.sleep(2.5)  # the bomb holds its 24 processes until its 6 s sleep ends
        results["innocent"] = _run(sandbox, innocent, timeout_s=15, max_processes=24)
    finally:
        bomber.join()
    assert results["bomb"][0] == "ok" and int(results["bomb"][1].split()[1]) < 24, results["bomb"]
    assert results["innocent"] == ("ok", "threads ok"), results["innocent"]


def test_files_are_bounded_per_call(sandbox):
    """Issue 24 item 4: one call held 4.8 GB of RAM in the sandbox's tmpfs, another 1.9 GB on the host disk.
    Every file of a call counts against `disk_mb` together: here 600 MiB tried in /tmp, the working directory and
    /dev/shm against 200 MiB; nothing stays on the host after the call."""
    name, _, _ = sandbox
    token = uuid.uuid4().hex[:12]
    code = (
        "import os\nwritten = 0\n"
        "print('tmpfs', os.statvfs('/tmp').f_blocks * os.statvfs('/tmp').f_frsize >> 20, flush=True)\n"
        "for d in ('/tmp', os.getcwd(), '/dev/shm'):\n"
        "    for i in range(2):\n"
        "        try:\n"
        f"            with open(f'{{d}}/{token}-{{i}}', 'wb') as f:\n"
        "                for _ in range(100):\n"
        "                    f.write(b'x' * (1 << 20))\n"
        "                    written += 1\n"
        "        except OSError:\n"
        "            break\n"
        "print('written', written)"
    )
    status, text = _run(sandbox, code, timeout_s=60, disk_mb=200, max_file_mb=100)
    if name == "rlimits-only":  # host folders: summed while the code runs, the call stopped above the bound
        # the sum is polled (percall.POLL_S): on a fast disk the 600 MiB can all be written between two polls, so
        # only the verdict and the clean-up are certain here, not how far past the bound the code got
        assert status == "error" and "Disk limit of 200 MiB exceeded" in text, text
    else:  # one private tmpfs of 200 MiB holds every file the code can write
        assert status == "ok", text
        lines = dict(line.split() for line in text.splitlines())
        assert int(lines["tmpfs"]) == 200 and int(lines["written"]) <= 200, text
    leftover = [
        os.path.join(d, f) for d in ("/tmp", "/var/tmp", "/dev/shm") for f in os.listdir(d) if f.startswith(token)
    ]
    assert leftover == [], f"files of the call stayed on the host: {leftover}"


def test_files_under_the_bound_are_kept_until_the_call_ends(sandbox):
    """The bound counts each file once (the working directory lies inside /tmp, which is summed too): 150 MiB in the
    working directory and /tmp against `disk_mb: 200` pass at every level."""
    code = (
        "import os\nfor path in ('a', '/tmp/b'):\n    with open(path, 'wb') as f:\n"
        "        for _ in range(75):\n            f.write(b'x' * (1 << 20))\n"
        "import time\ntime.sleep(0.5)\nprint(sum(os.path.getsize(p) for p in ('a', '/tmp/b')) >> 20)"
    )
    assert _run(sandbox, code, timeout_s=60, disk_mb=200, max_file_mb=100) == ("ok", "150")


def test_sandboxed_code_cannot_rewrite_a_redis_cache(sandbox, redis_url):
    """Issue 24 item 8: in `rlimits-only`, model code reached Redis on 127.0.0.1 and rewrote a cached search result
    that was later served as cached. The network is closed at every level (seccomp filter without a network
    namespace)."""
    from urllib.parse import urlparse

    import redis

    from llamafactory_agentic.tools.cache import open_cache

    cache = open_cache(redis_url)
    query = f"poison-{uuid.uuid4().hex}"
    try:
        assert cache.put("search", query, "genuine result")
        client = redis.Redis.from_url(redis_url)
        keys = [k.decode() for k in client.scan_iter(count=1000) if client.type(k) == b"string"
                and b"genuine result" in (client.get(k) or b"")]  # fmt: skip
        client.close()
        assert keys, "the entry is not in Redis"
        url = urlparse(redis_url)
        resp = "".join(f"*3\r\n$3\r\nSET\r\n${len(k)}\r\n{k}\r\n$8\r\npoisoned\r\n" for k in keys)
        code = (
            "import socket\ntry:\n"
            f"    s = socket.create_connection(({url.hostname!r}, {url.port}), timeout=3)\n"
            f"    s.sendall({resp.encode()!r})\n    print('sent', s.recv(100))\n"
            "except OSError as exc:\n    print('blocked', exc.errno)"
        )
        status, text = _run(sandbox, code)
        assert status == "ok" and text.startswith("blocked"), text
        entry = cache.get("search", query)
        assert entry is not None and entry.result == "genuine result", entry
    finally:
        cache.close()


@pytest.mark.slow
def test_cli_refuses_weak_isolation():
    """Issue 24 (low): `tool python --isolation rlimits-only` ran the code as root with a status-line warning only
    (this checkout's interpreter is not readable by an unprivileged uid without a mount namespace). It is refused
    now, naming the fix, unless `--allow-weak-isolation` is given."""
    if probe_sandbox("rlimits-only", sys.executable, as_nobody=True).usable:
        pytest.skip("here rlimits-only can switch this interpreter's code to an unprivileged uid")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("AGENTIC_PYTHON_ISOLATION", None)
    base = [sys.executable, "-m", "llamafactory_agentic.cli", "tool", "python", "--isolation", "rlimits-only",
            "--code", "import os\nos.getuid()"]  # fmt: skip
    refused = subprocess.run(base, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert "is refused" in refused.stderr and "--allow-weak-isolation" in refused.stderr, refused.stderr
    assert "uid 0" in refused.stderr and "bwrap" in refused.stderr, refused.stderr
    allowed = subprocess.run(base + ["--allow-weak-isolation"], env=env, capture_output=True, text=True, timeout=120)
    assert allowed.returncode == 0 and allowed.stdout.strip() == "0", allowed
    assert "weak isolation" in allowed.stderr, allowed.stderr


@pytest.mark.slow
def test_doctor_reports_the_per_call_limits():
    """Done-when of issue 24: `doctor` lists the per-call limits (processes, files, memory incl. tmpfs) and how they
    are enforced at the measured level."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "llamafactory_agentic.cli", "doctor"], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    out = proc.stdout
    assert "per-call limits at" in out, out[-3000:]
    section = out.split("per-call limits at", 1)[1]
    for row in ("processes", "files", "memory", "cpu", "after the call", "network"):
        assert f"\n         {row}" in section, section
    report = measure_isolation()
    if report.per_call_uid:
        assert "RLIMIT_NPROC of the call's own uid" in section and "SIGKILLed" in section, section
    if report.sandbox in ("bwrap", "unshare"):
        assert "512 MiB for all files together, on the sandbox's private tmpfs" in section, section
        assert "held in RAM" in section, section
