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

r"""Sandboxes of the python tool and their measured isolation (the tool itself: `tools/python_tool.py`).

Isolation is measured, not assumed. At first use, for each candidate sandbox, a probe program runs in that sandbox
exactly as model code would (same command, same limits, same interpreter) and the trainer checks from outside what it
could do (`measure_isolation`, `IsolationReport`):

* uid: the owner, on the host, of a file the code created (and the uid the code sees);
* capabilities: `CapEff` of the code's process;
* root-only read: whether it can read `/etc/shadow` and a 0600 file the trainer placed in its working directory;
* host write: whether a file it tried to create in a host folder outside its working directory (a world-writable
  folder under `/var/tmp`) appeared on the host;
* network: whether it can connect to a socket the trainer listens on at 127.0.0.1, or sees any interface but `lo`;
* process limit: whether `fork` stops at the RLIMIT_NPROC the sandbox set (root and capabilities ignore it);
* processes left: how many of its processes (a detached, double-forked grandchild) are alive after the call;
* and that the sandbox ran the same interpreter (version and prefix) as the trainer asked for.

(Only difference to model code: the probe's working directory is a host folder bound into the sandbox, so that the
trainer can place the 0600 file and see the owner of the file the code created.)

Levels, weakest first (`ISOLATION_LEVELS`); each includes the guarantees of the ones before it:

* `none`: the code runs as root or with capabilities, or reads root-only files: it can do what the trainer can.
* `unprivileged`: unprivileged uid, empty capability set, no root-only file readable, process limit binding. It can
  still use the network and write wherever its uid may write (the trainer's own files when the trainer is not root).
* `confined`: also no network and no write to any host path outside its working directory.
* `full`: also cannot read the trainer's private (0600) files: it reads only what any other uid may read.

Sandboxes (`SANDBOXES`), tried strongest first; `auto` takes the one with the highest measured level:

* `bwrap`: bubblewrap: read-only view of `/`, private `/tmp` (a tmpfs of `disk_mb` holding the working directory)
  and `/dev`, fresh `/proc`, no network, own pid, ipc and uts namespaces; the sandbox dies with its parent. As root,
  the code is started by util-linux `setpriv` as the call's own uid/gid (`sandbox.percall`) with no supplementary
  groups, an empty capability set (bounding, inheritable and ambient sets
  cleared) and `no_new_privs`. As another user, bubblewrap's user namespace keeps that user's uid, without
  capabilities (the code can then read that user's files: `confined`).
* `unshare`: util-linux `unshare`. As root: new mount, pid, network, ipc and uts namespaces; a small `/bin/sh`
  script binds `/` recursively read-only into a new root, mounts a fresh `/proc`, `/sys` (read-only), a minimal
  `/dev`, private `/tmp` and `/dev/shm`, then `chroot` and `setpriv` as above: the same guarantees as `bwrap` for
  machines without bubblewrap. As another user: a user namespace mapping that user to itself, no network, own pid
  namespace, files protected by ordinary permissions only.
* `rlimits-only`: resource limits and a process group; as root the code runs as the call's own uid (via `setpriv`,
  or Popen's `user=` where `setpriv` is missing). No file-system isolation (its files in the host's world-writable
  folders are summed against `disk_mb` and deleted after the call); the network is closed by a seccomp filter
  (`percall.NET_FILTER_BOOTSTRAP`: `socket()` only for AF_UNIX, no io_uring).

Per call (`sandbox.percall`; docs/tools.md "Per-call limits"): as root each call runs as a uid of its own, so
RLIMIT_NPROC counts its processes only, and when the call returns every process of that uid is SIGKILLed
(`kill(-1)` from a helper running as that uid), detached ones included; all files of a call are bounded by `disk_mb`.

As root, the code's uid must be able to read the interpreter. Folders on the interpreter's paths that it cannot
enter (e.g. `/root` holding a pyenv, a venv or editable sources) are hidden behind an empty tmpfs in the sandbox and
exactly the interpreter's folders (prefix, base prefix, `sys.path`, editable-install sources, the executable's
folders) are bound back read-only at their own paths, so symlinks and `pyvenv.cfg` keep working and nothing else of
those folders is visible. Folders under `/tmp` (e.g. a CI clone's venv) are bound into the private `/tmp` the same way.
Without a mount namespace (`rlimits-only`) this is impossible: such an interpreter then runs as root (`none`).

Resource limits are set by util-linux `prlimit`, exec'd between the sandbox and the interpreter (no Python code runs
between fork and exec, which `preexec_fn` would do and which is unsafe in a threaded trainer); `preexec_fn` is only
the fallback when `prlimit` is missing. The CPU-time limit is soft N s / hard N + 1 s: SIGXCPU at N s, SIGKILL one
second later if the code handles SIGXCPU; either death is reported as an error observation naming the signal and
the limit. RLIMIT_NPROC counts every process of a uid, hence the per-call uid. A silent
`/bin/sh` stands between the sandbox and the code, so that the code is never pid 1 of a namespace (pid 1 ignores
signals it has no handler for) and its death by a signal becomes the exit status 128 + signal. The `bwrap` and
`unshare` sandboxes end with the thread that started them (`--die-with-parent`, `setpriv --pdeathsig`), taking their
pid namespace along, so a killed trainer leaves no code running; under `rlimits-only` the code of a killed trainer
runs on until its CPU limit. The program is sent on stdin (`python -`), so tracebacks read `File "<stdin>", line N`
on every call, and `input()` sees an immediate EOF.

Getting `full` (check with `llamafactory-agentic doctor`): install bubblewrap (`apt-get install bubblewrap`); as a
non-root user also allow unprivileged user namespaces (`kernel.unprivileged_userns_clone=1`; Ubuntu 24.04: an
AppArmor profile for bwrap). As root without bubblewrap, `unshare` needs the right to create mount namespaces (in a
container: CAP_SYS_ADMIN and a seccomp profile that allows `unshare`/`mount`, e.g. `docker run --cap-add SYS_ADMIN
--security-opt seccomp=unconfined`, or install bubblewrap in the image). Stronger still: run the code in a separate
sandbox service (`backend: sandbox_fusion`, SandboxFusion in its own container or VM). `agentic_python_min_isolation`
makes `arpo`/`aepo` refuse to start below a level.
"""

import atexit
import json
import math
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...common.log import get_logger
from ...hparams import PYTHON_MIN_ISOLATION, PYTHON_TIMEOUT_S
from ..base import (
    STATUS_OK,
    ToolError,
    TransientToolError,
)
from . import percall
from .process import _run_and_collect, rewrite_last_expression


logger = get_logger(__name__)


SANDBOXES = ("bwrap", "unshare", "rlimits-only")
ISOLATION_LEVELS = ("none", "unprivileged", "confined", "full")  # weakest first
DEFAULT_MIN_ISOLATION = PYTHON_MIN_ISOLATION  # agentic_python_min_isolation's default
RUN_AS = ("auto", "self")
NOBODY_ID = 65534
DISK_MB = 512  # default bound on all files of one call (MiB)
PRIVATE_DIRS = ("/tmp",)  # replaced by an empty tmpfs inside the bwrap/unshare sandboxes
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Silent intermediate shell (`sh -c SCRIPT sh WORKDIR CMD...`): changes to the working directory (the `unshare`
# sandbox starts in the new root), sends the shell's own stderr to /dev/null (no "Killed" or "CPU time limit
# exceeded" job messages, which dash/bash print for a child killed by a signal) while the command keeps the original
# stderr (fd 3); the subshell execs the command, the shell exits with its status (128 + signal).
SILENT_SHELL = ["/bin/sh", "-c", 'cd "$1" || exit 125; shift; exec 3>&2 2>/dev/null; ("$@") 2>&3 3>&-; exit $?', "sh"]
# Root `unshare` sandbox: run as pid 1 of new mount/pid/net/ipc/uts namespaces with
# `R W DEV SIZE OWNER [--mask D | --ro P]... -- CMD...`: builds the new root R (a recursive, read-only bind of /),
# mounts fresh /proc and read-only /sys, binds the prepared device folder DEV read-only on /dev (or, when DEV is empty,
# binds the few device nodes into a tmpfs), mounts a private /tmp (a tmpfs of SIZE, e.g. `512m`) whose `.shm` folder
# is bound on /dev/shm (one bound for every file the code can write), hides each D behind an empty tmpfs, binds each
# P back read-only, then makes the working directory W: with OWNER (`uid:gid`) a new 0700 folder on the private /tmp
# owned by OWNER, else the host folder W bound read-write (the probe's); then runs CMD (`chroot R setpriv ...`) as its
# child and exits with its status. The script stays pid 1 and root: `unshare --kill-child` kills it when unshare dies (a parent-
# death signal survives only while the credentials do not change, so pid 1 must not become uid 65534), and the pid
# namespace dies with it. Every step is one `mount` (util-linux creates missing folders with X-mount.mkdir); any
# failure exits non-zero (the probe says so).
UNSHARE_SETUP = r"""
set -eu
umask 022
R=$1
W=$2
DEV=$3
SIZE=$4
OWNER=$5
shift 5
mount --rbind / "$R"
while read -r _ _ _ _ mp opts _; do
  case $mp in *\\*) mp=$(printf '%b' "$mp") ;; esac
  case $mp in
    "$R"/proc|"$R"/proc/*|"$R"/sys|"$R"/sys/*|"$R"/dev|"$R"/dev/*|"$R"/tmp|"$R"/tmp/*) ;;
    "$R"|"$R"/*) case ,$opts, in *,ro,*) ;; *) mount -o remount,bind,ro "$mp" ;; esac ;;
  esac
done < /proc/self/mountinfo
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
if [ -n "$DEV" ]; then
  mount --bind -o ro "$DEV" "$R/dev"
else
  mount -t tmpfs -o mode=0755,nosuid,size=1m lfa-dev "$R/dev"
  for d in null zero full random urandom tty; do
    [ -e "/dev/$d" ] || continue
    : > "$R/dev/$d"
    mount --bind "/dev/$d" "$R/dev/$d"
  done
  ln -s /proc/self/fd "$R/dev/fd"
  mkdir "$R/dev/shm"
fi
mount -t tmpfs -o "mode=1777,nosuid,nodev,size=$SIZE" lfa-tmp "$R/tmp"
mkdir -m 1777 "$R/tmp/.shm"
mount --bind "$R/tmp/.shm" "$R/dev/shm"
while [ "$1" != -- ]; do
  case $1 in
    --mask) mount -t tmpfs -o mode=0755,nosuid,nodev lfa-mask "$R$2" ;;
    --ro)
      if [ -d "$2" ]; then
        mount --bind -o ro,X-mount.mkdir "$2" "$R$2"
      else
        mkdir -p "$R${2%/*}"
        : > "$R$2"
        mount --bind -o ro "$2" "$R$2"
      fi ;;
  esac
  shift 2
done
shift
if [ -n "$OWNER" ]; then
  mkdir -p -m 0700 "$R$W"
  chown "$OWNER" "$R$W"
else
  mount --bind -o X-mount.mkdir "$W" "$R$W"
fi
"$@"
"""
# Run by the interpreter itself (outside any sandbox): its identity, prefixes, `sys.path`, and the source folders of
# editable installs (PEP 610 `direct_url.json`; setuptools' editable finders import them without a `sys.path` entry).
_QUERY_INTERPRETER = """
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
print(json.dumps({"identity": [sys.version, sys.prefix], "paths": paths}))
"""
# The probe: run in the sandbox like model code. Placeholders are filled with JSON literals.
_PROBE_CODE = """
import json, os, socket, sys
out = {"uid": os.getuid(), "identity": [sys.version, sys.prefix]}
if os.fork() == 0:  # a detached grandchild (own session, orphaned) that would sleep on after the call
    os.setsid()
    if os.fork() == 0:
        try:
            os.execv("/bin/sleep", [__MARK__, "30"])
        finally:
            os._exit(0)
    os._exit(0)
os.wait()
with open("/proc/self/status") as f:
    for line in f:
        name, _, value = line.partition(":")
        if name in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs"):
            out[name] = value.strip()
def readable(path):
    try:
        with open(path, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False
out["private_read"] = readable("secret")
out["shadow_read"] = readable("/etc/shadow")
for folder in __TARGETS__:
    try:
        with open(os.path.join(folder, "written-by-sandbox"), "w") as f:
            f.write("x")
    except OSError:
        pass
try:
    socket.create_connection(("127.0.0.1", __PORT__), timeout=2).close()
    out["connected"] = True
except OSError:
    out["connected"] = False
try:
    out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
except OSError:
    out["interfaces"] = []
r, w = os.pipe()
forks = 0
for _ in range(__FORKS__):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    forks += 1
os.close(w)
for _ in range(forks):
    os.wait()
out["forks"] = forks
open("owner-probe", "w").close()
print(json.dumps(out))
"""
_PROBE_NPROC = 16  # RLIMIT_NPROC of the probe; it tries 4x as many forks

_LOCK = threading.RLock()  # guards the caches below (held briefly)
_PROBE_LOCK = threading.Lock()  # one probe at a time
_MEASURE_LOCK = threading.Lock()  # one sandbox choice at a time
_INFO: dict[str, dict] = {}
_REPORTS: dict[tuple[str, str, bool], "IsolationReport"] = {}
_CHOSEN: dict[tuple[str, str, str], "IsolationReport"] = {}
_HIDDEN: dict[str, str | None] = {}
_PLANS: dict[tuple[str, str, bool], tuple[list[str], list[str]]] = {}
_SANDBOX_BASE: list[tuple[str, str]] = []
_BWRAP_SIZE: dict[str, bool] = {}


class IsolationError(RuntimeError):
    r"""The measured isolation of the python tool is below the required minimum (`agentic_python_min_isolation`)."""


@dataclass(frozen=True)
class IsolationReport:
    r"""What the probe measured inside one sandbox (see the module docstring for the levels).

    Attributes:
        sandbox: "bwrap", "unshare", "rlimits-only" or "remote" (SandboxFusion backend: not measured here).
        level: one of `ISOLATION_LEVELS`, or "remote".
        as_nobody: whether the sandbox switches a root trainer's code to uid 65534.
        uid: uid seen by the code; host_uid: owner on the host of a file the code created.
        cap_eff: the code's effective capability set (hex, from /proc/self/status).
        root_file_read: the code read /etc/shadow, or (root trainer) the trainer's 0600 file.
        private_file_read: the code read a 0600 file owned by the trainer.
        host_write: a file the code wrote outside its working directory appeared on the host.
        network: the code reached a socket on the host's 127.0.0.1, or saw a network interface other than `lo`.
        process_limit: `fork` stopped at the RLIMIT_NPROC the sandbox set.
        leftover_processes: processes of the probe (a detached, double-forked grandchild) still alive after the call.
        per_call_uid: the code ran as a uid of its own (`percall`), so its process limit is the call's own.
        network_filter: the interpreter started behind the seccomp network filter (`rlimits-only`).
        error: why the sandbox cannot be used here (then the other fields are None and level is "none").
    """

    sandbox: str
    level: str
    as_nobody: bool = False
    uid: int | None = None
    host_uid: int | None = None
    cap_eff: str | None = None
    root_file_read: bool | None = None
    private_file_read: bool | None = None
    host_write: bool | None = None
    network: bool | None = None
    process_limit: bool | None = None
    leftover_processes: int | None = None
    per_call_uid: bool | None = None
    network_filter: bool | None = None
    error: str | None = None

    @property
    def usable(self) -> bool:
        r"""Whether the sandbox ran the probe (with the expected interpreter)."""
        return self.error is None

    @property
    def rank(self) -> int:
        r"""Index in `ISOLATION_LEVELS` (-1 for "remote")."""
        return ISOLATION_LEVELS.index(self.level) if self.level in ISOLATION_LEVELS else -1

    def describe(self) -> str:
        r"""One line: level, sandbox and every measured property, e.g. for `doctor` and error messages."""
        if self.sandbox == "remote":
            return "remote (SandboxFusion service: isolation is the service's, not measured here)"
        if self.error:
            return f"unavailable ({self.sandbox}): {self.error}"

        def _yes(flag: bool | None, yes: str, no: str) -> str:
            return "unknown" if flag is None else (yes if flag else no)

        parts = [
            f"uid {self.uid} (host uid {self.host_uid})",
            f"CapEff {self.cap_eff}",
            "root-only file " + _yes(self.root_file_read, "READABLE", "unreadable"),
            "trainer's private file " + _yes(self.private_file_read, "READABLE", "unreadable"),
            "host write " + _yes(self.host_write, "POSSIBLE", "blocked"),
            "network " + _yes(self.network, "REACHABLE", "blocked"),
            "process limit " + _yes(self.process_limit, "holds", "DOES NOT HOLD"),
            "processes left after the call: "
            + ("unknown" if self.leftover_processes is None else str(self.leftover_processes)),
        ]
        return f"{self.level} ({self.sandbox}): " + ", ".join(parts)


def level_rank(level: str) -> int:
    r"""Index of `level` in `ISOLATION_LEVELS`.

    Raises:
        ValueError: unknown level.
    """
    if level not in ISOLATION_LEVELS:
        raise ValueError(f"unknown isolation level {level!r}; use one of {', '.join(ISOLATION_LEVELS)}")
    return ISOLATION_LEVELS.index(level)


def _is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _outermost(paths: list[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(_is_under(path, k) for k in kept):
            kept.append(path)
    return kept


def _interpreter_info(executable: str) -> dict:
    r"""Identity (`[sys.version, sys.prefix]`) and folders of `executable`, asked once outside any sandbox.

    The interpreter runs with a scrubbed environment like the code's; its folders are its prefixes, `sys.path`, the
    source folders of its editable installs and the folders of the executable (literal and resolved).
    """
    with _LOCK:
        if executable in _INFO:
            return _INFO[executable]
    info: dict = {
        "identity": None,
        "paths": [os.path.dirname(executable), os.path.dirname(os.path.realpath(executable))],
    }
    try:
        proc = subprocess.run(
            [executable, "-s", "-c", _QUERY_INTERPRETER],
            cwd="/",
            env={"PATH": SYSTEM_PATH, "LC_ALL": "C.UTF-8"},
            capture_output=True,
            timeout=60,
        )
        if proc.returncode == 0:
            data = json.loads(proc.stdout.decode("utf-8").strip().splitlines()[-1])
            info["identity"] = data["identity"]
            info["paths"] += [p for p in data["paths"] if isinstance(p, str) and p]
        else:
            logger.info("[agentic-tools] %s failed: %s", executable, proc.stderr.decode(errors="replace")[-300:])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as exc:
        logger.info("[agentic-tools] could not ask %s for its paths: %s", executable, exc)
    with _LOCK:
        return _INFO.setdefault(executable, info)


def _nobody_can_enter(st: os.stat_result) -> bool:
    if percall.per_call_uid_error() is None:  # a per-call uid owns nothing and is in no group: "other" bits
        return bool(st.st_mode & stat.S_IXOTH)
    if st.st_uid == NOBODY_ID:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == NOBODY_ID:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _hidden_ancestor(path: str) -> str | None:
    r"""Topmost proper ancestor folder of the resolved `path` that uid 65534 cannot enter (None: all enterable)."""
    folder = os.path.dirname(os.path.realpath(path))
    with _LOCK:
        if folder in _HIDDEN:
            return _HIDDEN[folder]
    found = None
    current = "/"
    for part in [p for p in folder.split("/") if p]:
        current = os.path.join(current, part)
        try:
            if not _nobody_can_enter(os.stat(current)):
                found = current
                break
        except OSError:
            break
    with _LOCK:
        _HIDDEN[folder] = found
    return found


def _mount_plan(executable: str, workdir: str, as_nobody: bool) -> tuple[list[str], list[str]]:
    r"""(masks, read-only binds) that make the interpreter usable inside a sandbox with a private /tmp.

    Masks (root trainer only): topmost folders on the way to the interpreter's folders or the working directory that
    uid 65534 cannot enter; they become empty tmpfs. Binds: the interpreter's existing folders under a mask or a
    private dir, outermost only, bound back read-only at their own path. Cached per interpreter and folder of the
    working directories.
    """
    key = (executable, os.path.dirname(workdir), as_nobody)
    with _LOCK:
        if key in _PLANS:
            return _PLANS[key]
    paths = _interpreter_info(executable)["paths"]
    masks: list[str] = []
    if as_nobody:
        for path in paths + [workdir]:
            hidden = _hidden_ancestor(path)
            if hidden and not any(_is_under(hidden, d) for d in PRIVATE_DIRS):
                masks.append(hidden)
        masks = _outermost(masks)
    covers = list(PRIVATE_DIRS) + masks
    binds = []
    for path in paths:
        for candidate in (os.path.normpath(os.path.abspath(path)), os.path.realpath(path)):
            if candidate in covers or not os.path.exists(candidate):
                continue
            if any(_is_under(candidate, c) for c in covers):
                binds.append(candidate)
    plan = (masks, _outermost(binds))
    with _LOCK:
        return _PLANS.setdefault(key, plan)


def _remove_own(folder: str, pid: int) -> None:
    r"""At exit, remove `folder` if this process made it (a forked child exiting must not remove its parent's)."""
    if os.getpid() == pid:
        shutil.rmtree(folder, ignore_errors=True)


def _sandbox_base() -> tuple[str, str]:
    r"""(new-root mount point, prepared /dev folder or "") of the root `unshare` sandbox, made once per process.

    The /dev folder holds device nodes made with `mknod` (null, zero, full, random, urandom, tty), the `fd`, `stdin`,
    `stdout`, `stderr` links and an empty `shm`, in a 0700 folder of a file system that allows device nodes; where
    that fails ("" is returned) the sandbox binds the nodes one by one.
    """
    with _LOCK:
        if _SANDBOX_BASE:
            return _SANDBOX_BASE[0]
        parents = [tempfile.gettempdir(), "/var/tmp"]
        parent = next((p for p in parents if os.path.isdir(p) and not os.statvfs(p).f_flag & os.ST_NODEV), None)
        base = tempfile.mkdtemp(prefix="lfa-sandbox-", dir=parent)
        atexit.register(_remove_own, base, os.getpid())
        os.mkdir(os.path.join(base, "root"))
        dev = os.path.join(base, "dev")
        try:
            os.mkdir(dev, 0o755)
            os.chmod(dev, 0o755)
            for name in ("null", "zero", "full", "random", "urandom", "tty"):
                st = os.stat(f"/dev/{name}")
                os.mknod(os.path.join(dev, name), stat.S_IFCHR | 0o666, st.st_rdev)
                os.chmod(os.path.join(dev, name), 0o666)
            for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                                 ("stderr", "/proc/self/fd/2")):  # fmt: skip
                os.symlink(target, os.path.join(dev, name))
            os.mkdir(os.path.join(dev, "shm"), 0o755)
            os.chmod(os.path.join(dev, "shm"), 0o755)
        except OSError as exc:
            logger.info("[agentic-tools] no prepared /dev for the unshare sandbox (%s): binding device nodes", exc)
            shutil.rmtree(dev, ignore_errors=True)
            dev = ""
        _SANDBOX_BASE.append((os.path.join(base, "root"), dev))
        return _SANDBOX_BASE[0]


def _setpriv_prefix(uid: int = NOBODY_ID) -> list[str] | None:
    return percall.setpriv_prefix(uid)


def _bwrap_has_size(bwrap: str) -> bool:
    r"""Whether this bubblewrap knows `--size` (sized tmpfs; bubblewrap 0.8.0 and later)."""
    with _LOCK:
        if bwrap in _BWRAP_SIZE:
            return _BWRAP_SIZE[bwrap]
    try:
        proc = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30)
        found = "--size" in proc.stdout + proc.stderr
    except (OSError, subprocess.SubprocessError):
        found = False
    with _LOCK:
        _BWRAP_SIZE[bwrap] = found
    return found


def _bwrap_dirs(path: str, covers: list[str], seen: set[str]) -> list[str]:
    r"""`--perms 0755 --dir D` for every folder between the cover (mask or private dir) of `path` and `path`."""
    cover = next((c for c in sorted(covers, key=len, reverse=True) if _is_under(path, c)), None)
    if cover is None:
        return []
    args = []
    current = cover.rstrip("/")
    for part in [p for p in path[len(cover) :].split("/") if p][:-1]:
        current = f"{current}/{part}"
        if current not in seen:
            seen.add(current)
            args += ["--perms", "0755", "--dir", current]
    return args


def _sandbox_command(
    sandbox: str,
    as_nobody: bool,
    workdir: str,
    executable: str,
    inner: list[str],
    uid: int = NOBODY_ID,
    private_workdir: bool = False,
    disk_mb: int | None = None,
) -> tuple[list[str], dict[str, Any]]:
    r"""(command, extra Popen keyword arguments) that run `inner` (prlimit + interpreter) in `sandbox`.

    Args:
        sandbox: one of `SANDBOXES`.
        as_nobody: switch a root trainer's code to `uid`.
        executable: the interpreter (its folders are bound into the sandbox).
        workdir: the code's working directory as the code sees it.
        inner: the limited interpreter command.
        uid: the uid the code runs as when `as_nobody` (the call's own uid, or 65534).
        private_workdir: `bwrap`/`unshare`: make `workdir` a new folder on the sandbox's private /tmp (it must lie
            under /tmp) instead of binding the host folder of that path.
        disk_mb: size of the private /tmp tmpfs in MiB (None: the kernel's default, half of RAM).

    Raises:
        FileNotFoundError: a helper program (bwrap, unshare, setpriv, chroot) is missing.
    """
    shell = SILENT_SHELL + [workdir]
    if sandbox == "bwrap":
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise FileNotFoundError("bubblewrap (bwrap) is not installed")
        masks, binds = _mount_plan(executable, workdir, as_nobody)
        size = ["--size", str(int(disk_mb) * 1024 * 1024)] if disk_mb and _bwrap_has_size(bwrap) else []
        if private_workdir:  # bwrap creates it as root: writable by the code's uid through its mode
            own_workdir = ["--perms", "0777", "--dir", workdir, "--chdir", workdir]
        else:
            own_workdir = ["--bind", workdir, workdir, "--chdir", workdir]
        if not as_nobody:
            args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *size, "--tmpfs", "/tmp"]
            for path in binds:
                args += ["--ro-bind", path, path]
            args += own_workdir + ["--unshare-all", "--die-with-parent", "--new-session", "--"]
            return args + inner, {}
        setpriv = _setpriv_prefix(uid)
        if setpriv is None:
            raise FileNotFoundError("util-linux setpriv is not installed (needed to drop root)")
        args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *size, "--perms", "1777", "--tmpfs",
                "/tmp"]  # fmt: skip
        for mask in masks:
            args += ["--perms", "0755", "--tmpfs", mask]
        covers, seen = list(PRIVATE_DIRS) + masks, set()
        for path in binds:
            args += _bwrap_dirs(path, covers, seen) + ["--ro-bind", path, path]
        args += _bwrap_dirs(workdir, covers, seen) + own_workdir
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                 "--die-with-parent", "--new-session", "--"]  # fmt: skip
        return args + setpriv + inner, {}
    if sandbox == "unshare":
        unshare = shutil.which("unshare", path=SYSTEM_PATH)
        if unshare is None:
            raise FileNotFoundError("util-linux unshare is not installed")
        # `unshare` itself dies with the thread that started it (as `bwrap --die-with-parent` does), and
        # `--kill-child` then ends the namespace: a trainer killed with SIGKILL leaves no sandbox behind
        setpriv_bin = shutil.which("setpriv", path=SYSTEM_PATH)
        unshare = [setpriv_bin, "--pdeathsig", "KILL", "--", unshare] if setpriv_bin else [unshare]
        if not as_nobody:
            own_uid, own_gid = os.getuid(), os.getgid()
            return [
                *unshare, "--user", f"--map-user={own_uid}", f"--map-group={own_gid}", "--net", "--pid", "--mount",
                "--mount-proc", "--fork", "--kill-child", "--", *shell, *inner,
            ], {}  # fmt: skip
        setpriv, chroot = _setpriv_prefix(uid), shutil.which("chroot", path=SYSTEM_PATH)
        if setpriv is None or chroot is None:
            raise FileNotFoundError("util-linux setpriv and coreutils chroot are needed to drop root")
        masks, binds = _mount_plan(executable, workdir, as_nobody)
        ops = [x for m in masks for x in ("--mask", m)] + [x for b in binds for x in ("--ro", b)]
        root, dev = _sandbox_base()
        size = f"{int(disk_mb)}m" if disk_mb else "50%"
        owner = f"{uid}:{uid}" if private_workdir else ""
        return [
            *unshare, "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child", "--", "/bin/sh", "-c",
            UNSHARE_SETUP, "sh", root, workdir, dev, size, owner, *ops, "--", chroot, root, *setpriv, *shell, *inner,
        ], {}  # fmt: skip
    if sandbox == "rlimits-only":
        if not as_nobody:
            return shell + inner, {}
        cmd, kwargs = percall.as_uid(uid, shell + inner)
        # without setpriv, Popen switches uid in C between fork and exec (no Python code runs there); no
        # `no_new_privs` then (the network filter sets it for the interpreter)
        return cmd, kwargs
    raise ValueError(f"unknown sandbox {sandbox!r}; use auto, {', '.join(SANDBOXES)}")


def _limits(
    timeout_s: float,
    memory_mb: int | None,
    cpu_time_s: float | None,
    max_processes: int | None,
    max_file_mb: int | None,
) -> tuple[list[tuple[int, int, int]], int]:
    r"""(resource, soft, hard) limits and the CPU-time limit in seconds."""
    cpu = max(1, math.ceil(cpu_time_s if cpu_time_s is not None else math.ceil(timeout_s) + 1))
    # SIGXCPU at the soft CPU limit; SIGKILL at the hard one if the code handles SIGXCPU
    limits: list[tuple[int, int, int]] = [(resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_CORE, 0, 0)]
    if memory_mb:
        limits.append((resource.RLIMIT_AS, int(memory_mb) * 1024 * 1024, int(memory_mb) * 1024 * 1024))
    if max_processes:
        limits.append((resource.RLIMIT_NPROC, int(max_processes), int(max_processes)))
    if max_file_mb:
        limits.append((resource.RLIMIT_FSIZE, int(max_file_mb) * 1024 * 1024, int(max_file_mb) * 1024 * 1024))
    return limits, cpu


def _limits_preexec(limits: list[tuple[int, int, int]]):
    def _apply() -> None:
        for res, soft, hard in limits:
            try:
                resource.setrlimit(res, (soft, hard))
            except (ValueError, OSError):
                pass

    return _apply


_RLIMIT_NAMES = {
    resource.RLIMIT_CPU: "cpu",
    resource.RLIMIT_CORE: "core",
    resource.RLIMIT_AS: "as",
    resource.RLIMIT_NPROC: "nproc",
    resource.RLIMIT_FSIZE: "fsize",
}


def _code_env(executable: str, workdir: str) -> dict[str, str]:
    return {
        "PATH": f"{os.path.dirname(executable)}:/usr/local/bin:/usr/bin:/bin",
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


def _code_workdir(host_workdir: str) -> str:
    r"""Where the code works inside a `bwrap`/`unshare` sandbox (on the private, sized /tmp tmpfs).

    The host path when it lies under /tmp, else a folder of the same name on /tmp.
    """
    return host_workdir if _is_under(host_workdir, "/tmp") else os.path.join("/tmp", os.path.basename(host_workdir))


def _execute(
    code: str,
    sandbox: str,
    as_nobody: bool,
    executable: str,
    timeout_s: float,
    max_output_chars: int,
    memory_mb: int | None,
    cpu_time_s: float | None,
    max_processes: int | None,
    max_file_mb: int | None,
    workdir_root: str | None,
    prepare: Callable[[str], None] | None = None,
    inspect: Callable[[str], None] | None = None,
    disk_mb: int | None = None,
) -> tuple[str, str]:
    r"""Run `code` in `sandbox` (no level selection); `prepare`/`inspect` see the working directory before/after.

    With `prepare`/`inspect` (the probe) the code works in a host folder bound into the sandbox; otherwise, in
    `bwrap`/`unshare` as uid != trainer, in a new folder on the sandbox's private /tmp of `disk_mb`. As root with
    per-call uids (`percall`), the call runs as a uid of its own; when it ends every process of that uid is killed,
    and (`rlimits-only`) the files it left in the host's world-writable folders are deleted.
    """
    limits, cpu = _limits(timeout_s, memory_mb, cpu_time_s, max_processes, max_file_mb)
    own_uid = as_nobody and percall.per_call_uid_error() is None
    try:
        uid = percall.acquire_uid() if own_uid else NOBODY_ID
    except RuntimeError as exc:
        raise TransientToolError(str(exc)) from exc
    workdir = tempfile.mkdtemp(prefix="lfa-py-", dir=workdir_root)
    namespaced = sandbox in ("bwrap", "unshare") and (as_nobody or sandbox == "bwrap")
    private = namespaced and prepare is None and inspect is None
    code_workdir = _code_workdir(workdir) if private else workdir
    try:
        if as_nobody:
            os.chown(workdir, uid, uid)
        if prepare is not None:
            prepare(workdir)
        source = rewrite_last_expression(code).encode("utf-8", errors="replace")
        # program read from stdin: tracebacks say `File "<stdin>"`, stable across calls; without a network
        # namespace, the interpreter starts behind the seccomp network filter
        inner = percall.net_filter_command(executable, ["-"]) if sandbox == "rlimits-only" else [executable, "-"]
        preexec = None
        prlimit = shutil.which("prlimit", path=SYSTEM_PATH)
        if prlimit:  # limits set by a tiny exec'd helper: no Python code between fork and exec (thread-safe)
            inner = [prlimit] + [f"--{_RLIMIT_NAMES[r]}={soft}:{hard}" for r, soft, hard in limits] + ["--"] + inner
        else:  # documented as unsafe with threads, used only when util-linux's prlimit is missing
            preexec = _limits_preexec(limits)
        try:
            cmd, popen_kwargs = _sandbox_command(sandbox, as_nobody, code_workdir, executable, inner, uid, private,
                                                 disk_mb)  # fmt: skip
        except FileNotFoundError as exc:
            raise TransientToolError(str(exc)) from exc
        env = _code_env(executable, code_workdir)
        reap = (lambda: percall.kill_uid(uid, wait=False)) if own_uid else None  # checked in `finally` below
        check = None
        if disk_mb and not namespaced:  # files on the host: summed while the code runs
            roots = [workdir] + (percall.world_writable_dirs() if own_uid else [])
            owner = uid if own_uid else None
            limit_bytes = int(disk_mb) * 1024 * 1024

            def check() -> str | None:
                used = percall.files_bytes(owner, roots)
                if used > limit_bytes:
                    return f"Disk limit of {disk_mb} MiB exceeded: the code's files took {used / 2**20:.0f} MiB."
                return None

        result = _run_and_collect(cmd, workdir, env, source, timeout_s, max_output_chars, preexec, popen_kwargs, cpu,
                                  reap, check)  # fmt: skip
        if inspect is not None:
            inspect(workdir)
        return result
    finally:
        if own_uid:
            left = percall.kill_uid(uid)
            if left:
                logger.warning("[agentic-tools] %d processes of the call's uid %d survived SIGKILL", left, uid)
            if not namespaced:
                percall.remove_files(uid, percall.world_writable_dirs())
            percall.release_uid(uid)
        shutil.rmtree(workdir, ignore_errors=True)


def _processes_named(argv0: str, settle_s: float = 1.0) -> list[int]:
    r"""Pids of live processes whose argv[0] is `argv0` (waits up to `settle_s` for dying ones to go)."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if f.read().split(b"\0", 1)[0] == argv0.encode():
                        found.append(int(name))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _probe_folder() -> str:
    r"""Host folder (0755, with a world-writable `open/` inside) for the probe's write attempts, outside /tmp."""
    parent = "/var/tmp" if os.path.isdir("/var/tmp") and os.access("/var/tmp", os.W_OK) else None
    base = tempfile.mkdtemp(prefix="lfa-probe-", dir=parent)
    os.chmod(base, 0o755)
    os.mkdir(os.path.join(base, "open"))
    os.chmod(os.path.join(base, "open"), 0o777)
    return base


def _classify(data: dict, host_uid: int | None, host_write: bool, as_root: bool) -> dict[str, Any]:
    cap_eff = str(data.get("CapEff", "unknown"))
    try:
        caps = int(cap_eff, 16)
    except ValueError:
        caps = -1
    private_read = bool(data.get("private_read"))
    root_file_read = bool(data.get("shadow_read")) or (as_root and private_read)
    network = bool(data.get("connected")) or any(name != "lo" for name in data.get("interfaces", []))
    process_limit = int(data.get("forks", 0)) <= _PROBE_NPROC
    uid = data.get("uid")
    if host_uid in (0, None) or uid == 0 or caps != 0 or root_file_read or not process_limit:
        level = "none"
    elif network or host_write:
        level = "unprivileged"
    elif private_read:
        level = "confined"
    else:
        level = "full"
    return {
        "level": level,
        "uid": uid,
        "host_uid": host_uid,
        "cap_eff": cap_eff,
        "root_file_read": root_file_read,
        "private_file_read": private_read,
        "host_write": host_write,
        "network": network,
        "process_limit": process_limit,
    }


def probe_sandbox(sandbox: str, executable: str | None = None, as_nobody: bool | None = None) -> IsolationReport:
    r"""Measure what code can do inside `sandbox` (cached per process; see the module docstring).

    Args:
        sandbox: one of `SANDBOXES`.
        executable: interpreter (default `sys.executable`).
        as_nobody: switch a root trainer's code to uid 65534 (default: whether the trainer is root).

    Returns:
        An `IsolationReport`; `error` says why the sandbox cannot be used (it then has level "none").
    """
    executable = executable or sys.executable
    as_nobody = (os.geteuid() == 0) if as_nobody is None else bool(as_nobody and os.geteuid() == 0)
    key = (sandbox, executable, as_nobody)
    with _LOCK:
        if key in _REPORTS:
            return _REPORTS[key]
    with _PROBE_LOCK:  # one probe at a time (many worker threads may ask at once)
        with _LOCK:
            if key in _REPORTS:
                return _REPORTS[key]
        report = _probe(sandbox, executable, as_nobody)
        if report.error:
            logger.info("[agentic-tools] python sandbox %s unavailable: %s", sandbox, report.error)
        with _LOCK:
            _REPORTS[key] = report
        return report


def _probe(sandbox: str, executable: str, as_nobody: bool) -> IsolationReport:
    identity = _interpreter_info(executable)["identity"]
    if identity is None:
        return IsolationReport(sandbox, "none", as_nobody, error=f"{executable} does not run")
    base = _probe_folder()
    listener = socket.socket()
    found: dict[str, Any] = {}
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        targets = [base, os.path.join(base, "open")]
        mark = f"lfa-probe-{os.getpid()}-{time.monotonic_ns()}"
        code = (
            _PROBE_CODE.replace("__MARK__", json.dumps(mark))
            .replace("__TARGETS__", json.dumps(targets))
            .replace("__PORT__", str(listener.getsockname()[1]))
            .replace("__FORKS__", str(4 * _PROBE_NPROC))
        )

        def _prepare(workdir: str) -> None:
            secret = os.path.join(workdir, "secret")
            with open(secret, "w") as f:
                f.write("trainer only")
            os.chmod(secret, 0o600)

        def _inspect(workdir: str) -> None:
            try:
                found["host_uid"] = os.stat(os.path.join(workdir, "owner-probe")).st_uid
            except OSError:
                found["host_uid"] = None

        try:
            status, text = _execute(code, sandbox, as_nobody, executable, 30.0, 20_000, 4096, None, _PROBE_NPROC,
                                    16, None, _prepare, _inspect)  # fmt: skip
        except (ToolError, OSError) as exc:
            return IsolationReport(sandbox, "none", as_nobody, error=str(exc))
        leftover = _processes_named(mark)
        for pid in leftover:  # what the sandbox let survive: ended here, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if status != STATUS_OK:
            return IsolationReport(sandbox, "none", as_nobody, error=f"probe {status}: {text[-400:]}")
        try:
            data = json.loads(text.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return IsolationReport(sandbox, "none", as_nobody, error=f"unreadable probe output: {text[-400:]}")
        if data.get("identity") != identity:
            return IsolationReport(sandbox, "none", as_nobody, error=(
                f"the sandbox ran another interpreter ({data.get('identity')}) than {executable} ({identity}): "
                "it cannot read the requested one"))  # fmt: skip
        host_write = any(os.path.exists(os.path.join(t, "written-by-sandbox")) for t in targets)
        fields = _classify(data, found.get("host_uid"), host_write, as_root=os.geteuid() == 0)
        per_call = as_nobody and fields["uid"] not in (None, NOBODY_ID, 0) and fields["uid"] == fields["host_uid"]
        return IsolationReport(sandbox=sandbox, as_nobody=as_nobody, leftover_processes=len(leftover),
                               per_call_uid=per_call, network_filter=sandbox == "rlimits-only"
                               and percall.net_filter_supported(), **fields)  # fmt: skip
    finally:
        listener.close()
        shutil.rmtree(base, ignore_errors=True)


def measure_isolation(preferred: str = "auto", executable: str | None = None, run_as: str = "auto") -> IsolationReport:
    r"""The sandbox the python tool uses on this machine and what it measured (cached per process).

    `auto` probes the sandboxes strongest first (as root: each switching the code to uid 65534, then, as a last
    resort, each keeping root) and takes the highest measured level, stopping at the first `full`. A named sandbox
    is used when it works (as uid 65534 first when root), else `auto` decides.

    Args:
        preferred: "auto" or one of `SANDBOXES`; the environment variable `AGENTIC_PYTHON_ISOLATION` overrides "auto".
        executable: interpreter (default `sys.executable`).
        run_as: "auto" (root: run the code as uid 65534 where the sandbox allows) or "self" (keep the trainer's uid).

    Raises:
        ValueError: unknown `preferred` or `run_as`.
    """
    executable = executable or sys.executable
    if preferred == "auto":
        preferred = os.environ.get("AGENTIC_PYTHON_ISOLATION", "auto") or "auto"
    if preferred != "auto" and preferred not in SANDBOXES:
        raise ValueError(f"unknown python isolation {preferred!r}; use auto, {', '.join(SANDBOXES)}")
    if run_as not in RUN_AS:
        raise ValueError(f"unknown run_as {run_as!r}; use {' or '.join(RUN_AS)}")
    key = (preferred, executable, run_as)
    with _LOCK:
        if key in _CHOSEN:
            return _CHOSEN[key]
    with _MEASURE_LOCK:
        with _LOCK:
            if key in _CHOSEN:
                return _CHOSEN[key]
        chosen = _choose(preferred, executable, run_as)
        logger.info("[agentic-tools] python tool isolation: %s", chosen.describe())
        with _LOCK:
            _CHOSEN[key] = chosen
        return chosen


def _choose(preferred: str, executable: str, run_as: str) -> IsolationReport:
    drops = [True, False] if run_as == "auto" and os.geteuid() == 0 else [False]
    chosen = None
    if preferred != "auto":
        chosen = next((r for d in drops if (r := probe_sandbox(preferred, executable, d)).usable), None)
    if chosen is None:
        for as_nobody in drops:
            for sandbox in SANDBOXES:
                report = probe_sandbox(sandbox, executable, as_nobody)
                if report.usable and (chosen is None or report.rank > chosen.rank):
                    chosen = report
                if chosen is not None and chosen.level == ISOLATION_LEVELS[-1]:
                    break
            if chosen is not None and chosen.level == ISOLATION_LEVELS[-1]:
                break
    if chosen is None:  # nothing ran the probe: the interpreter itself is broken; calls will show why
        chosen = probe_sandbox("rlimits-only", executable, False)
    return chosen


def isolation_level(preferred: str = "auto", executable: str | None = None, run_as: str = "auto") -> str:
    r"""Measured isolation level (one of `ISOLATION_LEVELS`) of the python tool here; see `measure_isolation`."""
    return measure_isolation(preferred, executable, run_as).level


def available_sandboxes(executable: str | None = None) -> list[str]:
    r"""Sandboxes that run code on this machine (as uid 65534 where possible), i.e. that `isolation=` can force."""
    return [s for s in SANDBOXES if measure_isolation(s, executable).sandbox == s]


def min_isolation_hint(report: IsolationReport, executable: str | None = None) -> str:
    r"""How to get a stronger level than `report` (measured with `executable`) on this machine (one paragraph)."""
    hints = []
    if report.level == "none" and os.geteuid() == 0:
        hints.append(
            "the code would run as root: install bubblewrap (`apt-get install bubblewrap`) or give the trainer the "
            "right to create mount namespaces (`unshare`, in a container CAP_SYS_ADMIN with a seccomp profile "
            "allowing unshare/mount), and keep util-linux `setpriv` installed; or make the interpreter readable by "
            "uid 65534 (e.g. a Python outside /root)"
        )
    if report.network or report.host_write:
        hints.append(
            "network and host writes are blocked by the `bwrap` sandbox (install bubblewrap; as a non-root user "
            "also allow unprivileged user namespaces) or, as root, by `unshare`"
        )
    if report.network and report.sandbox == "rlimits-only":
        hints.append(
            "`rlimits-only` closes the network with a seccomp filter, which needs x86_64 or aarch64 and a kernel "
            "with seccomp filters (CONFIG_SECCOMP_FILTER)"
        )
    if report.leftover_processes and os.geteuid() != 0:
        hints.append(
            "processes outlive a call only without a pid namespace and without per-call uids: use `bwrap` or "
            f"`unshare` (pid namespace), or run the trainer as root so each call gets its own uid "
            f"({percall.UID_BASE_ENV})"
        )
    if report.private_file_read and os.geteuid() != 0:
        hints.append("the code runs as the trainer's own user: only a root trainer can switch it to uid 65534")
    hints.append("or run the code in a separate service (python tool param `backend: sandbox_fusion`)")
    better = [
        f"`agentic_python_isolation: {s}` measures {r.level}"
        for s in SANDBOXES
        if (r := probe_sandbox(s, executable)).usable and r.rank > report.rank
    ]
    if better:
        hints.insert(0, "on this machine " + " and ".join(better))
    return "; ".join(hints) + "."


def per_call_limits(
    report: IsolationReport,
    timeout_s: float = PYTHON_TIMEOUT_S,
    memory_mb: int | None = 4096,
    max_processes: int | None = 256,
    max_file_mb: int | None = 256,
    disk_mb: int | None = DISK_MB,
) -> list[tuple[str, str]]:
    r"""(limit, value and how it is enforced) of one call in the sandbox `report` measured (for `doctor`).

    The values are the python tool's defaults unless given; the enforcement is that of `report`'s sandbox and
    what the probe measured there (uid, processes left after the call, network).
    """
    if report.sandbox == "remote" or not report.usable:
        return []
    rows = []
    if report.per_call_uid:
        base, slots = percall.uid_range()
        who = f"RLIMIT_NPROC of the call's own uid (measured: uid {report.uid}; uids {base}..{base + slots - 1})"
    elif report.as_nobody:
        who = (
            "RLIMIT_NPROC of uid 65534, SHARED by all concurrent calls (per-call uids unavailable: "
            + str(percall.per_call_uid_error())
            + ")"
        )
    elif report.process_limit:
        who = f"RLIMIT_NPROC of the trainer's uid {os.geteuid()}, shared with the trainer's own processes"
    else:
        who = "NOT BINDING: the code keeps root or capabilities"
    rows.append(("processes", f"{max_processes or 'unlimited'} processes and threads per call: {who}"))
    namespaced = report.sandbox in ("bwrap", "unshare") and (report.as_nobody or report.sandbox == "bwrap")
    files_in_ram = namespaced and report.sandbox in ("bwrap", "unshare")
    sized = report.sandbox == "unshare" or (
        report.sandbox == "bwrap" and (shutil.which("bwrap") is not None and _bwrap_has_size(shutil.which("bwrap")))
    )
    if namespaced:
        how = ("bwrap --size" if report.sandbox == "bwrap" else "tmpfs size=") if sized else "UNBOUNDED (bwrap < 0.8)"
        where = "/tmp (working directory inside)" + (
            ", /dev/shm bound into it" if report.sandbox == "unshare" else ", /dev/shm read-only"
        )
        files = (
            f"{disk_mb or 'unbounded'} MiB for all files together, on the sandbox's private tmpfs {where} ({how}); "
            "nothing reaches the host disk"
        )
    else:
        roots = "the working directory" + (
            " and the files of the call's uid in " + ", ".join(percall.world_writable_dirs())
            if report.per_call_uid
            else ""
        )
        files = (
            f"{disk_mb or 'unbounded'} MiB for all files together: {roots} summed every {percall.POLL_S:g} s, "
            "the call stopped above" + (", its files deleted when it ends" if report.per_call_uid else "")
        )
    rows.append(("files", f"{files}; each file at most {max_file_mb or 'unbounded'} MiB (RLIMIT_FSIZE)"))
    ram = f"{memory_mb or 'unlimited'} MiB of address space per process (RLIMIT_AS)"
    if files_in_ram and disk_mb:
        ram += (
            f" plus the {disk_mb} MiB files tmpfs, held in RAM (a call's RAM <= {memory_mb} MiB x its processes "
            f"+ {disk_mb} MiB)"
        )
    rows.append(("memory", ram))
    cpu = max(1, math.ceil(timeout_s) + 1)
    rows.append(
        (
            "cpu",
            f"{cpu} s of CPU time per process (RLIMIT_CPU, SIGKILL at {cpu + 1} s); wall clock "
            f"{timeout_s:g} s per call",
        )
    )
    if report.per_call_uid:
        kill = "every process of the call's uid SIGKILLed (kill -1 as that uid) when the call returns"
        if namespaced:
            kill += ", and the pid namespace ends with it"
    elif namespaced:
        kill = "the pid namespace ends with the call"
    else:
        kill = "only the call's process group is killed: detached processes can survive"
    left = "unknown" if report.leftover_processes is None else str(report.leftover_processes)
    rows.append(("after the call", f"{kill} (measured: {left} of the probe's processes left)"))
    if report.network:
        net = "REACHABLE (train and eval refuse this sandbox)"
    elif namespaced:
        net = "closed: own network namespace (measured)"
    elif report.network_filter:
        net = "closed: seccomp filter, socket() only for AF_UNIX, no io_uring (measured)"
    else:
        net = "closed (measured)"
    rows.append(("network", net))
    return rows


def check_min_isolation(
    report: IsolationReport,
    minimum: str,
    key: str = "agentic_python_min_isolation",
    executable: str | None = None,
) -> None:
    r"""Raise `IsolationError` when `report` (measured with `executable`) is below `minimum` ("remote" always passes).

    Above `minimum: none`, a sandbox whose code reached the network (it could rewrite a Redis cache on 127.0.0.1,
    issue 24 item 8) or whose processes outlived the probe's call is refused too, whatever its level.

    Raises:
        IsolationError: with the measured properties, how to get a stronger level and how to accept this one.
        ValueError: unknown `minimum`.
    """
    need = level_rank(minimum)
    if report.sandbox == "remote":
        return
    if report.rank < need:
        accept = "none" if report.network or report.leftover_processes else report.level
        raise IsolationError(
            f"The python tool's sandbox is below `{key}: {minimum}` on this machine. Measured inside the sandbox: "
            f"{report.describe()}. To get a stronger level: {min_isolation_hint(report, executable)} To accept this "
            f"machine's isolation, set `{key}: {accept}` in the recipe (levels, weakest first: "
            f"{', '.join(ISOLATION_LEVELS)}; `llamafactory-agentic doctor` shows the measurement)."
        )
    if need > 0 and report.usable and (report.network or report.leftover_processes):
        what = []
        if report.network:
            what.append("the code reached a socket on 127.0.0.1 or saw a network interface (it could rewrite a "
                        "Redis tool cache or reach other services)")  # fmt: skip
        if report.leftover_processes:
            what.append(f"{report.leftover_processes} of its processes outlived the call")
        raise IsolationError(
            f"The python tool's sandbox cannot be used with `{key}: {minimum}`: {' and '.join(what)}. Measured "
            f"inside the sandbox: {report.describe()}. Fix: {min_isolation_hint(report, executable)} Only to accept "
            f"it knowingly: `{key}: none`."
        )


__all__ = [
    "DEFAULT_MIN_ISOLATION",
    "DISK_MB",
    "ISOLATION_LEVELS",
    "SANDBOXES",
    "IsolationError",
    "IsolationReport",
    "available_sandboxes",
    "check_min_isolation",
    "isolation_level",
    "measure_isolation",
    "min_isolation_hint",
    "per_call_limits",
    "probe_sandbox",
]
