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
