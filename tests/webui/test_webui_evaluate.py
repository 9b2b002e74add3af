# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The agentic Evaluate panel's command, the RL datasets' marks and the predict dependency check (issue 28 item 4)."""

import importlib.util
import json
from pathlib import Path

import pytest

from llamafactory_agentic.webui.evaluate import (
    eval_command,
    eval_config_choices,
    mark_rl_datasets,
    missing_predict_packages,
    model_overrides,
    panel_overrides,
    predict_hint,
    read_result,
)


REPO = Path(__file__).resolve().parents[2]


def test_the_panel_builds_the_eval_command_line():
    save = lambda name: f"saves/M/lora/{name}"  # noqa: E731
    assert model_overrides("/m", "qwen", "lora", ["ck1", "ck2"], save) == [
        "model_name_or_path=/m",
        "template=qwen",
        "adapter_name_or_path=saves/M/lora/ck1,saves/M/lora/ck2",
        "finetuning_type=lora",
    ]
    assert model_overrides("/m", "default", "full", "arpo_1", save) == ["model_name_or_path=saves/M/lora/arpo_1"]
    assert panel_overrides("train_val", " aime24, math500 ", 3, 16.0, "out", "eval_batch_size=8\nx=1") == [
        "eval_preset=train_val",
        "eval_output_dir=out",
        "eval_benchmarks=[aime24,math500]",
        "eval_runs=3",
        "eval_max_new_tokens=16",
        "eval_batch_size=8",
        "x=1",
    ]
    assert panel_overrides("paper", "", None, "", "out", "") == ["eval_preset=paper", "eval_output_dir=out"]
    with pytest.raises(ValueError, match="eval_preset must be one of paper, train_val"):
        panel_overrides("papers", "", None, None, "out", "")
    with pytest.raises(ValueError, match=r"Runs \(eval_runs\) must be a whole number >= 1, got '0'"):
        panel_overrides("paper", "", 0, None, "out", "")
    with pytest.raises(
        ValueError, match=r"Tokens per call \(eval_max_new_tokens\) must be a whole number >= 1, got 'x'"
    ):
        panel_overrides("paper", "", "", "x", "out", "")
    assert panel_overrides("paper", "", " 2 ", " ", "out", "")[-1] == "eval_runs=2"  # as typed in the text field
    with pytest.raises(ValueError, match="'eval_batch_size' is not key=value"):
        panel_overrides("paper", "", None, None, "out", "eval_batch_size")
    command = eval_command("c.yaml", ["a=1"])
    assert command[-3:] == ["eval", "c.yaml", "a=1"] and command[0].endswith("llamafactory-agentic")
    assert any(path.endswith("tiny_cpu.yaml") for _, path in eval_config_choices())
    # issue 34 medium 6: "(no config)" is offered first; its command has no config file, only keys
    label, value = eval_config_choices()[0]
    assert value == "(no config)" and label.startswith("(no config")
    from llamafactory_agentic.webui.evaluate import checked_eval_config

    assert checked_eval_config(value) == checked_eval_config(label) == checked_eval_config(None) == ""
    assert eval_command("", ["a=1"])[-2:] == ["eval", "a=1"]


def test_eval_config_outside_the_allowed_folders_is_refused_unread(tmp_path, monkeypatch):
    # the same hole as the Chat tab's (issue 34 high 4): the run's output, shown in the page, quoted the typed file
    from llamafactory_agentic.webui.evaluate import checked_eval_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("eval_runs: 1\n")
    assert checked_eval_config("mine.yaml") == str(tmp_path / "mine.yaml")
    assert checked_eval_config("") == ""
    for typed in ("/etc/shadow", "/etc/passwd", "../x.yaml"):
        with pytest.raises(ValueError, match="reads only evaluation configs"):
            checked_eval_config(typed)


def test_read_result(tmp_path):
    assert read_result(tmp_path) == (None, None)
    (tmp_path / "summary.md").write_text("# Evaluation\n")
    (tmp_path / "report.html").write_text("<html></html>")
    assert read_result(tmp_path) == ("# Evaluation\n", str(tmp_path / "report.html"))


def test_rl_datasets_are_marked_in_evaluate():
    info = json.loads((REPO / "data" / "dataset_info.json").read_text())
    rl = [name for name, entry in info.items() if entry.get("formatting") == "arpo_rl"]
    other = [name for name, entry in info.items() if entry.get("formatting") != "arpo_rl"]
    assert rl and other
    labels = {name: label for label, name in mark_rl_datasets(list(info), info)}
    assert labels[rl[0]] == f"{rl[0]} (arpo_rl: RL prompts, use Agentic evaluation)"
    assert labels[other[0]] == other[0]


def test_predict_dependencies_are_named_with_the_install_command():
    # LLaMA-Factory's Evaluate & Predict always sets predict_with_generate, which requires jieba, nltk, rouge_chinese
    missing = missing_predict_packages()
    expected = [pip for module, pip in (("jieba", "jieba"), ("nltk", "nltk"), ("rouge_chinese", "rouge-chinese"))
                if importlib.util.find_spec(module) is None]  # fmt: skip
    assert missing == expected
    hint = predict_hint(["jieba", "rouge-chinese"])
    assert "pip install jieba rouge-chinese" in hint and "Agentic evaluation" in hint
