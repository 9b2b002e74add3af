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


def _saved_run(folder, step, max_steps, checkpoint=None):
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(
        b"\0" * 8
    )  # what trainer.save_model writes (a name LLaMA-Factory checks)
    (folder / "train_results.json").write_text("{}")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": max_steps}))
    if checkpoint is not None:
        (folder / f"checkpoint-{checkpoint}").mkdir()
        (folder / f"checkpoint-{checkpoint}" / "trainer_state.json").write_text(
            json.dumps({"global_step": checkpoint})
        )


def test_an_aborted_run_that_saved_its_model_says_so_and_what_start_does(tmp_path):
    # issue 34 medium 13: after an Abort the box said "no final model was saved" though the trainer saved one
    from llamafactory.webui.locales import ALERTS

    box = object()
    runner = types.SimpleNamespace(manager=types.SimpleNamespace(get_elem_by_id={"train.output_box": box}.get))
    finished = {box: ALERTS["info_finished"]["en"] + "\n\nlog"}
    _saved_run(tmp_path / "run", 2, 50)
    text = aborted_output(runner, finished, "en", str(tmp_path / "run"))[box]
    assert text.startswith("Aborted at step 2.") and "no final model was saved" not in text, text
    assert "saved its model in" in text and "Start with this output directory is refused" in text
    assert "Checkpoint path `run`" in text
    _saved_run(tmp_path / "run2", 3, 50, checkpoint=2)
    text = aborted_output(runner, finished, "en", str(tmp_path / "run2"))[box]
    assert "resumes from `checkpoint-2`" in text, text
    # nothing saved (killed in its first rollout): the note of before
    text = aborted_output(runner, finished, "en", str(tmp_path / "empty"))[box]
    assert "no final model was saved" in text


def test_checks_after_an_abort_match_what_start_does(tmp_path):
    # issue 34 medium 13: the checks promised a resume; LLaMA-Factory's parser refused with `overwrite_output_dir`
    from llamafactory_agentic.webui.checks import check_output_dir

    _saved_run(tmp_path / "run", 2, 50)
    (finding,) = check_output_dir("arpo", {"output_dir": str(tmp_path / "run")}, "arpo_new")
    assert finding.level == "error" and "no complete checkpoint" in finding.message, finding
    assert "overwrite_output_dir" in finding.message and "Checkpoint path `run`" in finding.fix
    _saved_run(tmp_path / "run2", 3, 50, checkpoint=2)
    (finding,) = check_output_dir("arpo", {"output_dir": str(tmp_path / "run2")}, "arpo_new")
    assert finding.level == "info" and "resumes it from `checkpoint-2`" in finding.message, finding
