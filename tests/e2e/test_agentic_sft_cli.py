# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""End to end through the real `llamafactory-cli`: agentic SFT trains, saves, exports and chats; torchrun children."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def cli(*names: str) -> str:
    """Console scripts live next to the interpreter that runs the tests (the venv's bin folder)."""
    found = shutil.which(names[0], path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    assert found, f"{names[0]} not found"
    return found


def run(
    cmd: list[str],
    cwd: Path,
    env: dict | None = None,
    stdin: str | None = None,
    timeout: int = 600,
    check: bool = True,
):
    full_env = dict(os.environ, WANDB_DISABLED="true", HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    full_env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + full_env.get("PATH", "")
    full_env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    full_env.update(env or {})
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 or not check, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def write_recipe(tmp_path: Path, model_dir: Path, **overrides) -> Path:
    recipe = yaml.safe_load((REPO / "recipes" / "tiny" / "agentic_sft_cpu.yaml").read_text())
    recipe.update(
        model_name_or_path=str(model_dir),
        dataset_dir=str(REPO / "data"),
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        save_steps=2,
        plot_loss=False,
    )
    recipe.pop("num_train_epochs", None)
    recipe.update(overrides)
    path = tmp_path / "agentic_sft.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_agentic_sft_trains_and_the_checkpoint_exports_and_chats(tmp_path, tiny_model_dir):
    recipe = write_recipe(tmp_path, tiny_model_dir)
    proc = run([cli("llamafactory-cli"), "train", str(recipe)], cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert "[agentic-sft] pre-run check" in log and "[MASKED>" in log
    assert "template qwen -> qwen_agentic" in log

    out = tmp_path / "out"
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-2").is_dir()
    records = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    assert records and all("loss" in r for r in records if "loss" in r) and records[-1]["current_steps"] == 2

    export_dir = tmp_path / "exported"
    run(
        [cli("llamafactory-cli"), "export", "--model_name_or_path", str(out), "--template", "qwen"]
        + ["--export_dir", str(export_dir)],
        cwd=tmp_path,
    )
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(export_dir))
    assert model.config.num_hidden_layers == 2

    chat = run(
        [cli("llamafactory-cli"), "chat", "--model_name_or_path", str(out), "--template", "qwen"]
        + ["--max_new_tokens", "8"],
        cwd=tmp_path,
        stdin="What is 1 + 2?\nexit\n",
        check=False,
    )
    assert "Assistant:" in chat.stdout, chat.stdout[-2000:] + chat.stderr[-3000:]
    # Seen once in 7 clean-clone CI runs under load, not reproduced in 12 runs by hand (6 with, 6 without the plugin):
    # after answering and leaving on `exit`, the chat CLI's interpreter teardown aborted (SIGABRT, "terminate called
    # without an active exception": a native thread still joinable at exit). The answer is what this test checks;
    # any other exit status still fails it.
    teardown_abort = chat.returncode == -6 and "terminate called without an active exception" in chat.stderr
    assert chat.returncode == 0 or teardown_abort, chat.stderr[-5000:]


def _free_port() -> int:
    """A port nothing listens on now (a fixed one collides with other runs of the suite on a shared machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_agentic_sft_under_torchrun_with_two_cpu_processes(tmp_path, tiny_model_dir):
    recipe = write_recipe(tmp_path, tiny_model_dir, per_device_train_batch_size=1)
    proc = run(
        [cli("llamafactory-cli"), "train", str(recipe)],
        cwd=tmp_path,
        env={"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2", "MASTER_PORT": str(_free_port())},
    )
    log = proc.stdout + proc.stderr
    # both torchrun children were activated: each one rewrote the template and parsed the plugin stage
    assert log.count("template qwen -> qwen_agentic") == 2
    assert "world size: 2" in log
    assert (tmp_path / "out" / "model.safetensors").is_file()
