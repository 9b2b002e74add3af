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

"""Per-call limits of the python tool's sandbox (docs/tools.md, "Per-call limits"; issue 24 items 2, 3, 4, 8).

* **Own uid per call** (root trainer): each call runs as a uid of its own, `base + slot` with `base` from
  `AGENTIC_PYTHON_UID_BASE` (default 2000000000) and a free slot out of `UID_SLOTS`, a uid with no passwd entry and
  outside `/etc/subuid`/`/etc/subgid`. RLIMIT_NPROC counts the processes of a uid, so the process limit is the call's
  own: a fork bomb in one call cannot starve a concurrent one. Slots are held with a POSIX record lock on one
  root-owned lock file (`/run/lfa-python-uids.lock`, else in the temp dir), so trainer processes on one machine never
  share a uid; a slot whose uid still has processes (a trainer that died mid-call) is cleaned first.
* **Every process dies with the call**: when a call ends (exit, timeout, limit), a helper that switched to the call's
  uid sends `kill(-1, SIGKILL)`, which the kernel delivers to every process of that uid in one pass over the process
  list (a process forked meanwhile is in the list too), in every pid namespace below ours: detached (`setsid`, double
  fork) grandchildren included. It is repeated until `/proc` shows no live process of that uid.
* **Files bounded**: in `bwrap`/`unshare` every file the code can write is on one tmpfs of `disk_mb` (the private
  `/tmp`, holding the working directory; `unshare` binds its `/dev/shm` there too). Without a mount namespace
  (`rlimits-only`) the working directory is a host folder: the files of the call's uid in it and in the host's
  world-writable folders (`world_writable_dirs`) are summed while the code runs (every `POLL_S`) and the call is
  stopped over `disk_mb`; they are deleted when the call ends.
* **No network without a network namespace**: `rlimits-only` starts the interpreter through `NET_FILTER_BOOTSTRAP`,
  a seccomp filter (x86_64, aarch64) that makes `socket()` fail with EACCES for every family but AF_UNIX and
  disables io_uring, then execs the interpreter. AF_UNIX sockets on the file system stay governed by their file
  permissions (the call's uid is "other" everywhere).
"""

import fcntl
import os
import pwd
import random
import shutil
import stat
import subprocess
import tempfile
import threading
import time


UID_BASE_ENV = "AGENTIC_PYTHON_UID_BASE"
DEFAULT_UID_BASE = 2_000_000_000
UID_SLOTS = 65536
POLL_S = 0.1  # how often the files of an `rlimits-only` call are summed
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_WORLD_WRITABLE_CANDIDATES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")

_LOCK = threading.Lock()
_HELD: set[int] = set()
_LOCK_FILE: list[int | None] = []
_EXCLUDED: list[list[tuple[int, int]]] = []
_WORKS: dict[int, str | None] = {}


def uid_range() -> tuple[int, int]:
    r"""(first uid, number of uids) reserved for per-call uids.

    Raises:
        ValueError: `AGENTIC_PYTHON_UID_BASE` is not an integer in [65536, 2**31 - UID_SLOTS).
    """
    text = os.environ.get(UID_BASE_ENV, "").strip()
    if not text:
        return DEFAULT_UID_BASE, UID_SLOTS
    try:
        base = int(text)
    except ValueError:
        raise ValueError(
            f"{UID_BASE_ENV}={text!r} is not an integer; unset it or give a uid such as 2000000000"
        ) from None
    if not 65536 <= base < 2**31 - UID_SLOTS:
        raise ValueError(
            f"{UID_BASE_ENV}={base} is out of range: give a base in [65536, {2**31 - UID_SLOTS}) whose "
            f"{UID_SLOTS} uids belong to no user"
        )
    return base, UID_SLOTS


def setpriv_prefix(uid: int) -> list[str] | None:
    r"""util-linux `setpriv` command that runs the rest as `uid`/`uid` without groups, capabilities or new privileges.

    Returns None when `setpriv` is not installed.
    """
    setpriv = shutil.which("setpriv", path=SYSTEM_PATH)
    if setpriv is None:
        return None
    return [
        setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
        "--no-new-privs", "--",
    ]  # fmt: skip


def as_uid(uid: int, cmd: list[str]) -> tuple[list[str], dict]:
    r"""(command, Popen keyword arguments) running `cmd` as `uid` (setpriv, else Popen's `user=`/`group=`)."""
    prefix = setpriv_prefix(uid)
    if prefix is not None:
        return prefix + cmd, {}
    return cmd, {"user": uid, "group": uid, "extra_groups": []}


def _excluded_ranges() -> list[tuple[int, int]]:
    r"""[start, end) uid ranges a per-call uid must avoid: passwd/group entries and subordinate id ranges."""
    with _LOCK:
        if _EXCLUDED:
            return _EXCLUDED[0]
    ranges = [(e.pw_uid, e.pw_uid + 1) for e in pwd.getpwall()] + [(e.pw_gid, e.pw_gid + 1) for e in pwd.getpwall()]
    for path in ("/etc/subuid", "/etc/subgid"):
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    parts = line.strip().split(":")
                    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                        ranges.append((int(parts[1]), int(parts[1]) + int(parts[2])))
        except OSError:
            pass
    with _LOCK:
        if not _EXCLUDED:
            _EXCLUDED.append(ranges)
        return _EXCLUDED[0]


def per_call_uid_error() -> str | None:
    r"""Why per-call uids cannot be used here (None: they can). Measured once: a switch to the base uid is run.

    Needs a root trainer that may switch to any uid (a container whose user namespace maps only 65536 uids cannot:
    then set `AGENTIC_PYTHON_UID_BASE` inside the mapped range, or the calls share uid 65534).
    """
    if os.geteuid() != 0:
        return "the trainer is not root: the code keeps the trainer's uid"
    try:
        base, _ = uid_range()
    except ValueError as exc:
        return str(exc)
    with _LOCK:
        if base in _WORKS:
            return _WORKS[base]
    cmd, kwargs = as_uid(base, ["/bin/sh", "-c", "exit 0"])
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=30, cwd="/", **kwargs)
        error = (
            None if proc.returncode == 0 else f"cannot switch to uid {base}: {proc.stderr.decode(errors='replace')}"
        )
    except (OSError, subprocess.SubprocessError) as exc:
        error = f"cannot switch to uid {base}: {exc}"
    with _LOCK:
        _WORKS[base] = error.strip() if error else None
        return _WORKS[base]


def _lock_fd() -> int | None:
    r"""Descriptor of the root-owned slot lock file, opened once per process (None: in-process slots only)."""
    with _LOCK:
        if _LOCK_FILE:
            return _LOCK_FILE[0]
        fd = None
        for folder in ("/run", tempfile.gettempdir()):
            try:
                fd = os.open(os.path.join(folder, "lfa-python-uids.lock"),
                             os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)  # fmt: skip
                st = os.fstat(fd)
                if st.st_uid == os.geteuid() and stat.S_ISREG(st.st_mode) and not st.st_mode & 0o022:
                    break
                os.close(fd)
                fd = None
            except OSError:
                fd = None
        _LOCK_FILE.append(fd)
        return fd


def acquire_uid() -> int:
    r"""A free per-call uid, held until `release_uid` (cross-process lock + in-process set).

    Raises:
        RuntimeError: no free uid after many tries (more than `UID_SLOTS` concurrent calls on this machine).
    """
    base, slots = uid_range()
    excluded = _excluded_ranges()
    fd = _lock_fd()
    for _ in range(4 * 64):
        slot = random.randrange(slots)
        uid = base + slot
        if any(lo <= uid < hi for lo, hi in excluded):
            continue
        with _LOCK:
            if uid in _HELD:
                continue
            _HELD.add(uid)
        if fd is not None:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
            except OSError:
                with _LOCK:
                    _HELD.discard(uid)
                continue
        if uid_processes(uid):  # left by a trainer that died during a call
            kill_uid(uid)
        return uid
    raise RuntimeError(f"no free per-call uid in [{base}, {base + slots}) after many tries")


def release_uid(uid: int) -> None:
    r"""Give back a uid from `acquire_uid` (after `kill_uid`)."""
    base, _ = uid_range()
    fd = _lock_fd()
    if fd is not None:
        try:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, uid - base)
        except OSError:
            pass
    with _LOCK:
        _HELD.discard(uid)


def uid_processes(uid: int) -> list[int]:
    r"""Pids (host view) of the live (not zombie) processes of `uid`, from /proc.

    A process's /proc folder belongs to its effective uid (root while it is not dumpable: the scan then misses it,
    which only matters after `kill(-1)` has already sent it SIGKILL).
    """
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            pids.append(int(entry.name))
    return pids


def kill_uid(uid: int, timeout_s: float = 5.0, wait: bool = True) -> int:
    r"""SIGKILL every process of `uid` (`kill(-1)` sent by a helper running as `uid`); return how many are still alive.

    The kernel sends the signal to every process of `uid` in one pass over the process list that no fork escapes
    (a fork with SIGKILL pending fails). With `wait`, `/proc` is read until none is alive (a killed process takes a
    moment to exit), sending again while any is, for at most `timeout_s`; without `wait`, 0 is returned at once.
    """
    cmd, kwargs = as_uid(uid, ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0"])
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            subprocess.run(cmd, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=timeout_s, **kwargs)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            pass
        if not wait:
            return 0
        for _ in range(20):
            left = uid_processes(uid)
            if not left:
                return 0
            time.sleep(0.005)
        if time.monotonic() > deadline:
            return len(left)


def world_writable_dirs() -> list[str]:
    r"""Host folders anyone may create files in (`/tmp`, `/var/tmp`, `/dev/shm`, ... and the temp dir)."""
    found = []
    for path in (*_WORLD_WRITABLE_CANDIDATES, tempfile.gettempdir()):
        try:
            st = os.stat(path)
        except OSError:
            continue
        real = os.path.realpath(path)
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o002 and real not in found:
            found.append(real)
    return found


def _walk_owned(uid: int | None, roots: list[str], on_file, on_dir) -> None:
    r"""Visit files owned by `uid` (any owner when None) under `roots`, never following symbolic links.

    Descends only into folders of `uid` or world-writable ones (the only places `uid` can create files in).
    `on_dir(path, stat)` returning True skips the folder's contents.
    """
    stack = []
    seen: set[tuple[int, int]] = set()  # folders by (device, inode): a root inside another root is walked once
    for root in roots:
        try:
            st = os.stat(root)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            stack.append(root)
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            mine = uid is None or st.st_uid == uid
            if stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                if mine and on_dir is not None and on_dir(entry.path, st):
                    continue
                if mine or st.st_mode & 0o002:
                    stack.append(entry.path)
            elif mine:
                on_file(entry.path, st)


def files_bytes(uid: int | None, roots: list[str]) -> int:
    r"""Bytes on disk (allocated blocks) of the files and folders `uid` owns under `roots` (see `_walk_owned`)."""
    total = [0]

    def _file(_path, st):
        total[0] += st.st_blocks * 512

    def _dir(_path, st):
        total[0] += st.st_blocks * 512
        return False

    _walk_owned(uid, roots, _file, _dir)
    return total[0]


def remove_files(uid: int, roots: list[str]) -> None:
    r"""Delete every file and folder `uid` owns under `roots` (what an `rlimits-only` call left on the host)."""

    def _file(path, _st):
        try:
            os.unlink(path)
        except OSError:
            pass

    def _dir(path, _st):
        shutil.rmtree(path, ignore_errors=True)
        return True

    _walk_owned(uid, roots, _file, _dir)


# seccomp (classic BPF) constants: struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
_ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}  # AUDIT_ARCH_*, __NR_socket
_NR_IO_URING_SETUP = 425  # same number on both
# Runs as `python -I -S -c NET_FILTER_BOOTSTRAP EXECUTABLE ARGS...`: installs the filter (with no_new_privs), then
# execs EXECUTABLE ARGS (environment, descriptors and limits kept). On another architecture, or where the kernel
# refuses the filter, it execs without one: the probe then measures the network as reachable and training refuses.
NET_FILTER_BOOTSTRAP = r"""
import ctypes, os, struct, sys
arches = __ARCHES__
arch = arches.get(os.uname().machine)
if arch is not None:
    audit_arch, nr_socket = arch
    allow, deny, foreign = 0x7FFF0000, 0x00050000 | 13, 0x00050000 | 38
    prog = [
        (0x20, 0, 0, 4), (0x15, 1, 0, audit_arch), (0x06, 0, 0, foreign),
        (0x20, 0, 0, 0), (0x35, 5, 0, 0x40000000), (0x15, 4, 0, __IO_URING__), (0x15, 0, 2, nr_socket),
        (0x20, 0, 0, 16), (0x15, 0, 1, 1),
        (0x06, 0, 0, allow), (0x06, 0, 0, deny),
    ]
    raw = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Prog(len(prog), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    u = ctypes.c_ulong
    if libc.prctl(38, u(1), u(0), u(0), u(0)) == 0:
        libc.prctl(22, u(2), ctypes.byref(fprog), u(0), u(0))
os.execv(sys.argv[1], sys.argv[1:])
""".replace("__ARCHES__", repr(_ARCHES)).replace("__IO_URING__", str(_NR_IO_URING_SETUP))


def net_filter_command(executable: str, args: list[str]) -> list[str]:
    r"""`executable args...` started behind the seccomp network filter (`NET_FILTER_BOOTSTRAP`)."""
    return [executable, "-I", "-S", "-c", NET_FILTER_BOOTSTRAP, executable, *args]


def net_filter_supported() -> bool:
    r"""Whether this machine's architecture has a network filter here (x86_64, aarch64)."""
    return os.uname().machine in _ARCHES


__all__ = [
    "DEFAULT_UID_BASE",
    "NET_FILTER_BOOTSTRAP",
    "POLL_S",
    "UID_BASE_ENV",
    "UID_SLOTS",
    "acquire_uid",
    "as_uid",
    "files_bytes",
    "kill_uid",
    "net_filter_command",
    "net_filter_supported",
    "per_call_uid_error",
    "release_uid",
    "remove_files",
    "setpriv_prefix",
    "uid_processes",
    "uid_range",
    "world_writable_dirs",
]
