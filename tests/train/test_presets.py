# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Presets (docs/algorithms.md §5.5): explicit keys win, every preset key is filled, values printed and saved."""

import json

import pytest

from llamafactory_agentic.hparams import AgenticArguments
from llamafactory_agentic.train.presets import AGENTIC_CONFIG_NAME, PRESETS, preset_name, resolve_presets

from ._helpers import agentic_args


def test_presets_cover_every_none_default_key():
    # derived by resolve_presets from another key: rl_epsilon_high from rl_epsilon, the loss keys from rl_policy_loss
    derived = {"rl_epsilon_high", "rl_loss_agg_mode", "rl_advantage_std_norm"}
    none_keys = {k for k, v in vars(AgenticArguments()).items() if v is None} - derived
    # optional paths / limits, not preset values
    none_keys -= {"agentic_tool_config", "agentic_cache_path", "agentic_search_index", "arpo_val_max_samples"}
    # the vllm_server backend's connection settings (docs/scaling.md): unset unless that backend is chosen
    none_keys -= {"arpo_server_urls", "arpo_server_api_key", "arpo_server_weight_dir"}
    # optional reward settings (docs/rewards.md): unset = the single `agentic_reward`, no judge
    none_keys -= {k for k in none_keys if k == "agentic_reward_funcs" or k.startswith("agentic_reward_judge_")}
    for name, preset in PRESETS.items():
        assert none_keys <= set(preset), (name, none_keys - set(preset))


@pytest.mark.parametrize(
    ("stage", "variant", "expected"),
    [("arpo", "released", "arpo"), ("aepo", "released", "aepo"), ("aepo", "paper", "aepo-paper")],
)
def test_stage_selects_preset(stage, variant, expected):
    args = agentic_args(stage, aepo_variant=variant)
    assert preset_name(args) == expected
    result = resolve_presets(args, verbose=False)
    assert result["preset"] == expected
    for key, value in PRESETS[expected].items():
        assert getattr(args, key) == value


def test_spec_table_values():
    assert PRESETS["aepo"]["aepo_balanced_clip"] and PRESETS["aepo"]["aepo_balanced_clip_scope"] == "all"
    assert not PRESETS["aepo"]["aepo_dynamic_rollouts"]
    paper = PRESETS["aepo-paper"]
    assert paper["aepo_dynamic_rollouts"] and paper["aepo_premonitor_rounds"] == "post_tool"
    assert paper["aepo_balanced_clip_scope"] == "high_entropy" and paper["aepo_entropy_advantage"]
    assert (PRESETS["arpo"]["agentic_tool_retries"], PRESETS["aepo"]["agentic_tool_workers"]) == (3, 32)


def test_explicit_key_wins_and_effective_values_saved(tmp_path, capsys):
    args = agentic_args("aepo", aepo_balanced_clip=False, agentic_max_tool_calls=3, rl_epsilon=0.3)
    result = resolve_presets(args, output_dir=str(tmp_path))
    assert args.aepo_balanced_clip is False and args.agentic_max_tool_calls == 3  # explicit
    assert args.aepo_branch_penalty == 0.05 and args.agentic_tool_workers == 32  # preset
    assert args.rl_epsilon_high == 0.3  # None means "equal to rl_epsilon"
    assert "aepo_balanced_clip" in result["explicit"] and "aepo_branch_penalty" in result["from_preset"]

    saved = json.loads((tmp_path / AGENTIC_CONFIG_NAME).read_text())
    assert saved["values"]["aepo_balanced_clip"] is False and saved["values"]["aepo_branch_penalty"] == 0.05
    assert saved["values"]["rl_epsilon_high"] == 0.3 and saved["preset"] == "aepo"
    printed = capsys.readouterr().out
    assert "aepo_balanced_clip: False (explicit)" in printed and "aepo_branch_penalty: 0.05 (preset)" in printed
    # keys outside the presets: labelled by their value against the declared default (a recipe's
    # `arpo_rollout_backend: vllm` was printed as "'vllm' (default)" in the H200 smoke runs of 2026-12-04)
    assert "rl_epsilon: 0.3 (explicit)" in printed and "rl_epsilon_high: 0.3 (= rl_epsilon)" in printed
    assert "arpo_rollout_backend: 'hf' (default)" in printed
    resolve_presets(agentic_args("arpo", arpo_rollout_backend="vllm"))
    assert "arpo_rollout_backend: 'vllm' (explicit)" in capsys.readouterr().out


def test_unknown_stage_or_variant():
    with pytest.raises(ValueError, match="stages"):
        preset_name(agentic_args("sft"))
    with pytest.raises(ValueError, match="aepo_variant"):
        preset_name(agentic_args("aepo", aepo_variant="nightly"))


def test_grpo_preset_is_arpo_with_full_groups_and_no_branching():
    args = agentic_args("arpo", arpo_variant="grpo", arpo_rollout_n=4)
    result = resolve_presets(args, verbose=False)
    assert result["preset"] == "grpo" and preset_name(args) == "grpo"
    assert (args.arpo_initial_rollouts, args.arpo_beam_size) == (4, 1)
    assert "arpo_initial_rollouts" in result["from_preset"] and result["values"]["arpo_initial_rollouts"] == 4


def test_grpo_shares_everything_else_with_arpo():
    grpo, arpo = agentic_args("arpo", arpo_variant="grpo"), agentic_args("arpo")
    resolve_presets(grpo, verbose=False)
    resolve_presets(arpo, verbose=False)
    differing = {k for k in PRESETS["arpo"] if getattr(grpo, k) != getattr(arpo, k)}
    assert differing == {"arpo_initial_rollouts", "arpo_beam_size"}
    assert (arpo.arpo_initial_rollouts, grpo.arpo_initial_rollouts) == (8, 16)  # M = 16 by default


def test_grpo_refuses_n_below_m_and_other_stages():
    with pytest.raises(ValueError, match="N = M = 4"):
        resolve_presets(agentic_args("arpo", arpo_variant="grpo", arpo_rollout_n=4, arpo_initial_rollouts=2))
    with pytest.raises(ValueError, match="applies to `stage: arpo`"):
        preset_name(agentic_args("aepo", arpo_variant="grpo"))
    with pytest.raises(ValueError, match="arpo_variant"):
        preset_name(agentic_args("arpo", arpo_variant="dapo"))


def test_default_n_must_fit_the_group():
    with pytest.raises(ValueError, match=r"`arpo_initial_rollouts` must be in \[1, arpo_rollout_n=4\], got 8"):
        resolve_presets(agentic_args("arpo", arpo_rollout_n=4), verbose=False)


def test_every_preset_counts_consecutive_branches_per_lineage():
    """Issue 8 item 5: `question` (the release's count) made branching depend on the batch; it stays an explicit key."""
    assert {name: preset["aepo_branch_penalty_scope"] for name, preset in PRESETS.items()} == {
        "arpo": "lineage",
        "grpo": "lineage",
        "aepo": "lineage",
        "aepo-paper": "lineage",
    }
    for variant in ("released", "paper"):
        args = agentic_args("aepo", aepo_variant=variant)
        resolve_presets(args, verbose=False)
        assert args.aepo_branch_penalty_scope == "lineage"
        explicit = agentic_args("aepo", aepo_variant=variant, aepo_branch_penalty_scope="question")
        result = resolve_presets(explicit, verbose=False)
        assert explicit.aepo_branch_penalty_scope == "question" and "aepo_branch_penalty_scope" in result["explicit"]


def test_keys_set_without_effect_are_warned_about(plugin_caplog):
    """Issue 24: AEPO coefficients under stage arpo were accepted with no effect and no word."""
    import logging

    args = agentic_args("arpo", aepo_premonitor_beta=0.9, aepo_entropy_advantage_coef=0.5, aepo_variant="paper")
    result = resolve_presets(args, verbose=True)
    warnings = result["warnings"]
    assert len(warnings) == 3
    assert warnings[0].startswith("`aepo_variant: paper` has no effect under `stage: arpo`")
    assert warnings[1].startswith(
        "`aepo_premonitor_beta` has no effect in this run: it acts only with `aepo_dynamic_rollouts: true`, and this "
        "run has `aepo_dynamic_rollouts: false` (the `arpo` preset's value) (the AEPO mechanisms are on only under "
        "`stage: aepo` unless switched on here)."
    )
    assert (
        "`aepo_entropy_advantage_coef` has no effect" in warnings[2]
        and "`aepo_entropy_advantage: true`" in warnings[2]
    )
    logged = [r.getMessage() for r in plugin_caplog.records if r.levelno == logging.WARNING]
    assert list(dict.fromkeys(logged)) == warnings  # (caplog may see a record twice: root and llamafactory)

    # switched on explicitly, the same keys act under stage arpo: no warning
    args = agentic_args("arpo", aepo_dynamic_rollouts=True, aepo_premonitor_beta=0.9, aepo_high_entropy_z=1.0,
                        aepo_balanced_clip=True, aepo_balanced_clip_scope="high_entropy")  # fmt: skip
    assert resolve_presets(args, verbose=False)["warnings"] == []
    # the paper preset turns them on; the released one leaves pre-monitoring off
    assert (
        resolve_presets(agentic_args("aepo", aepo_variant="paper", aepo_premonitor_beta=0.9), verbose=False)[
            "warnings"
        ]
        == []
    )
    (released,) = resolve_presets(agentic_args("aepo", aepo_premonitor_tokens=30), verbose=False)["warnings"]
    assert "`aepo_premonitor_tokens` has no effect" in released and "(the `aepo` preset's value)" in released
    # the non-preset `aepo_high_entropy_z` counts as set when it differs from its default
    (z,) = resolve_presets(agentic_args("aepo", aepo_high_entropy_z=1.5), verbose=False)["warnings"]
    assert "it acts only with `aepo_balanced_clip_scope: high_entropy`" in z
    # the recipes' keys and the defaults warn about nothing
    for stage in ("arpo", "aepo"):
        assert resolve_presets(agentic_args(stage), verbose=False)["warnings"] == []


def test_async_and_server_keys_without_their_switch_are_warned_about():
    """The off-policy correction acts only on stale tokens (rl_max_staleness > 0), its cap only with tis, the server
    keys only with arpo_rollout_backend: vllm_server; a switch left at its default is named as the default."""
    warnings = resolve_presets(
        agentic_args("arpo", rl_off_policy_cap=3.0, arpo_server_urls="http://127.0.0.1:8000/v1"), verbose=False
    )["warnings"]
    assert warnings == [
        "`rl_off_policy_cap` has no effect in this run: it acts only with `rl_max_staleness` > 0, and this run has "
        "`rl_max_staleness: 0` (the default). Remove it or set `rl_max_staleness` > 0.",
        "`arpo_server_urls` has no effect in this run: it acts only with `arpo_rollout_backend: vllm_server`, and this "
        "run has `arpo_rollout_backend: hf` (the default). Remove it or set `arpo_rollout_backend: vllm_server`.",
    ], warnings
    (decoupled,) = resolve_presets(
        agentic_args("aepo", rl_max_staleness=1, rl_off_policy_correction="decoupled", rl_off_policy_cap=3.0),
        verbose=False,
    )["warnings"]
    assert "it acts only with `rl_off_policy_correction: tis`" in decoupled and "decoupled` (explicit)" in decoupled
    on = agentic_args("arpo", rl_max_staleness=1, rl_off_policy_cap=3.0, arpo_rollout_backend="vllm_server",
                      arpo_server_urls="http://127.0.0.1:8000/v1")  # fmt: skip
    assert resolve_presets(on, verbose=False)["warnings"] == []


def test_llamaboard_checks_show_the_same_warnings():
    from llamafactory_agentic.webui.checks import check_values

    findings = check_values("arpo", {"aepo_premonitor_beta": 0.9})
    (warning,) = [f for f in findings if f.level == "warning"]
    assert warning.message.startswith("`aepo_premonitor_beta` has no effect in this run")


def test_arpo_prints_only_the_keys_that_act(tmp_path, capsys):
    # issue 35: `stage: arpo` printed every aepo_* key among its effective values; agentic_config.json keeps them all
    resolve_presets(agentic_args("arpo"), output_dir=str(tmp_path))
    printed = capsys.readouterr().out
    assert "aepo_" not in printed and "arpo_branch_alpha" not in printed, printed
    assert "arpo_beam_size: 2 (preset)" in printed
    saved = json.loads((tmp_path / AGENTIC_CONFIG_NAME).read_text())
    assert saved["values"]["aepo_branch_penalty"] == 0.0 and "aepo_premonitor_beta" in saved["inert"]
    resolve_presets(agentic_args("arpo", aepo_entropy_advantage_coef=0.3))
    assert "aepo_entropy_advantage_coef: 0.3 (no effect in this run)" in capsys.readouterr().out
