# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Arguments to config objects in one place (`build_run_config`): defaults only from hparams and the presets."""

import dataclasses
from types import SimpleNamespace

import pytest


pytest.importorskip("trl")

from transformers import Seq2SeqTrainingArguments  # noqa: E402

from llamafactory_agentic.rollout import STOP_STRINGS  # noqa: E402
from llamafactory_agentic.tools import build_executor_from_args  # noqa: E402
from llamafactory_agentic.train.arpo.config import (  # noqa: E402
    ArpoLossConfig,
    ToolsConfig,
    build_run_config,
    rollout_config_from_args,
    tools_config_from_args,
)
from llamafactory_agentic.train.presets import PRESETS, resolve_presets  # noqa: E402

from ._helpers import agentic_args  # noqa: E402


SAMPLING = SimpleNamespace(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)  # the recipes' rollout sampling


def resolved(stage: str = "arpo", **overrides):
    args = agentic_args(stage, **overrides)
    resolve_presets(args, verbose=False)
    return args


def test_rollout_config_reads_the_resolved_keys_and_the_sampling_arguments():
    cfg = rollout_config_from_args(resolved("arpo"), SAMPLING, eos_token_id=7, seed=3)
    assert (cfg.beam_size, cfg.branch_rule, cfg.branch_tau, cfg.entropy_weight) == (2, "stochastic", 0.5, 0.2)
    assert (cfg.entropy_source, cfg.entropy_topk, cfg.entropy_tokens, cfg.max_tool_calls) == ("topk", 10, 20, 3)
    assert cfg.group_size == 16 and cfg.initial_rollouts == 8 and cfg.eos_token_id == 7 and cfg.seed == 3
    assert cfg.budget_fill == "per_round" and cfg.stop_strings == STOP_STRINGS

    args = resolved("aepo", arpo_budget_fill="all_at_once", aepo_branch_penalty=0)  # YAML writes 0 for 0.0
    cfg = rollout_config_from_args(args, SimpleNamespace(do_sample=False, temperature=0.7, top_p=0.9, top_k=50), 7)
    assert (
        cfg.budget_fill == "all_at_once" and cfg.branch_penalty_scope == PRESETS["aepo"]["aepo_branch_penalty_scope"]
    )
    assert cfg.branch_penalty == 0.0 and isinstance(cfg.branch_penalty, float)
    assert (cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_tool_calls) == (0.0, 0.9, 50, 6)


def test_unresolved_arguments_are_refused_when_the_configs_are_built():
    args = agentic_args("arpo")  # presets not applied: the preset keys are still None
    with pytest.raises(ValueError, match=r"Unresolved keys \[.*'beam_size'.*resolve_presets"):
        rollout_config_from_args(args, SAMPLING, eos_token_id=7)
    with pytest.raises(ValueError, match=r"Unresolved keys \['agentic_tool_retries', 'agentic_tool_workers'\]"):
        tools_config_from_args(args)
    with pytest.raises(ValueError, match="balanced_clip"):
        ArpoLossConfig.from_args(args)


def test_tools_config_carries_every_key_the_executor_reads():
    cfg = tools_config_from_args(resolved("aepo"))
    assert (cfg.agentic_tool_retries, cfg.agentic_tool_workers) == (PRESETS["aepo"]["agentic_tool_retries"], 32)
    read = set()

    class Recorder:
        def __getattr__(self, name):
            read.add(name)
            return getattr(cfg, name)

    with build_executor_from_args(Recorder()) as executor:
        assert executor.workers == 32
        assert all(tool.retries == cfg.agentic_tool_retries for tool in executor.tools.values())
    assert read and read <= {f.name for f in dataclasses.fields(ToolsConfig)}, read


def test_build_run_config_builds_every_part_once():
    args = resolved("aepo", arpo_rollout_n=4, arpo_initial_rollouts=2, arpo_rollout_batch_size=2)
    training_args = Seq2SeqTrainingArguments(
        output_dir="unused", per_device_train_batch_size=2, gradient_accumulation_steps=2, seed=5, report_to=[]
    )
    run = build_run_config(training_args, args, SAMPLING, eos_token_id=9, world_size=1)
    assert run.grpo.steps_per_generation == 4 and run.grpo.num_generations == 4
    assert run.loss == ArpoLossConfig.from_args(args) and run.loss.balanced_clip and run.loss.policy_loss == "ppo_clip"
    assert run.rollout.group_size == 4 and run.rollout.eos_token_id == 9 and run.rollout.seed == 5  # seed + rank 0
    assert run.tools == tools_config_from_args(args)
    assert (run.reward, run.reward_math, run.reward_tool_bonus) == ("f1", "f1", 0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.rollout.group_size = 8


def test_tool_bonus_reaches_the_run_config_and_bad_values_stop_before_the_model_loads():
    training_args = Seq2SeqTrainingArguments(output_dir="unused", per_device_train_batch_size=16, report_to=[])
    run = build_run_config(training_args, resolved("arpo", agentic_reward_tool_bonus=0.0), SAMPLING, 9, world_size=1)
    assert run.reward_tool_bonus == 0.0
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="agentic_reward_tool_bonus must be a finite number >= 0"):
            build_run_config(training_args, resolved("arpo", agentic_reward_tool_bonus=bad), SAMPLING, 9, world_size=1)
    user = resolved("arpo", agentic_reward="mypkg.rewards:score", agentic_reward_tool_bonus=0.0)
    with pytest.raises(ValueError, match="applies to the built-in rewards f1, em, math; reward 'mypkg.rewards:score'"):
        build_run_config(training_args, user, SAMPLING, 9, world_size=1)


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        # before: both accepted (top_p 1.5 silently kept every token; top_k -1 silently meant "off")
        (
            dict(top_p=1.5),
            r"^`top_p` must be a number in \(0, 1\] \(1\.0 keeps every token: no nucleus filter\), got 1\.5",
        ),
        (dict(top_p=0.0), r"^`top_p` must be a number in \(0, 1\]"),
        (dict(top_k=-1), r"^`top_k` must be an integer >= 0 \(0 turns the top-k filter off\), got -1; vLLM's -1"),
        (dict(top_k=2.5), r"^`top_k` must be an integer >= 0"),
    ],
)
def test_rollout_top_p_and_top_k_out_of_range_are_refused_with_the_range(sampling, message):
    from llamafactory.hparams import GeneratingArguments

    from llamafactory_agentic.train.arpo.config import check_rl_sampling
    from llamafactory_agentic.webui.checks import check_values

    with pytest.raises(ValueError, match=message):
        check_rl_sampling(GeneratingArguments(do_sample=True, temperature=1.0, **sampling))
    # training refuses it before reading or loading anything else (the other arguments are never read) ...
    from llamafactory_agentic.train.arpo.workflow import run_arpo

    with pytest.raises(ValueError, match=message):
        run_arpo(None, None, SimpleNamespace(do_train=True), None, SimpleNamespace(**{**vars(SAMPLING), **sampling}))
    # ... and so do LLaMA-Board's checks
    (finding,) = [f for f in check_values("arpo", dict(temperature=1.0, **sampling)) if f.level == "error"]
    assert finding.subject == "sampling" and finding.message.startswith(message.strip("^").split(" must")[0])


def test_recipe_sampling_and_llamafactory_defaults_pass():
    from llamafactory.hparams import GeneratingArguments

    from llamafactory_agentic.train.arpo.config import check_rl_sampling

    check_rl_sampling(SAMPLING)  # temperature 1.0, top_p 1.0, top_k 0
    check_rl_sampling(GeneratingArguments())  # LLaMA-Factory's defaults: top_p 0.7, top_k 50
