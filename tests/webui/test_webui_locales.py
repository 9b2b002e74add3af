# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Chinese texts of the plugin's LLaMA-Board fields and messages (issue 35: labels were translated, help texts and
check messages were not). English is the source; every field the plugin adds has a Chinese label and help text in
the entries merged into LLaMA-Board's `LOCALES`, and the checks, the no-learning-signal and reward-gaming warnings
are said in Chinese when the page is."""

import re
import string

import gradio as gr

from llamafactory_agentic.guards.gaming import scan_records
from llamafactory_agentic.webui import board_tabs, panel
from llamafactory_agentic.webui.checks import format_findings, run_checks
from llamafactory_agentic.webui.locales import MESSAGES, build_locales, message
from llamafactory_agentic.webui.monitor import gaming_warnings


CJK = re.compile(r"[\u4e00-\u9fff]")
FIELD_TYPES = (gr.Textbox, gr.Number, gr.Dropdown, gr.Checkbox, gr.Slider, gr.Radio)


def _plugin_fields() -> dict[str, object]:
    r"""Every input component the plugin adds: agentic panel (with Load recipe), monitor, Chat tools, Evaluate."""
    locales = build_locales()
    with gr.Blocks():
        elems = {**panel.build_panel(), **panel.build_monitor()}
        elems.update(board_tabs.build_chat_tools(locales))
        elems.update(board_tabs.build_eval_panel(locales))
    return {name: elem for name, elem in elems.items() if isinstance(elem, FIELD_TYPES)}


def test_every_plugin_field_has_a_chinese_label_and_help_text():
    locales = build_locales()
    fields = _plugin_fields()
    assert {"agentic_recipe", "arpo_rollout_n", "agentic_chat_search_topk", "agentic_eval_runs"} <= set(fields)
    missing = []
    for name in fields:
        entry = locales.get(name, {})
        zh, en = entry.get("zh", {}), entry.get("en", {})
        for prop in ("label", "info"):
            if not CJK.search(zh.get(prop) or "") or not en.get(prop):
                missing.append(f"{name}.{prop}")
        if zh.get("info") == en.get("info"):
            missing.append(f"{name}.info (the English text)")
    assert not missing, missing
    # the preset values follow the help text in both languages
    assert "预设：arpo 3 · aepo 6" in locales["agentic_max_tool_calls"]["zh"]["info"]
    assert "&lt;result&gt;" in locales["agentic_sft_mask_results"]["zh"]["info"]  # shown, not swallowed as HTML


def test_every_message_has_chinese_with_the_same_placeholders():
    for key, (english, chinese) in MESSAGES.items():
        names = {name for _, name, _, _ in string.Formatter().parse(chinese) if name}
        english_names = {name for _, name, _, _ in string.Formatter().parse(english) if name}
        assert CJK.search(chinese) or english == chinese == "{error}", key
        # the Chinese text may leave out a value that only the English grammar needs, and says a plural
        # ("3 optimiser updates") with the bare `count`; it adds no other value
        assert english == "{english}" or names - english_names <= {"count"}, (key, names - english_names)


def test_checks_before_start_in_chinese(tmp_path):
    args = {
        "model_name_or_path": str(tmp_path / "never_cold_started"),
        "output_dir": str(tmp_path / "out"),
        "agentic_search_index": str(tmp_path / "no_index"),
        "arpo_rollout_log_ratio": 0,
        "arpo_rolout_n": 4,  # a typo: unknown key
    }
    findings = run_checks("arpo", args)
    english, chinese = format_findings(findings, "en"), format_findings(findings, "zh")
    assert "is not a key of llamafactory-cli train" in english and "did you mean `arpo_rollout_n`?" in english
    assert "`arpo_rolout_n` 不是 llamafactory-cli train 的参数" in chinese, chinese
    assert "是否想写 `arpo_rollout_n`？" in chinese
    assert "本地搜索索引" in chinese and "处没有语料：每次搜索调用都会失败" in chinese
    assert (
        "没有在工具标签上冷启动过的迹象" in chinese and "请先用工具调用轨迹进行 `stage: agentic_sft` 训练" in chinese
    )
    assert "为 0：不会写入 rollouts.jsonl" in chinese
    for english_text in ("is not a key", "no corpus at", "shows no sign of a cold start", "the recipes use"):
        assert english_text not in chinese, english_text
    # the English texts are unchanged by the translation (the findings' attributes stay English)
    assert all(f.message and not CJK.search(f.subject + f.message + f.fix) for f in findings)
    # the cold-start text in the page says what the guard logs (guards/cold_start.py)
    cold = next(f for f in findings if "cold start" in f.message)
    assert cold.message.startswith(message("cold_start", "en", marker=cold.texts["message"].params["marker"])[:60])


def test_learning_signal_and_gaming_warnings_in_chinese(tmp_path):
    from llamafactory_agentic.guards.gaming import GamingMonitorCallback

    # a run whose groups are all identical from the start (the tiny never-cold-started policy: reward -1 everywhere)
    records = [
        {"current_steps": step, "reward/accuracy": 0.0, "reward/mean": -1.0, "reward/identical_groups": 1.0}
        for step in (1, 2)
    ]
    callback, logged = GamingMonitorCallback(), []
    for record in records:  # as the live run writes them
        state = type("State", (), {"log_history": [dict(record)], "global_step": record["current_steps"]})()
        callback.on_log(None, state, None)
        logged.append(state.log_history[-1])
    assert logged[1]["warning_details"][0]["pattern"] == "no_learning_signal"
    english, chinese = gaming_warnings(logged, "en"), gaming_warnings(logged, "zh")
    assert "no learning signal [no_learning_signal]" in english
    assert "没有学习信号 [no_learning_signal]：在前 2 次展开中（第 1-2 步），每组的奖励都完全相同" in chinese, chinese
    assert "奖励均值 -1, -1" in chinese and "Likely cause" not in chinese

    # every gaming pattern has its Chinese text (planted runs of tests/guards/test_gaming.py's kind)
    from guards.test_gaming import recorded_runs

    (raised,) = scan_records(recorded_runs("cpu")[("arpo", 0)], tool_bonus=0.1)
    record = {"current_steps": raised.step, "warnings": [raised.message()], "warning_details": [raised.detail()]}
    shown = gaming_warnings([record], "zh")
    assert "疑似奖励投机 [tool_calls_per_correct]" in shown and "每个正确回答的调用" in shown, shown
    assert "reward gaming?" not in shown
    # a log of an older version (no details) keeps its English text
    assert "reward gaming? [tool_calls_per_correct]" in gaming_warnings([{**record, "warning_details": None}], "zh")


def test_every_gaming_pattern_in_chinese():
    import random

    from guards.test_gaming import BASE, _series

    planted = {
        "length_flat_reward": dict(rollout__response_length=(200, 320, 20)),
        "format_only_reward": dict(reward__accuracy=(0.02, 0.02, 0.02), reward__mean=(0.3, 0.3, 0.05)),
        "identical_groups_rising": dict(reward__identical_groups=(0.3, 0.7, 0.1)),
        "repeated_tool_calls": dict(rollout__repeated_tool_calls_rate=(0.02, 0.3, 0.03)),
        "tool_calls_per_correct": dict(rollout__tool_calls_per_traj=(1.0, 1.8, 0.2)),
    }
    for pattern, change in planted.items():
        (raised,) = scan_records(_series(30, random.Random(0), **{**BASE, **change}))
        record = {"current_steps": raised.step, "warnings": [raised.message()], "warning_details": [raised.detail()]}
        shown = gaming_warnings([record], "zh")
        window = r"第 1-10 条展开记录（第 1-10 步）对比第 \d+-\d+ 条（第 \d+-\d+ 步）："
        assert re.search(rf"疑似奖励投机 \[{pattern}\]，{window}", shown), shown
        assert "Likely cause" not in shown and "{" not in shown, shown
