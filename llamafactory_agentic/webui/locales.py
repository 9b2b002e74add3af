# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Labels of the agentic panel in LLaMA-Board's languages (English and Chinese; the others show the English text).

Entries have LLaMA-Board's `LOCALES` shape, `{element name: {lang: {"label": ..., "info": ...}}}`, and are merged
into it, so LLaMA-Board's language switch relabels the panel like its own fields. A field's info is its help text
from the dataclass (the single source, in English; HTML-escaped, as gradio renders it as Markdown) followed by its
preset values per stage. A field's label ends with the `llamafactory-cli` key it sets, e.g. "Group size M
(arpo_rollout_n)": the key that error messages, Extra arguments, YAML recipes and the docs use.
"""

import html
from typing import Any

from .fields import panel_fields, preset_summary


LANGS = ("en", "ru", "zh", "ko", "ja")  # LLaMA-Board's language drop-down

FIELD_LABELS: dict[str, tuple[str, str]] = {  # element name: (English, Chinese)
    "arpo_rollout_n": ("Group size M", "组大小 M"),
    "arpo_initial_rollouts": ("Global rollouts N", "全局采样数 N"),
    "arpo_beam_size": ("Beam size", "分支束宽"),
    "arpo_branch_rule": ("Branch rule", "分支规则"),
    "arpo_branch_tau": ("Branch threshold τ", "分支阈值 τ"),
    "arpo_entropy_weight": ("Entropy weight β", "熵权重 β"),
    "arpo_budget_fill": ("Budget fill", "预算补齐方式"),
    "arpo_max_prompt_length": ("Prompt budget (tokens)", "提示长度上限（token）"),
    "arpo_max_response_length": ("Response budget R (tokens)", "回复预算 R（token）"),
    "arpo_rollout_batch_size": ("Prompts per rollout", "每次采样的提示数"),
    "arpo_rollout_backend": ("Rollout backend", "采样后端"),
    "arpo_hf_generation_batch_size": ("HF generation batch", "HF 生成批大小"),
    "rollout_temperature": ("Sampling temperature", "采样温度"),
    "rollout_top_p": ("Sampling top-p", "采样 Top-p"),
    "rollout_top_k": ("Sampling top-k", "采样 Top-k"),
    "arpo_rollout_log_ratio": ("Groups written to rollouts.jsonl", "写入 rollouts.jsonl 的组比例"),
    "arpo_val_max_samples": ("Validation prompts", "验证提示数"),
    "agentic_tool_config": ("Tool config file", "工具配置文件"),
    "agentic_search_backend": ("Search backend", "搜索后端"),
    "agentic_search_index": ("Local search index", "本地搜索索引"),
    "agentic_cache_path": ("Tool cache", "工具缓存"),
    "agentic_cache_mode": ("Cache mode", "缓存模式"),
    "agentic_max_tool_calls": ("Tool calls per trajectory", "每条轨迹的工具调用上限"),
    "agentic_python_timeout": ("Python timeout (s)", "Python 超时（秒）"),
    "agentic_tool_workers": ("Concurrent tool calls", "并发工具调用数"),
    "agentic_reward": ("Reward function", "奖励函数"),
    "agentic_reward_math": ("Math correctness", "数学题判分方式"),
    "agentic_reward_tool_bonus": ("Bonus for using both tools", "同时使用两种工具的奖励"),
    "rl_epsilon": ("Clip ε (low)", "裁剪 ε（下界）"),
    "rl_epsilon_high": ("Clip ε (high)", "裁剪 ε（上界）"),
    "rl_kl_coef": ("KL coefficient", "KL 系数"),
    "rl_dynamic_sampling": ("Dynamic sampling (drop equal-reward groups)", "动态采样（丢弃奖励全同的组）"),
    "rl_dynamic_sampling_max_batches": ("Dynamic sampling: max rollouts per update", "动态采样：每次更新最多采样批数"),
    "rl_entropy_coef": ("Entropy bonus", "熵奖励系数"),
    "aepo_variant": ("AEPO variant", "AEPO 变体"),
    "aepo_dynamic_rollouts": ("Entropy pre-monitoring", "熵预监测"),
    "aepo_branch_penalty": ("Consecutive-branch penalty λ", "连续分支惩罚 λ"),
    "aepo_branch_penalty_scope": ("Penalty scope", "惩罚范围"),
    "aepo_balanced_clip": ("Balanced clip", "熵平衡裁剪"),
    "aepo_balanced_clip_scope": ("Balanced clip scope", "平衡裁剪范围"),
    "aepo_entropy_advantage": ("Entropy-aware advantage", "熵感知优势"),
    "agentic_sft_mask_results": ("Mask tool results", "屏蔽工具结果"),
    "agentic_sft_check": ("Pre-run check", "训练前检查"),
    "agentic_tool_protocol": ("Tool-call protocol", "工具调用协议"),
    "agentic_skip_bad_rows": ("Skip bad rows", "跳过错误样本"),
    "agentic_repair_boxed": ("Repair corrupted \\boxed", "修复损坏的 \\boxed"),
}

OTHER_LABELS: dict[str, dict[str, tuple[str, str]]] = {  # element name: {property: (English, Chinese)}
    "agentic_tab": {
        "label": ("Agentic configurations (llamafactory-agentic)", "智能体训练参数设置 (llamafactory-agentic)")
    },
    "agentic_rollout_tab": {"label": ("Rollout", "采样 (Rollout)")},
    "agentic_tools_tab": {"label": ("Tools", "工具")},
    "agentic_reward_tab": {"label": ("Reward", "奖励")},
    "agentic_optim_tab": {"label": ("Optimisation", "优化")},
    "agentic_aepo_tab": {"label": ("AEPO", "AEPO")},
    "agentic_sft_tab": {"label": ("Agentic SFT", "智能体 SFT")},
    "agentic_data_tab": {"label": ("Data", "数据")},
    "agentic_check_btn": {"value": ("Run checks", "运行检查")},
    "rl_viewer": {"label": ("RL metrics", "强化学习指标")},
    "rollout_viewer_tab": {"label": ("Rollout viewer", "采样查看器")},
    "rollout_step": {
        "label": ("Rollout", "采样批次"),
        "info": ("A rollout from rollouts.jsonl of the output directory.", "输出目录中 rollouts.jsonl 的一次采样。"),
    },
    "rollout_refresh_btn": {"value": ("Refresh", "刷新")},
    "agentic_chat_tab": {"label": ("Tools (llamafactory-agentic)", "工具 (llamafactory-agentic)")},
    "agentic_chat_run_tools": {
        "label": ("Run tools", "执行工具"),
        "info": (
            "Answer with the agent loop of training: tool calls run in the training executor and sandbox.",
            "用训练时的智能体循环回答：工具调用在训练所用的执行器和沙箱中运行。",
        ),
    },
    "agentic_chat_tool_config": {
        "label": ("Tool config (agentic_tool_config)", "工具配置 (agentic_tool_config)"),
        "info": (
            "A YAML tool config, or the built-in python and search tools.",
            "YAML 工具配置，或内置的 python 和搜索工具。",
        ),
    },
    "agentic_chat_search_index": {
        "label": ("Local search index (agentic_search_index)", "本地搜索索引 (agentic_search_index)"),
        "info": ("For the built-in local search backend.", "用于内置的本地搜索后端。"),
    },
    "agentic_chat_max_calls": {
        "label": ("Tool calls per answer (agentic_max_tool_calls)", "每次回答的工具调用上限 (agentic_max_tool_calls)")
    },
    "agentic_chat_python_timeout": {
        "label": ("Python timeout (s) (agentic_python_timeout)", "Python 超时（秒） (agentic_python_timeout)")
    },
    "agentic_chat_submit_btn": {"value": ("Submit", "提交")},
    "agentic_eval_tab": {
        "label": ("Agentic evaluation (llamafactory-agentic eval)", "智能体评估 (llamafactory-agentic eval)")
    },
    "agentic_eval_config": {
        "label": ("Evaluation config", "评估配置"),
        "info": (
            "An evaluation YAML (evaluation/README.md); the fields below and the model above override it.",
            "评估 YAML（evaluation/README.md）；下方字段和上方模型会覆盖其中的值。",
        ),
    },
    "agentic_eval_preset": {
        "label": ("Preset (eval_preset)", "预设 (eval_preset)"),
        "info": (
            "paper: the papers' protocol; train_val: the training's validation.",
            "paper：论文协议；train_val：训练时的验证设置。",
        ),
    },
    "agentic_eval_benchmarks": {
        "label": ("Benchmarks (eval_benchmarks)", "基准 (eval_benchmarks)"),
        "info": ("Comma-separated registry names; empty: the config's.", "逗号分隔的注册名；留空则用配置中的。"),
    },
    "agentic_eval_runs": {
        "label": ("Runs (eval_runs)", "运行次数 (eval_runs)"),
        "info": ("Empty: the config's.", "留空则用配置中的。"),
    },
    "agentic_eval_max_new": {
        "label": ("Tokens per call (eval_max_new_tokens)", "每次生成 token 数 (eval_max_new_tokens)"),
        "info": ("Empty: the config's.", "留空则用配置中的。"),
    },
    "agentic_eval_output_dir": {
        "label": ("Output dir (eval_output_dir)", "输出目录 (eval_output_dir)"),
        "info": (
            "Under saves/MODEL/METHOD/, as LLaMA-Board's own.",
            "与 LLaMA-Board 相同，位于 saves/模型/方法/ 下。",
        ),
    },
    "agentic_eval_extra": {
        "label": ("More keys", "其他参数"),
        "info": (
            "key=value pairs, e.g. eval_batch_size=8 agentic_search_backend=replay",
            "key=value 对，例如 eval_batch_size=8",
        ),
    },
    "agentic_eval_btn": {"value": ("Run agentic evaluation", "运行智能体评估")},
    "agentic_eval_report": {"label": ("Report (report.html)", "报告 (report.html)")},
}

MESSAGES: dict[str, tuple[str, str]] = {  # key: (English, Chinese)
    "checks_title": ("Checks before Start", "启动前检查"),
    "checks_ok": ("No problems found.", "未发现问题。"),
    "checks_not_run": ("Press *Run checks*, *Preview command* or *Start*.", "点击“运行检查”、“预览命令”或“开始”。"),
    "error": ("error", "错误"),
    "warning": ("warning", "警告"),
    "info": ("note", "提示"),
    "fix": ("fix", "修复"),
    "start_blocked": (
        "The checks before Start found errors (see the agentic panel at the top):",
        "启动前检查发现错误（见上方智能体参数设置）：",
    ),
    "no_rollouts": (
        "No rollouts.jsonl in {path} yet (set *Groups written to rollouts.jsonl* above 0).",
        "{path} 中还没有 rollouts.jsonl（请将“写入 rollouts.jsonl 的组比例”设为大于 0）。",
    ),
    "rollout_running": (
        "{rollout} · round {round} · {active} active trajectories · {new_tokens} new tokens "
        "({total_tokens} in this rollout) · {elapsed}",
        "{rollout} · 第 {round} 轮 · {active} 条活跃轨迹 · 新增 {new_tokens} 个 token（本次采样共 {total_tokens}）· {elapsed}",
    ),
    "gaming_warnings": (
        "⚠ **Run monitor** (reward gaming, learning signal): {count} warning(s) in this run's trainer_log.jsonl (docs/plan.md §2)",
        "⚠ **运行监测**（奖励投机、学习信号）：本次运行的 trainer_log.jsonl 中有 {count} 条警告（docs/plan.md §2）",
    ),
    "gaming_warning": ("step {step}: {text}", "第 {step} 步：{text}"),
    "rollout_done": (
        "Last: {rollout}, {round} rounds, {total_tokens} new tokens in {elapsed}",
        "上次：{rollout}，{round} 轮，新增 {total_tokens} 个 token，用时 {elapsed}",
    ),
    # one numbering with the rollout viewer: the training step a rollout feeds (first step of it)
    "rollout_training": ("Rollout of step {step}", "第 {step} 步的采样"),
    "rollout_validation": ("Validation rollout after step {step}", "第 {step} 步后的验证采样"),
    "aborted_note": (
        "Aborted. The run was stopped before its end: the logged losses and metrics are those of the steps finished "
        "before the abort (none if it was stopped in its first rollout); no final model was saved, only the "
        "checkpoints written before.",
        "已中止。训练在结束前被停止：日志中的损失和指标来自中止前完成的步骤（若在第一次采样时中止则没有）；"
        "未保存最终模型，只有中止前写入的检查点。",
    ),
    "checks_stage_changed": (
        "The stage changed to `{stage}`: press *Run checks*, *Preview command* or *Start*.",
        "阶段已切换为 `{stage}`：请点击“运行检查”、“预览命令”或“开始”。",
    ),
    "plan_title": (
        "Run plan (`llamafactory-agentic plan`, docs/plan.md): predicted memory, time, search calls and disk",
        "运行计划（`llamafactory-agentic plan`，docs/plan.md）：预计显存、时间、搜索调用和磁盘",
    ),
    "plan_failed": ("Run plan not available: {error}", "无法给出运行计划：{error}"),
    "chat_running": ("Running the agent loop (tool calls included)...", "正在运行智能体循环（含工具调用）……"),
    "chat_failed": ("The answer with tools could not start: {error}", "无法开始带工具的回答：{error}"),
    "chat_trace_title": ("Last answer with tools", "上一次带工具的回答"),
    "eval_no_model": ("✖ Choose a model (Model path in the top row) first.", "✖ 请先在顶部选择模型路径。"),
    "eval_no_config": ("✖ No evaluation config at `{config}`.", "✖ `{config}` 处没有评估配置。"),
    "eval_running": ("⏳ `llamafactory-agentic eval` is running:", "⏳ `llamafactory-agentic eval` 运行中："),
    "eval_done": ("✔ Evaluation finished: results in `{path}`.", "✔ 评估完成：结果在 `{path}`。"),
    "eval_failed": (
        "✖ The evaluation ended with exit code {rc} (3: errors past eval_max_error_rate); output in `{path}`.",
        "✖ 评估以退出码 {rc} 结束（3：错误超过 eval_max_error_rate）；输出在 `{path}`。",
    ),
    "eval_report": ("Report: `{path}`", "报告：`{path}`"),
    "kept_values": (
        "Values you set stay and replace the `{preset}` preset: {values} (clear a field to use the preset).",
        "你设置的值保留并覆盖 `{preset}` 预设：{values}（清空字段即使用预设）。",
    ),
}


def message(key: str, lang: str | None, **kwargs: Any) -> str:
    r"""Text of `MESSAGES[key]` in `lang` (Chinese for `zh`, English otherwise), formatted with `kwargs`."""
    english, chinese = MESSAGES[key]
    return (chinese if lang == "zh" else english).format(**kwargs)


def _entry(texts: dict[str, tuple[str, str]]) -> dict[str, dict[str, str]]:
    return {lang: {prop: pair[1] if lang == "zh" else pair[0] for prop, pair in texts.items()} for lang in LANGS}


def build_locales() -> dict[str, dict[str, dict[str, str]]]:
    r"""Entries for LLaMA-Board's `LOCALES`: every panel field (label, info) and the panel's other elements.

    Raises:
        KeyError: a panel field has no label here.
    """
    locales = {}
    for field in panel_fields():
        english, chinese = (f"{label} ({field.key})" for label in FIELD_LABELS[field.name])
        # the info is rendered as Markdown: tags such as <result> in the help text must stay visible
        info = html.escape(" ".join(part for part in (field.help, preset_summary(field)) if part), quote=False)
        locales[field.name] = _entry({"label": (english, chinese), "info": (info, info)})
    for name, texts in OTHER_LABELS.items():
        locales[name] = _entry(texts)
    try:  # the chat's Submit button (it replaces LLaMA-Board's) keeps LLaMA-Board's label in every language
        from llamafactory.webui.locales import LOCALES

        if "submit_btn" in LOCALES:
            locales["agentic_chat_submit_btn"] = {lang: dict(text) for lang, text in LOCALES["submit_btn"].items()}
    except ImportError:  # LLaMA-Board's locales need gradio's extra
        pass
    return locales
