# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""`llamafactory-agentic task init DIR` (the skeleton of docs/tutorial.md) and `tool run --config --tag --body`
(any configured tool through the executor), in real subprocesses of the console entry point."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[2]


def _cli(*argv, cwd=None, pythonpath=(), timeout=180):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, pythonpath), str(REPO)]))
    code = "import sys; from llamafactory_agentic.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)  # fmt: skip


pytestmark = pytest.mark.slow  # every test runs the console entry point in subprocesses


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    root = tmp_path_factory.mktemp("init")
    proc = _cli("task", "init", "units", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wrote units: units_tool.py (your tool, tag <convert>)")
    return root / "units"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_init_writes_rows_registration_tool_reward_and_recipes(units):
    names = {p.relative_to(units).as_posix() for p in units.rglob("*") if p.is_file()}
    assert names == {"units_tool.py", "units_reward.py", "tools.yaml", "agentic_sft.yaml", "arpo.yaml", "eval.yaml",
                     "data/dataset_info.json", "data/sft.jsonl", "data/train.jsonl", "data/heldout.jsonl"}  # fmt: skip
    info = json.loads((units / "data" / "dataset_info.json").read_text())
    assert {k: v["formatting"] for k, v in info.items()} == {
        "units_sft": "arpo_sft", "units_rl": "arpo_rl", "units_heldout": "arpo_rl"
    }  # fmt: skip
    sft, train, heldout = (_rows(units / "data" / n) for n in ("sft.jsonl", "train.jsonl", "heldout.jsonl"))
    assert (len(sft), len(train), len(heldout)) == (240, 64, 16)
    questions = [r["conversations"][0]["value"] for r in sft] + [r["prompt"][1]["content"] for r in train]
    held = {r["prompt"][1]["content"] for r in heldout}
    assert len(set(questions)) == len(questions) and not held & set(questions)  # held-out questions are new
    here = units.resolve()  # the recipes hold the folder's absolute paths: they run from any folder
    for recipe in ("agentic_sft.yaml", "arpo.yaml", "eval.yaml"):
        text = (units / recipe).read_text()
        assert "TASK_DIR" not in text and (
            f'dataset_dir: "{here}/data"' in text or f'"{here}/data/heldout.jsonl"' in text
        )
    assert f'agentic_tool_config: "{here}/tools.yaml"' in (units / "arpo.yaml").read_text()
    assert "agentic_reward: units_reward:score" in (units / "arpo.yaml").read_text()


def test_trajectories_and_ground_truths_are_the_tools_own_answers(units, monkeypatch):
    monkeypatch.syspath_prepend(str(units))
    from units_reward import score
    from units_tool import ConvertTool

    tool = ConvertTool()
    for row in _rows(units / "data" / "sft.jsonl")[:40]:
        text = row["conversations"][1]["value"]
        body = text.split("<convert>")[1].split("</convert>")[0].strip()
        observation = text.split("<result>\n")[1].split("\n</result>")[0]
        assert tool.run(body).text == observation
        answer = observation.split()[0]
        assert score(text.replace(observation, "[result]"), answer, {"executed_tools": ["convert"]}) == 1.1
        assert score(text, str(float(answer) + 1), {"executed_tools": []}) == 0.0
        assert score(text, ["nope", answer], {"executed_tools": []}) == 1.0  # the evaluation passes a list
        assert score("no think block", answer, {}) == -1.0  # the format gate's pair is tested, not its truth
    for row in _rows(units / "data" / "train.jsonl"):
        question = row["prompt"][1]["content"]  # "How many metres are in 3.5 km?"
        value, unit = question.rsplit(" in ", 1)[1].rstrip("?").split()
        assert float(row["reward_model"]["ground_truth"]) > 0 and unit in question and value


def test_init_refuses_a_folder_with_files_unless_forced(units):
    proc = _cli("task", "init", str(units))
    assert proc.returncode == 2 and "is not empty" in proc.stderr and "--force" in proc.stderr
    (units / "units_reward.py").write_text("# edited\n")
    proc = _cli("task", "init", str(units), "--force")
    assert proc.returncode == 0 and "def score(" in (units / "units_reward.py").read_text()


def test_tool_run_calls_a_configured_module_class_tool_through_the_executor(units):
    run = ("tool", "run", "--config", "tools.yaml", "--tag", "convert")
    proc = _cli(*run, "--body", "3.5 km to m", cwd=units, pythonpath=[units])
    assert (proc.returncode, proc.stdout) == (0, "3500 m\n"), proc.stderr
    assert proc.stderr.startswith("[tool=convert status=ok cached=False latency=")
    proc = _cli(*run, "--body", "3 km to kg", cwd=units, pythonpath=[units])  # a ToolError is the observation
    assert proc.returncode == 0 and proc.stdout == (
        "Error: Tool(convert) execution failed with message: cannot convert length (km) to mass (kg)\n"
    )
    proc = _cli(
        "tool", "run", "--config", "tools.yaml", "--tag", "search", "--body", "x", cwd=units, pythonpath=[units]
    )
    assert proc.returncode == 1 and proc.stderr.strip() == (
        "error: no tool answers <search> in tools.yaml; its tags: <convert> (ConvertTool)"
    )
    elsewhere = ("tool", "run", "--config", str(units / "tools.yaml"), "--tag", "convert", "--body", "1 m to cm")
    proc = _cli(*elsewhere, cwd=units.parent)  # the tool's folder is not on PYTHONPATH
    assert proc.returncode == 1 and "cannot import module `units_tool`" in proc.stderr and "PYTHONPATH" in proc.stderr
    proc = _cli("tool", "run", "--tag", "python", "--body", "print(6 * 7)")  # no config: the built-in tools
    assert proc.returncode == 0 and proc.stdout == "42\n", proc.stderr


def test_build_model_help_takes_ones_own_data():
    proc = _cli("task", "build-model", "-h")
    assert proc.returncode == 0 and "your own data" in proc.stdout and "task init" in proc.stdout
