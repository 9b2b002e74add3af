# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""`process_helpers.run_group`: a timeout kills the command's children too (the learning tests' CLIs)."""

import os
import subprocess
import time

import pytest
from process_helpers import run_group


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its reaper counts as gone
        return f.read().split(")")[-1].split()[0] != "Z"


def test_a_timeout_kills_the_grandchild(tmp_path):
    """Before (`subprocess.run(timeout=...)`): the shell was killed and its `sleep` child lived on."""
    pid_file = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_group(["bash", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], timeout=2)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_the_result_is_that_of_subprocess_run():
    done = run_group(["bash", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
