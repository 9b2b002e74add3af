# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The agentic panel's fields come from the dataclasses and the presets; UI values become keys; effective values."""

import dataclasses
import html
import re

import pytest

from llamafactory_agentic.hparams import AgenticArguments
from llamafactory_agentic.train.presets import PRESETS
from llamafactory_agentic.webui import fields as F
from llamafactory_agentic.webui.locales import LANGS, build_locales


def test_every_field_is_derived_from_its_dataclass():
    from llamafactory.hparams import GeneratingArguments

    agentic = {f.name: f for f in dataclasses.fields(AgenticArguments)}
    generating = {f.name: f for f in dataclasses.fields(GeneratingArguments)}
    names = [f.name for f in F.panel_fields()]
    assert len(names) == len(set(names))
    for field in F.panel_fields():
        source = generating if field.name in F.GENERATING_FIELDS else agentic
        spec = source[field.key]
        assert field.default == spec.default and field.help == spec.metadata["help"], field.name
        assert field.preset == (field.key in PRESETS["arpo"]), field.name
        if field.preset:  # a preset key is left to the preset: None in the dataclass, "preset: <value>" in the UI
            assert field.default is None and field.optional
    by_name = {f.name: f for f in F.panel_fields()}
    assert by_name["arpo_branch_rule"].choices == ("stochastic", "deterministic")
    assert by_name["aepo_dynamic_rollouts"].kind == "bool" and by_name["aepo_dynamic_rollouts"].optional
    assert by_name["rollout_top_k"].key == "top_k" and by_name["rollout_top_k"].kind == "int"
    assert "f1" in by_name["agentic_reward"].choices  # the reward registry's names


def test_issue_groups_and_stages():
    groups = {f.name: f.group for f in F.panel_fields()}
    for name in ("arpo_rollout_n", "arpo_initial_rollouts", "arpo_beam_size", "arpo_branch_rule",
                 "arpo_entropy_weight", "arpo_budget_fill", "arpo_max_prompt_length", "arpo_max_response_length",
                 "arpo_rollout_batch_size", "arpo_rollout_backend"):  # fmt: skip
        assert groups[name] == "rollout"
    for name in ("agentic_tool_config", "agentic_search_backend", "agentic_search_index", "agentic_cache_path",
                 "agentic_cache_mode", "agentic_max_tool_calls", "agentic_python_timeout"):  # fmt: skip
        assert groups[name] == "tools"
    assert groups["agentic_reward"] == groups["agentic_reward_math"] == "reward"
    for name in ("rl_max_staleness", "rl_off_policy_correction", "rl_off_policy_cap", "arpo_server_urls",
                 "arpo_server_weight_transfer", "arpo_server_timeout"):  # fmt: skip
        assert groups[name] == "async" and F.field_by_name(name).stages == F.RL_STAGES
    assert groups["aepo_variant"] == "aepo" and groups["agentic_sft_mask_results"] == "sft"
    assert F.field_by_name("aepo_variant").stages == ("aepo",)
    assert F.field_by_name("agentic_sft_mask_results").stages == ("agentic_sft",)


def test_placeholders_and_choices_follow_the_stage_preset():
    beam, calls, clip = (
        F.field_by_name(n) for n in ("arpo_beam_size", "agentic_max_tool_calls", "aepo_balanced_clip")
    )
    assert F.placeholder(calls, F.stage_preset("arpo")) == "preset: 3"
    assert F.placeholder(calls, F.stage_preset("aepo")) == "preset: 6"
    assert F.placeholder(beam, F.stage_preset("aepo", "paper")) == "preset: 2"
    assert F.ui_choices(clip, F.stage_preset("arpo"))[0] == ("preset: false", F.PRESET_CHOICE)
    assert F.ui_choices(clip, F.stage_preset("aepo"))[0] == ("preset: true", F.PRESET_CHOICE)
    assert F.stage_preset("agentic_sft") == {}
    assert F.preset_summary(calls) == "Preset: arpo 3 · aepo 6 · aepo-paper 6 · grpo 3"


def test_panel_args_writes_only_set_values_that_differ_from_the_default():
    values = {f.name: F.initial_value(f) for f in F.panel_fields()}
    assert F.panel_args("arpo", values) == {}  # untouched panel: nothing typed, presets and defaults apply
    values.update(
        arpo_rollout_n=4.0,  # gradio's Number may hand floats
        arpo_beam_size=None,  # empty: the preset
        arpo_branch_rule="deterministic",
        aepo_balanced_clip=F.TRUE,
        aepo_variant="paper",
        agentic_search_index="  saves/index ",
        agentic_sft_mask_results=False,
        rollout_top_k=0,
    )
    assert F.panel_args("arpo", values) == {
        "arpo_rollout_n": 4,
        "arpo_branch_rule": "deterministic",
        "top_k": 0,
        "agentic_search_index": "saves/index",
    }
    assert F.panel_args("aepo", values)["aepo_balanced_clip"] is True
    assert F.panel_args("aepo", values)["aepo_variant"] == "paper"
    assert F.panel_args("agentic_sft", values) == {"agentic_sft_mask_results": False}
    with pytest.raises(ValueError, match="arpo_rollout_n"):
        F.panel_args("arpo", {"arpo_rollout_n": 2.5})


def test_effective_values_resolve_presets_like_the_training_process():
    effective = F.effective_values("aepo", {"arpo_rollout_n": 12, "aepo_variant": "paper", "rl_epsilon": 0.3})
    rows = {key: (value, origin) for key, value, origin in effective["rows"]}
    assert effective["preset"] == "aepo-paper"
    assert rows["arpo_rollout_n"] == (12, "explicit")
    assert rows["aepo_dynamic_rollouts"] == (True, "preset")
    assert rows["aepo_premonitor_rounds"] == ("post_tool", "preset")  # reported by resolve_presets, not in the panel
    assert rows["rl_epsilon_high"] == (0.3, "rl_epsilon")
    assert rows["temperature"] == (0.95, "default")  # LLaMA-Factory's GeneratingArguments
    assert rows["arpo_initial_rollouts"] == (8, "preset")  # N is a preset key since the GRPO preset (N = M)
    text = F.format_effective(effective)
    assert "preset `aepo-paper`" in text and "aepo_balanced_clip_scope" in text
    assert "Effective values of the agentic keys" in text and "explicit" in text
    chinese = F.format_effective(effective, "zh")  # LLaMA-Board in Chinese: title and origins translated
    assert "智能体参数的实际取值" in chinese and "预设 `aepo-paper`" in chinese and "显式设置" in chinese
    assert "explicit" not in chinese and "aepo_balanced_clip_scope" in chinese
    lines = chinese.split("```")[1].strip().splitlines()
    values = {line.split()[0]: line.split()[-1] for line in lines}
    assert values["arpo_rollout_n"] == "12" and values["temperature"] == "0.95"
    sft = F.effective_values("agentic_sft", {"agentic_sft_mask_results": False})
    assert sft["preset"] is None and ("agentic_sft_mask_results", False, "explicit") in sft["rows"]


def test_locales_cover_every_field_and_language_without_clashing_with_llamaboard():
    from llamafactory.webui.locales import LOCALES

    locales = build_locales()
    for field in F.panel_fields():
        entry = locales[field.name]
        assert set(entry) == set(LANGS)
        assert html.unescape(entry["en"]["info"]).startswith(F.plain_help(field.help))
        assert entry["zh"]["label"] != entry["en"]["label"] or field.name.startswith("aepo_variant")
    assert "&lt;result&gt;" in locales["agentic_sft_mask_results"]["en"]["info"]  # shown, not swallowed as HTML
    # LLaMA-Board has no element of these names (or, once patched, the same entries): no label is overwritten
    assert all(LOCALES.get(name, entry) == entry for name, entry in locales.items())


def test_labels_show_the_key_that_error_messages_use():
    # issue 24 low: labels never showed the key names of the error messages, Extra arguments and recipes
    locales = build_locales()
    for field in F.panel_fields():
        for lang in LANGS:
            assert locales[field.name][lang]["label"].endswith(f" ({field.key})"), (field.name, lang)
    assert locales["arpo_rollout_n"]["en"]["label"] == "Group size M (arpo_rollout_n)"
    assert locales["rollout_temperature"]["en"]["label"] == "Sampling temperature (temperature)"


def test_repair_boxed_label_is_readable():
    # issue 24 low: the label read "Repair \x08oxed" (the escape of the corruption, not what is repaired)
    label = build_locales()["agentic_repair_boxed"]["en"]["label"]
    assert label == "Repair corrupted \\boxed (agentic_repair_boxed)" and "\\x08" not in label and "\x08" not in label


def test_skip_bad_rows_help_covers_agentic_sft():
    # issue 24 low: the field is shown for agentic_sft too, but its help said "RL rows"
    field = F.field_by_name("agentic_skip_bad_rows")
    assert "agentic_sft" in field.stages and "SFT trajectories" in field.help and "RL rows" not in field.help


def test_arpo_effective_values_list_only_the_keys_that_act():
    # issue 35: an `arpo` run's preview listed every aepo_* key (the arpo preset turns every AEPO mechanism off)
    rows = {key: (value, origin) for key, value, origin in F.effective_values("arpo", {})["rows"]}
    assert not [key for key in rows if key.startswith("aepo_")], rows
    assert "arpo_branch_alpha" not in rows  # acts only with arpo_branch_rule: deterministic
    assert rows["arpo_beam_size"] == (2, "preset") and rows["agentic_max_tool_calls"] == (3, "preset")
    # a mechanism switched on under arpo is listed with what it brings; a key set without effect is marked
    rows = {
        key: origin
        for key, _, origin in F.effective_values(
            "arpo", {"aepo_balanced_clip": True, "aepo_entropy_advantage_coef": 0.3}
        )["rows"]
    }
    assert rows["aepo_balanced_clip"] == "explicit" and rows["aepo_balanced_clip_scope"] == "preset"
    assert rows["aepo_entropy_advantage_coef"] == "no effect" and "aepo_premonitor_beta" not in rows
    # aepo (released): its switches are listed; the pre-monitoring keys, inert with dynamic rollouts off, are not
    rows = {key for key, _, _ in F.effective_values("aepo", {})["rows"]}
    assert {"aepo_dynamic_rollouts", "aepo_balanced_clip", "aepo_branch_penalty"} <= rows
    assert not rows & {"aepo_premonitor_beta", "aepo_premonitor_tokens", "aepo_entropy_advantage_coef"}


def test_async_keys_are_previewed_only_where_they_act():
    # a lockstep run on the hf engine: the correction and the server keys do nothing, so the preview leaves them out
    rows = {key: origin for key, _, origin in F.effective_values("arpo", {})["rows"]}
    assert rows["rl_max_staleness"] == "default" and rows["arpo_rollout_backend"] == "default"
    assert not {"rl_off_policy_correction", "rl_off_policy_cap", "arpo_server_urls", "arpo_server_timeout"} & set(rows)
    args = {
        "rl_max_staleness": 1,
        "arpo_rollout_backend": "vllm_server",
        "arpo_server_urls": "http://10.0.0.2:8000/v1",
    }
    rows = {key: origin for key, _, origin in F.effective_values("arpo", args)["rows"]}
    assert rows["rl_off_policy_correction"] == rows["rl_off_policy_cap"] == "default"
    assert rows["arpo_server_urls"] == "explicit" and rows["arpo_server_weight_transfer"] == "default"
    assert F.panel_args("arpo", {"rl_max_staleness": 1}) == {"rl_max_staleness": 1}


def test_help_texts_in_plain_words():
    # issue 35: help texts carried internal source paths (`...vllm_rollout_with_tools.py:237-555`) that overflowed
    # the field; the panel shows them without sources, hparams.py (and --help) keeps them
    locales = build_locales()
    for field in F.panel_fields():
        for lang in LANGS:
            info = locales[field.name][lang]["info"]
            assert not re.search(r"\.py\b|docs/|§|arXiv|RUC-NLPIR", info), (field.name, info)
    budget = locales["arpo_budget_fill"]["en"]["info"]
    assert "`per_round` (default): one per round" in budget and "as the paper describes." in budget, budget
    assert F.plain_help("x (a, see docs/a.md §1; b)") == "x (a, b)" and F.plain_help("y (docs/a.md).") == "y."
    assert F.plain_help("z (kept, as is).") == "z (kept, as is)."
