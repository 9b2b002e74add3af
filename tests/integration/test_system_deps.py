# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""`scripts/ensure_system_deps.sh`, which `make test` runs first (issue 35): with a fake PATH, never the real apt-get.

The PATH holds only fake `id`, `apt-get`, `redis-server`, `bwrap` and `chromium` scripts; the fake apt-get records
its arguments and "installs" a package by writing its command into the same folder.
"""

import os
import stat
import subprocess
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ensure_system_deps.sh"
BASH = "/bin/bash"
COMMANDS = {"redis-server": "redis-server", "bubblewrap": "bwrap", "chromium": "chromium"}

FAKE_APT = """#!/bin/bash
echo "$*" >> "{log}"
[ "$1" = update ] && exit 0
{fail}
for arg in "$@"; do
  case "$arg" in
    redis-server) printf '#!/bin/bash\\n' > "{bin}/redis-server"; /bin/chmod +x "{bin}/redis-server" ;;
    bubblewrap) printf '#!/bin/bash\\n' > "{bin}/bwrap"; /bin/chmod +x "{bin}/bwrap" ;;
    chromium) {chromium} ;;
  esac
done
"""


def _exe(path: Path, body: str) -> None:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(tmp_path, present=(), uid=0, apt=True, apt_fails=False, chromium_lands=True, **env):
    """The script with PATH = a folder holding the fake commands; returns (process, apt-get calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "apt.log"
    _exe(bin_dir / "id", f'#!/bin/bash\n[ "$1" = -u ] && echo {uid}\n')
    for package in present:
        _exe(bin_dir / COMMANDS[package], "#!/bin/bash\n")
    if apt:
        chromium = (
            f"printf '#!/bin/bash\\\\n' > \"{bin_dir}/chromium\"; /bin/chmod +x \"{bin_dir}/chromium\"" if chromium_lands
            else ":"
        )  # fmt: skip
        fail = "exit 100" if apt_fails else ""
        _exe(bin_dir / "apt-get", FAKE_APT.format(log=log, bin=bin_dir, fail=fail, chromium=chromium))
    proc = subprocess.run(
        [BASH, str(SCRIPT)],
        env={"PATH": str(bin_dir), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return proc, calls


def test_all_present_passes_silently_without_apt(tmp_path):
    proc, calls = _run(tmp_path, present=("redis-server", "bubblewrap", "chromium"))
    assert (proc.returncode, proc.stdout, proc.stderr, calls) == (0, "", "", [])


def test_root_with_apt_installs_exactly_the_missing_ones(tmp_path):
    proc, calls = _run(tmp_path, present=("chromium",))
    assert proc.returncode == 0, proc.stderr
    assert calls == ["update -qq", "install -y -qq --no-install-recommends redis-server bubblewrap"]
    assert "Installing the system packages the tests need (apt-get, as root): redis-server bubblewrap" in proc.stderr
    assert (tmp_path / "bin" / "bwrap").exists() and (tmp_path / "bin" / "redis-server").exists()


def test_not_root_stops_at_once_with_the_one_command(tmp_path):
    proc, calls = _run(tmp_path, present=("bubblewrap",), uid=1000)
    assert proc.returncode == 1 and calls == []
    assert proc.stderr.splitlines() == [
        "The tests need these system packages, which are not installed: redis-server chromium.",
        "Install them, then run make again:  sudo apt-get install -y --no-install-recommends redis-server chromium",
    ]


def test_no_apt_get_names_the_packages(tmp_path):
    proc, calls = _run(tmp_path, apt=False)
    assert proc.returncode == 1
    assert "redis-server bubblewrap chromium" in proc.stderr and "your system's package manager" in proc.stderr


def test_apt_failure_and_a_package_without_its_command_fail(tmp_path):
    proc, calls = _run(tmp_path, present=("redis-server", "bubblewrap"), apt_fails=True)
    assert proc.returncode == 1 and calls[-1].endswith("chromium")
    assert "apt-get could not install chromium; run it yourself" in proc.stderr
    proc, _ = _run(tmp_path / "again", present=("redis-server", "bubblewrap"), chromium_lands=False)
    assert proc.returncode == 1 and "chromium is still not on PATH" in proc.stderr


@pytest.mark.parametrize("case", ["redis_url", "agentic_chromium", "bad_chromium"])
def test_environment_overrides(tmp_path, case):
    if case == "redis_url":  # the Redis tests use that server: no redis-server needed
        proc, calls = _run(tmp_path, present=("bubblewrap", "chromium"), uid=1000, REDIS_URL="redis://127.0.0.1:1")
        assert proc.returncode == 0 and calls == []
    elif case == "agentic_chromium":
        browser = tmp_path / "my-chrome"
        _exe(browser, "#!/bin/bash\n")
        proc, calls = _run(tmp_path, present=("redis-server", "bubblewrap"), uid=1000, AGENTIC_CHROMIUM=str(browser))
        assert proc.returncode == 0 and calls == []
    else:
        proc, calls = _run(tmp_path, present=("redis-server", "bubblewrap"), AGENTIC_CHROMIUM="/nonexistent/chrome")
        assert proc.returncode == 1 and calls == [] and "AGENTIC_CHROMIUM=/nonexistent/chrome" in proc.stderr


def test_make_test_runs_the_check_before_pytest():
    dry = subprocess.run(
        ["make", "-n", "test", "test-fast", f"VENV={os.environ.get('VIRTUAL_ENV', REPO / '.venv')}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = [line for line in dry.stdout.splitlines() if "ensure_system_deps" in line or "pytest" in line]
    assert lines[0] == "bash scripts/ensure_system_deps.sh" and "pytest" in lines[1], dry.stdout
