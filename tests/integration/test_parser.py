# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The plugin's keys inside LLaMA-Factory's parser: YAML and command line, unknown keys, choices, name clashes."""

import dataclasses

import pytest

import llamafactory_agentic
from llamafactory_agentic.hparams import AgenticArguments, agentic_field_names


@pytest.fixture(scope="module")
def parser_module():
    llamafactory_agentic.register()
    import llamafactory.hparams.parser as parser_module

    return parser_module


def parse(parser_module, args):
    from transformers import HfArgumentParser

    return parser_module._parse_args(HfArgumentParser(parser_module._TRAIN_ARGS), args)


BASE = {"model_name_or_path": "tiny", "output_dir": "/tmp/agentic-parser-test", "do_train": True}


def test_yaml_dict_with_plugin_keys(parser_module):
    args = dict(BASE, stage="aepo", arpo_rollout_n=4, arpo_initial_rollouts=2, aepo_variant="paper", rl_kl_coef=0.01)
    *_, finetuning_args, _ = parse(parser_module, args)
    assert type(finetuning_args).__name__ == "AgenticFinetuningArguments"
    assert (finetuning_args.stage, finetuning_args.agentic_stage) == ("aepo", "aepo")
    assert (finetuning_args.arpo_rollout_n, finetuning_args.arpo_initial_rollouts) == (4, 2)
    assert finetuning_args.aepo_variant == "paper" and finetuning_args.rl_kl_coef == 0.01
    assert finetuning_args.aepo_balanced_clip is None  # filled by the preset at stage start


def test_command_line_with_plugin_keys(parser_module):
    argv = ["--model_name_or_path", "tiny", "--output_dir", "/tmp/x", "--stage", "arpo"]
    argv += ["--arpo_branch_rule", "deterministic", "--aepo_balanced_clip", "true", "--agentic_max_tool_calls", "6"]
    *_, finetuning_args, _ = parse(parser_module, argv)
    assert finetuning_args.arpo_branch_rule == "deterministic"
    assert finetuning_args.aepo_balanced_clip is True and finetuning_args.agentic_max_tool_calls == 6


def test_agentic_sft_runs_as_llamafactory_sft(parser_module):
    *_, finetuning_args, _ = parse(parser_module, dict(BASE, stage="agentic_sft", agentic_sft_mask_results=False))
    assert (finetuning_args.stage, finetuning_args.agentic_stage) == ("sft", "agentic_sft")
    assert finetuning_args.agentic_sft_mask_results is False


def test_llamafactory_stages_are_untouched(parser_module):
    *_, finetuning_args, _ = parse(parser_module, dict(BASE, stage="sft"))
    assert (finetuning_args.stage, finetuning_args.agentic_stage) == ("sft", None)


def test_unknown_key_is_still_rejected_with_llamafactorys_message(parser_module):
    with pytest.raises(ValueError, match=r"Some keys are not used by the HfArgumentParser: \['arpo_rolout_n'\]"):
        parse(parser_module, dict(BASE, stage="arpo", arpo_rolout_n=3))

    with pytest.raises(ValueError, match="Some specified arguments are not used by the HfArgumentParser"):
        parse(parser_module, ["--model_name_or_path", "tiny", "--output_dir", "/tmp/x", "--arpo_rolout_n", "3"])


def test_bad_choice_and_bad_numbers_are_clear_errors(parser_module):
    with pytest.raises(ValueError, match=r"`arpo_branch_rule` must be one of \['stochastic', 'deterministic'\]"):
        parse(parser_module, dict(BASE, stage="arpo", arpo_branch_rule="sometimes"))

    with pytest.raises(ValueError, match=r"`arpo_initial_rollouts` must be in \[1, arpo_rollout_n=4\]"):
        parse(parser_module, dict(BASE, stage="arpo", arpo_rollout_n=4, arpo_initial_rollouts=8))


def test_no_plugin_key_clashes_with_llamafactory_fields():
    from llamafactory.hparams import (
        DataArguments,
        FinetuningArguments,
        GeneratingArguments,
        ModelArguments,
        TrainingArguments,
    )

    llamafactory_fields = set()
    for cls in (ModelArguments, DataArguments, TrainingArguments, FinetuningArguments, GeneratingArguments):
        llamafactory_fields |= {f.name for f in dataclasses.fields(cls)}

    assert agentic_field_names().isdisjoint(llamafactory_fields)
    assert all(name.startswith(("arpo_", "aepo_", "agentic_", "rl_")) for name in agentic_field_names())


def test_every_plugin_key_has_help_text():
    for f in dataclasses.fields(AgenticArguments):
        assert f.metadata.get("help"), f"{f.name} has no help text"


# ---------------------------------------------------------------------------------------------- issue 24 (validation)
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # before: TypeError "'<' not supported between instances of 'str' and 'int'" (no key named)
        ({"arpo_rollout_n": "eight"}, r"^`arpo_rollout_n` must be an integer, got 'eight' \(str\)\.$"),
        ({"arpo_rollout_n": 4.5}, r"^`arpo_rollout_n` must be an integer, got 4\.5 \(float\)\.$"),
        # before: accepted; `float('high')` failed in rollout_config_from_args after the model loaded
        ({"arpo_branch_tau": "high"}, r"^`arpo_branch_tau` must be a number or null, got 'high' \(str\)\.$"),
        ({"arpo_branch_tau": float("nan")}, r"^`arpo_branch_tau` must be a finite number, got nan\.$"),
        ({"arpo_hard_dedup": "sometimes"}, r"^`arpo_hard_dedup` must be true or false, got 'sometimes' \(str\)\.$"),
        ({"agentic_reward_tool_bonus": "big"}, r"^`agentic_reward_tool_bonus` must be a number, got 'big' \(str\)\."),
        # before: accepted; get_reward_function / check_tool_bonus refused them after the model loaded
        ({"agentic_reward": "f2"}, r"^`agentic_reward: f2`: unknown reward 'f2'; registered: \['em', 'f1', 'math'\]"),
        (
            {"agentic_reward_tool_bonus": -1},
            r"^agentic_reward_tool_bonus must be a finite number >= 0 \(and finite in float32\), got -1\.0\.",
        ),
        (
            {"agentic_reward": "my_pkg.rewards:score", "agentic_reward_tool_bonus": 0.3},
            r"^agentic_reward_tool_bonus=0\.3 applies to the built-in rewards f1, em, math; reward "
            r"'my_pkg\.rewards:score' computes its own score",
        ),
    ],
)
def test_bad_values_are_refused_at_parse_time_naming_key_value_and_type(parser_module, extra, message):
    with pytest.raises(ValueError, match=message):
        parse(parser_module, dict(BASE, stage="arpo", **extra))


def test_number_keys_take_integers_and_ok_values_pass(parser_module):
    *_, finetuning_args, _ = parse(
        parser_module, dict(BASE, stage="arpo", arpo_branch_tau=1, agentic_reward="em", agentic_reward_tool_bonus=0)
    )
    assert finetuning_args.arpo_branch_tau == 1.0 and isinstance(finetuning_args.arpo_branch_tau, float)
    assert finetuning_args.agentic_reward_tool_bonus == 0.0


def test_parse_time_checks_reach_llamaboards_checks():
    """LLaMA-Board's checks call the same validation (webui/checks.py `check_values`)."""
    from llamafactory_agentic.webui.checks import check_values

    (finding,) = [f for f in check_values("arpo", {"arpo_rollout_n": "eight"}) if f.level == "error"]
    assert finding.message == "`arpo_rollout_n` must be an integer, got 'eight' (str)."
    (finding,) = [f for f in check_values("arpo", {"agentic_reward_tool_bonus": -0.5}) if f.level == "error"]
    assert "agentic_reward_tool_bonus must be a finite number >= 0" in finding.message


def test_auto_resume_skips_a_checkpoint_whose_save_was_interrupted(parser_module, tmp_path, plugin_caplog):
    """Issue 24: a checkpoint killed mid-save (no trainer_state.json, the file Transformers writes last) was picked by
    auto-resume (Transformers' get_last_checkpoint looks at folder names only) and the run failed after the model
    loaded with FileNotFoundError. Now the parser's auto-resume skips it, naming the folder."""
    import json
    import logging

    out = tmp_path / "out"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (out / "checkpoint-4").mkdir()
    (out / "checkpoint-4" / "model.safetensors").write_bytes(b"partial")  # killed before trainer_state.json
    (out / "checkpoint-6").mkdir()
    (out / "checkpoint-6" / "trainer_state.json").write_text('{"global_st')  # killed while writing it

    assert parser_module.get_last_checkpoint(str(out)) == str(out / "checkpoint-2")
    skipped = [r.getMessage() for r in plugin_caplog.records if r.levelno == logging.WARNING]
    assert any(f"Skipping checkpoint {out / 'checkpoint-4'} for auto-resume: it has no trainer_state.json" in m
               and "Delete that folder" in m for m in skipped)  # fmt: skip
    assert any(f"{out / 'checkpoint-6'}" in m and "cannot be read" in m for m in skipped)

    from transformers.trainer_utils import get_last_checkpoint

    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-6")  # what LLaMA-Factory used before
