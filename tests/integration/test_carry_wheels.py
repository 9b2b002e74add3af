# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""scripts/gpu/carry_wheels.sh: wheels split into parts and batches, staged batch by batch, joined and installed.

The real script runs on real files (a wheel of 3 MiB of random bytes, so that it must be split, and a small one);
only the sizes are scaled down (PART_MIB=1, BATCH_MIB=2 instead of 50 and 56). The `build` step needs the package
index and is run by hand (docs/install.md "Install").
"""

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "carry_wheels.sh"
MIB = 1024 * 1024


def make_wheel(folder: Path, name: str, payload: bytes) -> Path:
    """A minimal pure-Python wheel whose package holds `payload` in `data.bin` (stored, not compressed)."""
    dist = f"{name}-0.1.dist-info"
    files = {
        f"{name}/__init__.py": b"from pathlib import Path\nDATA = Path(__file__).with_name('data.bin')\n",
        f"{name}/data.bin": payload,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel


def sh(*args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, check=check)


def test_pack_stage_install(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    payload = os.urandom(3 * MIB - 64 * 1024)  # the wheel stays under 3 MiB: 3 parts
    make_wheel(src, "carry_big", payload)
    make_wheel(src, "carry_small", b"small")
    staging, site = tmp_path / "staging", tmp_path / "site"
    env = dict(os.environ, PART_MIB="1", BATCH_MIB="2", WHEEL_STAGING=str(staging), PYTHON=sys.executable)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # python3 is the test's interpreter (has pip)

    sh("pack", str(src), str(tmp_path / "dest"), env=env)
    batches = sorted((tmp_path / "dest").glob("batch_*"))
    assert len(batches) == 2  # 3 parts of 1 MiB + the small wheel in batches of at most 2 MiB
    for batch in batches:
        assert sum(f.stat().st_size for f in batch.iterdir() if f.name not in ("MANIFEST.sha256", "PARTS")) <= 2 * MIB
        assert (batch / "MANIFEST.sha256").is_file()
    names = sorted(f.name for b in batches for f in b.iterdir() if f.name not in ("MANIFEST.sha256", "PARTS"))
    assert [n for n in names if ".part." in n] == [f"carry_big-0.1-py3-none-any.whl.part.00{i}" for i in range(3)]
    assert "carry_big-0.1-py3-none-any.whl" not in names  # the split file travels as its parts only

    sh("stage", str(batches[0]), env=env)
    missing = sh("install", env=dict(env, PIP_TARGET=str(site)), check=False)
    assert missing.returncode != 0 and "not staged yet" in missing.stderr

    sh("stage", str(batches[1]), env=env)
    sh("install", env=dict(env, PIP_TARGET=str(site)))
    assert (site / "carry_big" / "data.bin").read_bytes() == payload
    assert (site / "carry_small" / "data.bin").read_bytes() == b"small"


def test_install_refuses_a_corrupted_part(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    make_wheel(src, "carry_big", os.urandom(3 * MIB))
    env = dict(os.environ, PART_MIB="1", BATCH_MIB="2", WHEEL_STAGING=str(tmp_path / "staging"))
    sh("pack", str(src), str(tmp_path / "dest"), env=env)
    for batch in sorted((tmp_path / "dest").glob("batch_*")):
        sh("stage", str(batch), env=env)
    part = tmp_path / "staging" / "carry_big-0.1-py3-none-any.whl.part.001"
    part.write_bytes(part.read_bytes()[:-10])  # a transfer cut short
    result = sh("install", env=dict(env, PIP_TARGET=str(tmp_path / "site")), check=False)
    assert result.returncode != 0 and "checksum mismatch" in result.stderr


@pytest.mark.parametrize("command", ["", "nonsense"])
def test_usage(command):
    result = subprocess.run(["bash", str(SCRIPT), command], capture_output=True, text=True)
    assert result.returncode == 2 and "build deepspeed" in result.stdout


def test_deepspeed_build_names_the_missing_wheel_package(tmp_path):
    """DeepSpeed's wheel is built with --no-build-isolation, so PYTHON's own `wheel` package must be there; without
    it pip stopped with "invalid command 'bdist_wheel'" (a fresh `make install` venv). The script says so first.

    PYTHON is a stand-in interpreter (it has torch, lacks wheel), so nothing is downloaded or built."""
    python = tmp_path / "python"
    python.write_text('#!/bin/bash\n[ "$1" = "-c" ] && [ "$2" = "import wheel" ] && exit 1\nexit 0\n')
    python.chmod(0o755)
    result = sh("build", "deepspeed", str(tmp_path / "dest"), env=dict(os.environ, PYTHON=str(python)), check=False)
    assert result.returncode == 1
    assert f"PYTHON={python} has no 'wheel' package: {python} -m pip install wheel" in result.stderr
