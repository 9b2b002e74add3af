# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""`llamafactory-agentic` console script: doctor and the command list."""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llamafactory_agentic import cli
from llamafactory_agentic.integration.patches import LLAMABOARD_PATCHES, PATCHES


def console_script() -> str:
    return shutil.which("llamafactory-agentic", path=str(Path(sys.executable).parent)) or "llamafactory-agentic"


@pytest.mark.slow
def test_doctor_reports_every_patch_active():
    proc = subprocess.run([console_script(), "doctor"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "llamafactory  0.9.5" in proc.stdout
    assert proc.stdout.count("[ok  ] llamafactory.") == len(PATCHES) + len(LLAMABOARD_PATCHES)
    assert "[ok  ] llamafactory.webui.interface: agentic panel" in proc.stdout  # the LLaMA-Board patch is listed
    assert "result: ok" in proc.stdout
    for optional in ("vllm", "deepspeed", "GPU", "python tool isolation"):
        assert optional in proc.stdout


def test_doctor_exits_non_zero_when_activation_is_broken(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_probe_activation_in_subprocess", lambda: {"hook": False, "patches": []})
    assert cli.doctor(argparse.Namespace()) == 1
    out = capsys.readouterr().out
    assert "[FAIL] start-up hook" in out and "activation is broken" in out


def test_doctor_checks_the_llamaboard_patch_where_llamaboard_loads(monkeypatch, capsys):
    core = list(PATCHES)
    monkeypatch.setattr(cli, "_probe_activation_in_subprocess", lambda: {"hook": True, "patches": core})
    assert cli.doctor(argparse.Namespace()) == 1  # LLaMA-Board loaded but the plugin did not patch it
    assert "[FAIL] llamafactory.webui.interface" in capsys.readouterr().out
    error = "ModuleNotFoundError: No module named 'gradio'"
    monkeypatch.setattr(
        cli, "_probe_activation_in_subprocess", lambda: {"hook": True, "patches": core, "llamaboard_error": error}
    )
    assert cli.doctor(argparse.Namespace()) == 0  # no LLaMA-Board on this machine: nothing to patch, not a failure
    out = capsys.readouterr().out
    assert (
        f"[no  ] llamafactory.webui.interface: agentic panel, checks, RL monitor and rollout viewer (LLaMA-Board "
        f"cannot be imported: {error})" in out
    )
    assert "result: ok" in out


@pytest.mark.slow
def test_help_lists_every_command():
    proc = subprocess.run([console_script(), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for command in ("doctor", "demo", "build-tiny-model", "tool", "cache", "index", "eval"):
        assert command in proc.stdout
