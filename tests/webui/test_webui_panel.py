# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The panel's pure helpers: output directory on a stage change, the checks box after it, the aborted run's output."""

import types
from pathlib import Path

import pytest

from llamafactory_agentic.webui.panel import aborted_output, default_output_dir, holds_run, stage_change_note


REPO = Path(__file__).resolve().parents[2]
TIME, NOW = "2026-12-03-18-00-00", "2026-12-03-19-30-00"


def test_stage_switch_does_not_lead_back_into_a_run(tmp_path):
    # issue 24 medium 11: arpo -> agentic_sft -> arpo returned to the finished arpo_<time>; Start resumed it
    taken = {f"arpo_{TIME}"}
    assert default_output_dir("agentic_sft", f"arpo_{TIME}", TIME, [], taken.__contains__, NOW) == (
        f"agentic_sft_{TIME}"
    )
    assert default_output_dir("arpo", f"agentic_sft_{TIME}", TIME, [], taken.__contains__, NOW) == f"arpo_{NOW}"
    assert default_output_dir("arpo", f"agentic_sft_{TIME}", TIME, [], None, NOW) == f"arpo_{TIME}"  # as before
    assert default_output_dir("arpo", "my_run", TIME, [], taken.__contains__, NOW) is None  # a name of the user's
    (tmp_path / "empty").mkdir()
    (tmp_path / "run" / "checkpoint-4").mkdir(parents=True)
    assert not holds_run(str(tmp_path / "empty")) and not holds_run(str(tmp_path / "missing"))
    assert holds_run(str(tmp_path / "run"))


def test_stage_change_clears_the_checks_and_names_typed_values_over_the_preset():
    # issue 24 low: the checks box kept the previous stage's notes; ARPO -> AEPO kept typed values silently
    note = stage_change_note("aepo", "released", {"agentic_max_tool_calls": 3, "arpo_beam_size": None}, "en")
    assert note.startswith("**Checks before Start** — The stage changed to `aepo`")
    assert "replace the `aepo` preset: `agentic_max_tool_calls` 3 (preset 6)" in note
    assert "arpo_beam_size" not in note  # left to the preset
    assert "aepo-paper" in stage_change_note("aepo", "paper", {"agentic_max_tool_calls": 3}, "en")
    assert "preset" not in stage_change_note("arpo", "released", {"agentic_max_tool_calls": 3}, "en")
    assert "agentic_sft" in stage_change_note("agentic_sft", None, {}, "en")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_aborted_run_does_not_say_finished(lang):
    # issue 24 low: an abort during a rollout showed "Finished." above the log
    from llamafactory.webui.locales import ALERTS

    box = object()
    runner = types.SimpleNamespace(manager=types.SimpleNamespace(get_elem_by_id={"train.output_box": box}.get))
    finished = {box: ALERTS["info_finished"][lang] + "\n\n```\nlog\n```"}
    text = aborted_output(runner, finished, lang)[box]
    assert not text.startswith(ALERTS["info_finished"][lang]) and text.endswith("\n\n```\nlog\n```")
    assert text.startswith("Aborted." if lang == "en" else "已中止。")
    running = {box: "```\nlog\n```"}
    assert aborted_output(runner, running, lang) == running  # only the last output is relabelled


def test_preview_carries_the_run_plan(tiny_model_dir):
    # issue 29 item 1: the planner's table in LLaMA-Board's preview of an RL run
    import yaml

    from llamafactory_agentic.webui.panel import plan_section

    args = yaml.safe_load((REPO / "recipes" / "tiny" / "arpo_cpu.yaml").read_text())
    args.update(model_name_or_path=str(tiny_model_dir), dataset_dir=str(REPO / "data"), output_dir="saves/x/arpo_1")
    text = plan_section(args, "en")
    assert text.startswith("**Run plan (`llamafactory-agentic plan`")
    for figure in ("memory: rollout peak", "memory: fits", "time: per rollout step", "search: API calls", "disk:"):
        assert figure in text, text
    assert f"config.json at {tiny_model_dir}" in text or str(tiny_model_dir) in text  # the source of the shape
    args.update(model_name_or_path="/no/such/model")
    broken = plan_section(args, "en")
    assert broken.startswith("Run plan not available: model_name_or_path '/no/such/model'"), broken
    assert plan_section(args, "zh").startswith("无法给出运行计划")
