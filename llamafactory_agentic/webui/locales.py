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

from .fields import panel_fields, plain_help, preset_summary


LANGS = ("en", "ru", "zh", "ko", "ja")  # LLaMA-Board's language drop-down

FIELD_LABELS: dict[str, tuple[str, str]] = {  # element name: (English, Chinese)
    "arpo_rollout_n": ("Group size M", "组大小 M"),
    "arpo_initial_rollouts": ("Global rollouts N", "全局展开数 N"),
    "arpo_beam_size": ("Beam size", "分支束宽"),
    "arpo_branch_rule": ("Branch rule", "分支规则"),
    "arpo_branch_tau": ("Branch threshold τ", "分支阈值 τ"),
    "arpo_entropy_weight": ("Entropy weight β", "熵权重 β"),
    "arpo_budget_fill": ("Budget fill", "预算补齐方式"),
    "arpo_max_prompt_length": ("Prompt budget (tokens)", "提示长度上限（token）"),
    "arpo_max_response_length": ("Response budget R (tokens)", "回复预算 R（token）"),
    "arpo_rollout_batch_size": ("Prompts per rollout", "每次展开的提示数"),
    "arpo_rollout_backend": ("Rollout backend", "展开（rollout）后端"),
    "arpo_hf_generation_batch_size": ("HF generation batch", "HF 生成批大小"),
    "rollout_temperature": ("Sampling temperature", "采样温度"),
    "rollout_top_p": ("Sampling top-p", "采样 Top-p"),
    "rollout_top_k": ("Sampling top-k", "采样 Top-k"),
    "arpo_rollout_log_ratio": ("Groups written to rollouts.jsonl", "写入 rollouts.jsonl 的组比例"),
    "arpo_val_max_samples": ("Validation prompts", "验证提示数"),
    "rl_max_staleness": ("Max staleness k (asynchronous rollout)", "最大陈旧步数 k（异步展开）"),
    "rl_off_policy_correction": ("Off-policy correction", "离策略校正"),
    "rl_off_policy_cap": ("Importance weight cap", "重要性权重上限"),
    "arpo_server_urls": ("vLLM server URLs", "vLLM 服务地址"),
    "arpo_server_weight_transfer": ("Weight transfer to the server", "向服务传输权重的方式"),
    "arpo_server_timeout": ("Server request deadline (s)", "服务请求时限（秒）"),
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
    "rl_dynamic_sampling_max_batches": ("Dynamic sampling: max rollouts per update", "动态采样：每次更新最多展开批数"),
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

# Chinese help texts of the panel fields (the English ones come from the dataclass help, `fields.plain_help`)
FIELD_HELP_ZH: dict[str, str] = {
    "arpo_rollout_n": "组大小 M：每个提示的轨迹数，每组恰好 M 条。",
    "arpo_initial_rollouts": "每个提示先启动的全局展开（rollout）数 N；M - N 是分支和补齐的预算。N = M 即普通 GRPO 采样。",
    "arpo_beam_size": "每轮每条源轨迹最多分出 beam_size - 1 个分支。",
    "arpo_branch_rule": (
        "stochastic：以概率 clip(τ + β·ΔH) 分支（参考代码的做法）；deterministic：当 α + β·ΔH > τ 时分支（论文的描述）。"
    ),
    "arpo_branch_tau": "τ：基础分支概率（stochastic）或分支阈值（deterministic）。",
    "arpo_entropy_weight": "β：分支规则中熵变化 ΔH 的权重。",
    "arpo_budget_fill": (
        "某个提示已没有活跃轨迹、但组内不足 M 条时如何补充新的全局展开。per_round（默认）：每轮补一条，"
        "因此过早停止的策略需要多跑 M - N 轮；all_at_once：在该轮一次补齐剩余的 M - len(group) 条（论文的描述）。"
    ),
    "arpo_max_prompt_length": (
        "提示的最大 token 数（按模板渲染，含系统提示词和工具说明）；更长的提示不会被截断，见 arpo_overlong_prompt。"
    ),
    "arpo_max_response_length": "回复预算 R（token），包括工具返回的观察结果。",
    "arpo_rollout_batch_size": (
        "所有进程合计，每次展开的提示数。每次优化器更新使用 per_device_train_batch_size × gradient_accumulation_steps × "
        "进程数 个提示（每个提示 M 条轨迹），所以一次展开供多次更新使用（参考设置：128 个提示，8 次更新）。"
    ),
    "arpo_rollout_backend": (
        "展开所用的生成后端：hf（transformers，CPU 和 GPU 均可）、vllm（需额外安装，与训练共用 GPU）或 vllm_server"
        "（vLLM 自己的服务，地址见 arpo_server_urls；每次被展开用到的优化器更新之后推送权重）。"
    ),
    "arpo_hf_generation_batch_size": "hf 后端：一个批次中一起解码的轨迹数。",
    "rollout_temperature": "采样温度：调节下一个 token 的概率分布。",
    "rollout_top_p": "只保留累计概率达到 top_p 的最可能 token（核采样）。",
    "rollout_top_k": "top-k 过滤时保留的最高概率 token 数（0 表示不过滤）。",
    "arpo_rollout_log_ratio": "连同分支树一起写入输出目录 rollouts.jsonl 的组所占比例（0 表示不写该文件）。",
    "arpo_val_max_samples": "每次验证使用的提示数（贪心解码，每个提示一条轨迹，不分支）。留空表示全部。",
    "rl_max_staleness": (
        "异步展开：生产者用自己的一份权重，最多领先训练 k 个优化器步进行展开，使展开与更新重叠；超过 k 步的组被丢弃并"
        "计入 async/groups_dropped_stale。0 表示同步（逐步）展开。支持 hf 和 vllm_server 后端；单进程或 DDP/ZeRO-1/2 "
        "多进程（不支持 ZeRO-3 和 FSDP）。"
    ),
    "rl_off_policy_correction": (
        "由旧权重采样的 token 的校正方式（rl_max_staleness > 0 时）：tis（截断重要性采样，权重 "
        "min(pi_prox/pi_behav, rl_off_policy_cap)）、decoupled（解耦 PPO，权重不截断）或 none。对当前权重采样的 "
        "token 不起作用。"
    ),
    "rl_off_policy_cap": "tis 重要性权重 pi_prox/pi_behav 的上限（> 0）。",
    "arpo_server_urls": (
        "vllm_server 后端：展开服务的地址，多个用逗号分隔（如 http://127.0.0.1:8000/v1；因为在此明确写出，"
        "回环或内网地址也可访问）。"
    ),
    "arpo_server_weight_transfer": (
        "vllm_server 后端：权重如何到达服务。auto：取服务的 --weight-transfer-config 后端（nccl：服务有自己的 GPU；"
        "ipc：与训练共用 GPU），没有时用 disk（safetensors 写入 arpo_server_weight_dir，由 vLLM 的 reload_weights 加载）。"
    ),
    "arpo_server_timeout": "vllm_server 后端：一次生成请求或一次权重更新调用的总时限（秒）。",
    "agentic_tool_config": "列出工具的 YAML 文件（名称或类、参数、超时、重试次数、调用上限）。",
    "agentic_search_backend": "搜索后端：local（本地 BM25 索引）、replay（只用缓存）、web、retriever。",
    "agentic_search_index": (
        "本地搜索后端的索引目录，内含 corpus.jsonl 和 bm25s 索引，由 llamafactory-agentic index build 生成"
        "（默认：$AGENTIC_SEARCH_INDEX 或 ~/.cache/llamafactory_agentic）。"
    ),
    "agentic_cache_path": "持久化的工具缓存：SQLite 文件路径或 redis:// 地址。",
    "agentic_cache_mode": "缓存模式；offline 模式下未命中的调用返回“无结果”文本。",
    "agentic_max_tool_calls": "每条轨迹的工具调用上限（所有工具合计）。",
    "agentic_python_timeout": "每次代码执行的时间上限（秒）。",
    "agentic_tool_workers": "每个展开引擎同时进行的工具调用数。",
    "agentic_reward": "奖励函数：f1（参考实现：带格式检查和多工具奖励的 F1）、em、math，或 module:function 形式的导入路径。",
    "agentic_reward_math": "ability == math 的样本如何判对：token F1、math-verify 等价判断，或两者取大。",
    "agentic_reward_tool_bonus": (
        "内置奖励（f1、em、math）：答对且同时用了搜索和 python 时额外加的分。0.1 为参考实现的取值；0 表示关闭"
        "（若任务中的问题只需一种工具，这项奖励会鼓励无用的调用）。"
    ),
    "rl_epsilon": "裁剪下界 ε_low（PPO 的 token 比率；GSPO 的序列比率；CISPO 的重要性权重，1.0 表示无下界）。",
    "rl_epsilon_high": "PPO 裁剪上界 ε_high（留空：与 rl_epsilon 相同）。",
    "rl_kl_coef": "低方差 KL 惩罚的系数；为 0 时不加载参考模型。",
    "rl_entropy_coef": "熵奖励项的系数。",
    "rl_dynamic_sampling": (
        "DAPO 的动态采样：丢弃 M 个奖励全部相同的组（优势为 0，没有梯度），并从训练集中随机抽取更多提示继续展开，"
        "直到一次更新凑满 arpo_rollout_batch_size 个奖励不同的组，或已展开 rl_dynamic_sampling_max_batches 批"
        "（其余位置再用奖励相同的组补足）。会增加展开开销。"
    ),
    "rl_dynamic_sampling_max_batches": "开启 rl_dynamic_sampling 时，一次更新最多展开的生成批数（每批 arpo_rollout_batch_size 个提示，含第一批）。",
    "aepo_variant": "AEPO 预设：released（公开的脚本）或 paper（论文的描述）。",
    "aepo_dynamic_rollouts": "熵预监测：把每个提示的预算分配给全局展开和分支。",
    "aepo_branch_penalty": "连续分支惩罚 f(l) = max(0, 1 - λ·l) 中的 λ。ARPO 为 0。",
    "aepo_branch_penalty_scope": (
        "惩罚所计的连续分支数：lineage（所有预设；按每条轨迹的分支谱系计，与论文一致）或 question"
        "（公开代码按问题计数，分支会受同批次其他提示的影响；仅用于与公开实现逐位对比）。"
    ),
    "aepo_balanced_clip": "保留梯度的上界裁剪（取值为 1 + ε_high，但保留梯度）。",
    "aepo_balanced_clip_scope": "保留梯度的裁剪作用于所有 token（released）或仅高熵 token。",
    "aepo_entropy_advantage": "熵感知优势：A × (1 + a·z_t)。",
    "agentic_sft_mask_results": (
        "智能体 SFT：把工具结果（<result>...</result>，含标签）排除在损失之外。"
        "关闭时在工具结果上也训练，与参考实现的冷启动一致。"
    ),
    "agentic_sft_check": "智能体 SFT：训练前打印一条渲染后的样本（标出被屏蔽的片段），并先检查标签。",
    "agentic_tool_protocol": (
        "智能体 SFT 和强化学习展开（训练、验证、评估）的工具调用格式：inline_tags（ARPO 的 <tag>...</tag> 调用，"
        "观察结果放在 <result> 中）或 template（对话模板自带的 JSON 工具调用和工具消息，如 Qwen 的 "
        "<tool_call> / <tool_response>、Llama 3.1 的 JSON 调用）。"
    ),
    "agentic_skip_bad_rows": "跳过格式错误的样本（强化学习提示或智能体 SFT 轨迹）并计数，而不是在第一条出错时停止。",
    "agentic_repair_boxed": "加载时修复 ARPO 强化学习数据中被损坏成 \\x08oxed 的 \\boxed，并记录修复条数。",
}

OTHER_LABELS: dict[str, dict[str, tuple[str, str]]] = {  # element name: {property: (English, Chinese)}
    "agentic_tab": {
        "label": ("Agentic configurations (llamafactory-agentic)", "智能体训练参数设置 (llamafactory-agentic)")
    },
    "agentic_rollout_tab": {"label": ("Rollout", "展开 (Rollout)")},
    "agentic_tools_tab": {"label": ("Tools", "工具")},
    "agentic_async_tab": {"label": ("Asynchronous rollout and vLLM server", "异步展开与 vLLM 服务")},
    "agentic_reward_tab": {"label": ("Reward", "奖励")},
    "agentic_optim_tab": {"label": ("Optimisation", "优化")},
    "agentic_aepo_tab": {"label": ("AEPO", "AEPO")},
    "agentic_sft_tab": {"label": ("Agentic SFT", "智能体 SFT")},
    "agentic_data_tab": {"label": ("Data", "数据")},
    "agentic_check_btn": {"value": ("Run checks", "运行检查")},
    "agentic_recipe": {
        "label": ("Recipe", "配方 (recipe)"),
        "info": (
            "A shipped recipe (recipes/, the package's, the demo's) or a YAML file of the working directory.",
            "自带的配方（recipes/、插件包内、演示生成的）或工作目录中的 YAML 文件。",
        ),
    },
    "agentic_recipe_btn": {"value": ("Load recipe", "加载配方")},
    "rl_viewer": {"label": ("RL metrics", "强化学习指标")},
    "rollout_viewer_tab": {"label": ("Rollout viewer", "展开查看器")},
    "rollout_step": {
        "label": ("Rollout", "展开批次"),
        "info": ("A rollout from rollouts.jsonl of the output directory.", "输出目录中 rollouts.jsonl 中的一次展开。"),
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
        "label": ("Tool calls per answer (agentic_max_tool_calls)", "每次回答的工具调用上限 (agentic_max_tool_calls)"),
        "info": ("The answer stops calling tools after this many calls.", "达到该次数后，回答不再调用工具。"),
    },
    "agentic_chat_python_timeout": {
        "label": ("Python timeout (s) (agentic_python_timeout)", "Python 超时（秒） (agentic_python_timeout)"),
        "info": ("Wall-clock limit per code execution.", "每次代码执行的时间上限。"),
    },
    "agentic_chat_search_backend": {
        "label": ("Search backend (agentic_search_backend)", "搜索后端 (agentic_search_backend)"),
        "info": (
            "local: a BM25 index; replay: the tool cache only; web, retriever: a search service.",
            "local：本地 BM25 索引；replay：只用工具缓存；web、retriever：搜索服务。",
        ),
    },
    "agentic_chat_search_topk": {
        "label": ("Snippets per search (agentic_search_topk)", "每次搜索的片段数 (agentic_search_topk)"),
        "info": (
            "Search results put into the observation; use the value the model was trained with.",
            "放入观察结果的搜索片段数；请使用模型训练时的取值。",
        ),
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
            "key=value 形式的参数，例如 eval_batch_size=8 agentic_search_backend=replay",
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
        "{rollout} · 第 {round} 轮 · {active} 条活跃轨迹 · 新增 {new_tokens} 个 token（本次展开共 {total_tokens}）· {elapsed}",
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
    "rollout_training": ("Rollout of step {step}", "第 {step} 步的展开"),
    "rollout_validation": ("Validation rollout after step {step}", "第 {step} 步后的验证展开"),
    "aborted_note": (
        "Aborted. The run was stopped before its end: the logged losses and metrics are those of the steps finished "
        "before the abort (none if it was stopped in its first rollout); no final model was saved, only the "
        "checkpoints written before.",
        "已中止。训练在结束前被停止：日志中的损失和指标来自中止前完成的步骤（若在第一次展开时中止则没有）；"
        "未保存最终模型，只有中止前写入的检查点。",
    ),
    "aborted_saved": (
        "Aborted at step {step}. The trainer stopped after that step and saved its model in `{path}`; the logged "
        "losses and metrics are those of the steps up to it. {next}",
        "已在第 {step} 步中止。训练器在该步结束后停止，并把模型保存在 `{path}`；日志中的损失和指标来自此前的步骤。{next}",
    ),
    "aborted_next_resume": (
        "Start with this output directory resumes from `{checkpoint}`.",
        "使用此输出目录点击“开始”将从 `{checkpoint}` 恢复训练。",
    ),
    "aborted_next_new": (
        "It holds no checkpoint to resume from, so Start with this output directory is refused: choose a new output "
        "directory, and to continue from this model set Checkpoint path `{name}`.",
        "该目录没有可恢复的检查点，使用此输出目录“开始”会被拒绝：请选择新的输出目录；若要从此模型继续，请将检查点路径设为 `{name}`。",
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
    "effective_title": (
        "Effective values of the agentic keys (stage `{stage}`{preset})",
        "智能体参数的实际取值（阶段 `{stage}`{preset}）",
    ),
    "effective_preset": (", preset `{preset}`", "，预设 `{preset}`"),
    "origin_explicit": ("explicit", "显式设置"),
    "origin_preset": ("preset", "预设"),
    "origin_rl_epsilon": ("rl_epsilon", "取自 rl_epsilon"),
    "origin_default": ("default", "默认值"),
    "origin_no_effect": ("no effect", "不起作用"),
    "recipe_loaded": (
        "✔ Recipe `{path}` loaded: {board} fields of LLaMA-Board, {panel} agentic fields (the others back to their "
        "defaults); in Extra arguments: {extra}. Check the model path and press *Run checks*.",
        "✔ 已加载配方 `{path}`：LLaMA-Board 字段 {board} 个，智能体字段 {panel} 个（其余恢复默认）；附加参数中：{extra}。"
        "请核对模型路径并点击“运行检查”。",
    ),
    "recipe_failed": ("The recipe could not be loaded: {error}", "无法加载配方：{error}"),
    "chat_running": ("Running the agent loop (tool calls included)...", "正在运行智能体循环（含工具调用）……"),
    "chat_failed": ("The answer with tools could not start: {error}", "无法开始带工具的回答：{error}"),
    "chat_from_checkpoint": (
        "Tool settings and system prompt as the checkpoint was trained (`{path}`).",
        "工具设置和系统提示词取自检查点的训练配置（`{path}`）。",
    ),
    "chat_no_checkpoint_config": (
        "This model has no agentic_config.json: the tool settings are the fields' own.",
        "该模型没有 agentic_config.json：工具设置使用字段中的值。",
    ),
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


# The checks before Start (`webui.checks`): `{subject}`, `{message}` and `{fix}` of each finding. A `{error}` is a
# message of the code that found the problem (the plugin's validation, LLaMA-Factory's loader): it stays English.
CHECK_MESSAGES: dict[str, tuple[str, str]] = {
    "subject_arguments": ("arguments", "参数"),
    "subject_batch": ("batch sizes", "批大小"),
    "subject_sampling": ("sampling", "采样"),
    "subject_dataset": ("dataset `{name}`", "数据集 `{name}`"),
    "subject_output_dir": ("output directory", "输出目录"),
    "subject_tool_config": ("tool config `{path}`", "工具配置 `{path}`"),
    "subject_search_index": ("local search index", "本地搜索索引"),
    "error_text": ("{error}", "{error}"),
    "unknown_key": ("is not a key of llamafactory-cli train", "不是 llamafactory-cli train 的参数"),
    "unknown_key_close": ("did you mean `{close}`?", "是否想写 `{close}`？"),
    "unknown_key_remove": ("remove it from Extra arguments", "请从附加参数中删除它"),
    "value_error_fix": (
        "change the value in the agentic panel or Extra arguments",
        "请在智能体参数设置或附加参数中修改该值",
    ),
    "batch_error_fix": (
        "change Prompts per rollout, Group size M or the batch sizes",
        "请修改“每次展开的提示数”“组大小 M”或批大小",
    ),
    "batch_info": (
        "each rollout gives {prompts} x {group} trajectories for {updates}; one training step is one update",
        "每次展开产生 {prompts} × {group} 条轨迹，供 {count} 次优化器更新使用；一个训练步即一次更新",
    ),
    "sampling_fix_temperature": (
        "turn sampling on (do_sample) and set Temperature above 0 (the recipes use 1.0)",
        "请开启采样（do_sample）并把温度设为大于 0（配方使用 1.0）",
    ),
    "sampling_fix_top_p": (
        "set Top-p in (0, 1]; 1.0 turns the nucleus filter off (the recipes use 1.0)",
        "请把 Top-p 设在 (0, 1] 之间；1.0 表示不做核采样过滤（配方使用 1.0）",
    ),
    "sampling_fix_top_k": (
        "set Top-k to a whole number >= 0; 0 turns the top-k filter off (the recipes use 0)",
        "请把 Top-k 设为 >= 0 的整数；0 表示不做 top-k 过滤（配方使用 0）",
    ),
    "sampling_info": (
        "the rollout samples with {shown}; the recipes use temperature 1.0, top_p 1.0, top_k 0",
        "展开时的采样设置为 {shown}；配方使用 temperature 1.0、top_p 1.0、top_k 0",
    ),
    "log_ratio_zero": (
        "is 0: no rollouts.jsonl is written, so the rollout viewer will stay empty",
        "为 0：不会写入 rollouts.jsonl，展开查看器将保持为空",
    ),
    "log_ratio_fix": (
        "set Groups written to rollouts.jsonl above 0 (e.g. 0.1)",
        "请把“写入 rollouts.jsonl 的组比例”设为大于 0（例如 0.1）",
    ),
    "preset_override": (
        "is set to {value}, so the `{stage}` preset's {preset} does not apply",
        "已设为 {value}，因此 `{stage}` 预设中的 {preset} 不生效",
    ),
    "preset_override_fix": ("clear the field to use the preset", "清空该字段即可使用预设值"),
    "extra_wins": (
        "is set in the panel and in Extra arguments; Extra arguments wins",
        "在面板和附加参数中都设置了；以附加参数为准",
    ),
    "dataset_fix_choose": ("choose a dataset of the Data dir", "请选择数据目录中的数据集"),
    "dataset_ranking": ("is a ranking (preference) dataset", "是排序（偏好）数据集"),
    "dataset_not_rl": (
        "has `formatting: {formatting}`; stage `{stage}` needs `formatting: {needed}` (prompts with a ground truth: "
        "prompt, reward_model.ground_truth, data_source, ability)",
        "的格式为 `formatting: {formatting}`；阶段 `{stage}` 需要 `formatting: {needed}`（带标准答案的提示：prompt、"
        "reward_model.ground_truth、data_source、ability）",
    ),
    "dataset_not_sft": (
        "has `formatting: {formatting}`: prompts with a ground truth and no trajectory; agentic SFT trains on tool "
        "trajectories (`formatting: {needed}`, or sharegpt)",
        "的格式为 `formatting: {formatting}`：只有带标准答案的提示、没有轨迹；智能体 SFT 需要在工具调用轨迹上训练"
        "（`formatting: {needed}` 或 sharegpt）",
    ),
    "dataset_fix_fitting": ("choose {names}", "请选择 {names}"),
    "dataset_fix_any": ("choose a dataset that fits", "请选择格式匹配的数据集"),
    "dataset_remote": (
        "comes from {source}; its rows are checked when the run loads them",
        "来自 {source}；其样本在训练加载时才检查",
    ),
    "dataset_unreadable": ("cannot be read: {error}", "无法读取：{error}"),
    "dataset_unreadable_fix": ("fix dataset_info.json", "请修正 dataset_info.json"),
    "rows_skipped": ("{malformed} ({rows}) will be skipped", "{count} 条格式错误的样本（{rows}）将被跳过"),
    "rows_bad": ("{malformed} ({rows}); first: {first}", "{count} 条格式错误的样本（{rows}）；第一条：{first}"),
    "rows_bad_fix": (
        "fix the rows in the file, or tick *Skip bad rows* (agentic_skip_bad_rows) to drop them",
        "请修正文件中的这些样本，或勾选“跳过错误样本”（agentic_skip_bad_rows）将其丢弃",
    ),
    "format_wrong": (
        "is registered as `formatting: {formatting}`, but {found}: the {looks} (columns: {columns}){detail}",
        "注册的格式为 `formatting: {formatting}`，但{found}：{looks}（列：{columns}）{detail}",
    ),
    "format_looks": ("rows look like `{looks}`", "样本看起来是 `{looks}` 格式"),
    "format_looks_unknown": ("rows have another format", "样本是其他格式"),
    "format_none_valid": (
        "none of its {total} rows is a valid `{formatting}` row",
        "其 {total} 条样本中没有一条是合法的 `{formatting}` 样本",
    ),
    "format_none_detail": (
        "; row {row}: {problem}. Skip bad rows would leave no row to train on",
        "；第 {row} 行：{problem}。跳过错误样本后将没有可训练的样本",
    ),
    "format_other": ("its {total} rows are not `{formatting}` rows", "其 {total} 条样本不是 `{formatting}` 样本"),
    "format_fix_register": (
        'register it with the format of its rows (`"formatting": "{looks}"` in dataset_info.json) and choose it for a '
        "stage that trains on that format, or choose a dataset whose rows are `{formatting}` rows",
        '请按样本的实际格式注册（在 dataset_info.json 中写 `"formatting": "{looks}"`），并在使用该格式的阶段中选择它；'
        "或选择样本为 `{formatting}` 格式的数据集",
    ),
    "format_fix_file": (
        "fix the file, or its `formatting` and `columns` in dataset_info.json (see data/README.md)",
        "请修正文件，或修正 dataset_info.json 中的 `formatting` 和 `columns`（见 data/README.md）",
    ),
    "output_fix": ("choose a new output directory", "请选择新的输出目录"),
    "output_fix_suggest": (
        "choose a new output directory, e.g. `{suggestion}`",
        "请选择新的输出目录，例如 `{suggestion}`",
    ),
    "output_is_model": (
        "`{path}` is the model the run starts from; training would overwrite it",
        "`{path}` 正是本次训练的起始模型；训练会覆盖它",
    ),
    "output_other_stage": (
        "`{path}` holds a `{previous}` run; a `{stage}` run there would resume its checkpoints",
        "`{path}` 中有一次 `{previous}` 训练；在这里进行 `{stage}` 训练会从它的检查点恢复",
    ),
    "output_other_stage_fix": (
        "{base} (start from it with Checkpoint path `{name}`)",
        "{base}（若要从它开始，请把检查点路径设为 `{name}`）",
    ),
    "output_saved_model": (
        "`{path}` holds a saved model{saved} and no complete checkpoint to resume from: LLaMA-Factory refuses to train "
        "there (it asks for `overwrite_output_dir`)",
        "`{path}` 中有已保存的模型{saved}，但没有可恢复的完整检查点：LLaMA-Factory 会拒绝在这里训练"
        "（它会要求设置 `overwrite_output_dir`）",
    ),
    "output_saved_step": (" (step {step})", "（第 {step} 步）"),
    "output_saved_model_fix": (
        "{base} (to continue from that model, set Checkpoint path `{name}`)",
        "{base}（若要从该模型继续，请把检查点路径设为 `{name}`）",
    ),
    "output_aborted": (
        "`{path}` holds a run stopped at step {step} of {max_steps} (aborted); Start resumes it from `{checkpoint}`",
        "`{path}` 中有一次在第 {step}/{max_steps} 步中止的训练；“开始”会从 `{checkpoint}` 恢复它",
    ),
    "output_aborted_fix": ("{base} to start a new run instead", "{base}，即可开始新的训练"),
    "output_finished": (
        "`{path}` holds a finished run ({steps}); Start would resume it from its last checkpoint and train on past its "
        "end instead of starting a new run",
        "`{path}` 中有一次已完成的训练（{steps}）；“开始”会从它最后的检查点恢复，越过原定终点继续训练，而不是开始新的训练",
    ),
    "output_steps_of": ("step {step} of {max_steps}", "第 {step}/{max_steps} 步"),
    "output_steps": ("step {step}", "第 {step} 步"),
    "output_finished_fix": (
        "{base} (or raise Max steps / Epochs on purpose to continue it)",
        "{base}（如确实要继续训练，请调大最大步数或训练轮数）",
    ),
    "tool_config_error": ("does not load: {error}", "无法加载：{error}"),
    "tool_config_fix": (
        "fix the file (see recipes/tools/ for examples) or clear Tool config file",
        "请修正该文件（示例见 recipes/tools/），或清空“工具配置文件”",
    ),
    "search_no_corpus": (
        "no corpus at `{corpus}`: every search call would fail (`agentic_search_index`, default "
        "`$AGENTIC_SEARCH_INDEX` or ~/.cache/llamafactory_agentic/search_index)",
        "`{corpus}` 处没有语料：每次搜索调用都会失败（`agentic_search_index`，默认为 `$AGENTIC_SEARCH_INDEX` "
        "或 ~/.cache/llamafactory_agentic/search_index）",
    ),
    "search_no_corpus_fix": (
        "write your documents to `{corpus}` (one JSON object per line with a `text` field; the BM25 index is built at "
        "the first search), or build it from a recorded search cache with `llamafactory-agentic index build "
        "--cache-json <your cache>.json --output {folder}`, or set Local search index to an existing index, or choose "
        "another Search backend (replay, web, retriever)",
        "请把你的文档写入 `{corpus}`（每行一个带 `text` 字段的 JSON 对象；BM25 索引在第一次搜索时建立），或用 "
        "`llamafactory-agentic index build --cache-json <你的缓存>.json --output {folder}` 从已记录的搜索缓存建立，"
        "或把“本地搜索索引”设为已有的索引，或选择其他搜索后端（replay、web、retriever）",
    ),
    "bf16_missing": (
        "is set (Compute type bf16) but this machine has no device with bf16 support (no CUDA GPU of compute capability "
        '8.0 or newer): the training process would stop with "Your setup doesn\'t support bf16/gpu"',
        "已开启（计算类型 bf16），但本机没有支持 bf16 的设备（没有计算能力 8.0 及以上的 CUDA GPU）：训练进程会以 "
        '"Your setup doesn\'t support bf16/gpu" 报错停止',
    ),
    "bf16_fix": (
        "choose Compute type fp32 (or fp16 on an older GPU)",
        "请把计算类型改为 fp32（较旧的 GPU 可用 fp16）",
    ),
    "cold_start": (
        "shows no sign of a cold start on the tool tags (no {marker} from `stage: agentic_sft` and no "
        "agentic_config.json of an RL run next to it). RL from a model that never writes `<search>`, `<python>`, "
        "`<answer>` blocks usually has no learning signal: every trajectory fails the format gate, every group's "
        "rewards are equal and every advantage is 0.",
        "没有在工具标签上冷启动过的迹象（既没有 `stage: agentic_sft` 写下的 {marker}，旁边也没有强化学习训练的 "
        "agentic_config.json）。从一个从不写 `<search>`、`<python>`、`<answer>` 块的模型开始强化学习，通常没有学习"
        "信号：每条轨迹都通不过格式检查，每组的奖励都相同，所有优势都为 0。",
    ),
    "cold_start_fix": (
        "train `stage: agentic_sft` on tool trajectories first and start RL from its output_dir (docs/tutorial.md). If "
        "the model was cold-started elsewhere (e.g. a released ARPO checkpoint), ignore this.",
        "请先用工具调用轨迹进行 `stage: agentic_sft` 训练，再从它的 output_dir 开始强化学习（docs/tutorial.md）。"
        "如果模型已在别处冷启动过（例如已发布的 ARPO 检查点），可忽略此警告。",
    ),
}
MESSAGES.update(CHECK_MESSAGES)


# The run monitor's warnings (`guards.gaming`) in the page: English is the message the run logged (`{english}`), the
# other language is said again from the numbers the log keeps beside it (`warning_details`).
_WINDOW_ZH = "第 1-{w} 条展开记录（第 {first}-{wth} 步）对比第 {start}-{n} 条（第 {recent}-{last} 步）"
GAMING_MESSAGES: dict[str, tuple[str, str]] = {
    "gaming_no_learning_signal_identical": (
        "{english}",
        "没有学习信号 [no_learning_signal]：在前 {n} 次展开中（第 {first}-{last} 步），每组的奖励都完全相同"
        "（奖励均值 {rewards}）。可能原因：所有优势都为 0，策略梯度为 0，训练不会学到任何东西。通常是策略从未在工具标签上"
        "冷启动过（每个回答都通不过格式检查，奖励处处为 -1）；或者奖励无法区分不同轨迹（全部答对，或奖励函数返回常数）。"
        "修复：先用工具调用轨迹进行 `stage: agentic_sft` 冷启动（docs/tutorial.md）；查看几条轨迹"
        "（arpo_rollout_log_ratio > 0，rollouts.jsonl）找出它们得分相同的原因；rl_dynamic_sampling: true 只保留奖励不同的组。",
    ),
    "gaming_no_learning_signal_grad_norm": (
        "{english}",
        "没有学习信号 [no_learning_signal]：前 {n} 个优化器步（第 {first}-{last} 步）的 grad_norm 都为 0。"
        "可能原因：所有优势都为 0，策略梯度为 0，训练不会学到任何东西。通常是策略从未在工具标签上冷启动过"
        "（每个回答都通不过格式检查，奖励处处为 -1）；或者奖励无法区分不同轨迹（全部答对，或奖励函数返回常数）。"
        "修复：先用工具调用轨迹进行 `stage: agentic_sft` 冷启动（docs/tutorial.md）；查看几条轨迹"
        "（arpo_rollout_log_ratio > 0，rollouts.jsonl）找出它们得分相同的原因；rl_dynamic_sampling: true 只保留奖励不同的组。",
    ),
    "gaming_tool_calls_per_correct": (
        "{english}",
        "疑似奖励投机 [tool_calls_per_correct]，" + _WINDOW_ZH + "：每条轨迹的工具调用 {calls_before:.2f} → "
        "{calls_after:.2f}（t = {t:.1f}），每个正确回答的调用 {per_correct_before:.2f} → {per_correct_after:.2f}，"
        "准确率 {acc_before:.2f} → {acc_after:.2f}（持平）。可能原因：奖励为回答并不需要的工具调用付了分"
        "（例如在 python 之前做一次什么也找不到的搜索）。参数：agentic_reward_tool_bonus（0 表示关闭同时使用两种工具的"
        "额外奖励），或按调用次数给分的自定义奖励。",
    ),
    "gaming_length_flat_reward": (
        "{english}",
        "疑似奖励投机 [length_flat_reward]，" + _WINDOW_ZH + "：回复长度 {length_before:.0f} → {length_after:.0f} 个 "
        "token（t = {t:.1f}），奖励 {reward_before:.3f} → {reward_after:.3f}（持平）。可能原因：回复变长却没有换来奖励："
        "更长的推理或更多回答用不到的工具输出，或损失偏向长回复。参数：arpo_max_response_length（更紧的预算）、"
        "agentic_max_tool_calls。",
    ),
    "gaming_format_only_reward": (
        "{english}",
        "疑似奖励投机 [format_only_reward]，" + _WINDOW_ZH + "：{format_ok:.0%} 的轨迹通过格式检查，奖励为 "
        "{reward:.3f}，但只有 {accuracy:.1%} 的答案正确（最近窗口）。可能原因：奖励为格式正确但答错的回答付了分"
        "（错误答案的部分 F1、格式项，或错误答案上的工具奖励）。参数：agentic_reward（用 em 代替 f1）或自定义奖励函数。",
    ),
    "gaming_identical_groups_rising": (
        "{english}",
        "疑似奖励投机 [identical_groups_rising]，" + _WINDOW_ZH + "：奖励全部相同的组 {before:.0%} → {after:.0%}"
        "（t = {t:.1f}）。可能原因：越来越多的组被所有轨迹一致答对（或答错），不再提供梯度；奖励饱和（全部答对，"
        "或都拿到同样的额外奖励）时会这样。参数：rl_dynamic_sampling: true（替换奖励相同的组）、更难的数据，或 "
        "arpo_rollout_n。",
    ),
    "gaming_repeated_tool_calls": (
        "{english}",
        "疑似奖励投机 [repeated_tool_calls]，" + _WINDOW_ZH + "：重复同一轨迹中先前调用的工具调用 {before:.0%} → "
        "{after:.0%}（t = {t:.1f}）。可能原因：重复相同的查询只增加调用次数（和搜索 API 费用），不带来新信息："
        "按调用次数给分的奖励，或陷入循环的策略。参数：agentic_reward_tool_bonus、agentic_max_tool_calls。",
    ),
}
MESSAGES.update(GAMING_MESSAGES)


class Text:
    r"""A message of `MESSAGES` with its values, shown in the language of the page (`str()` gives the English text).

    A value that is itself a `Text` is shown in the same language (e.g. a fix built on a shorter fix).
    """

    def __init__(self, key: str, **params: Any) -> None:
        r"""`key`: an entry of `MESSAGES` (KeyError if none); `params`: the values its placeholders take."""
        if key not in MESSAGES:
            raise KeyError(f"no message `{key}` in webui.locales.MESSAGES")
        self.key, self.params = key, params

    def show(self, lang: str | None) -> str:
        r"""The text in `lang` (Chinese for `zh`, English otherwise)."""
        return message(self.key, lang, **self.params)

    def __str__(self) -> str:
        r"""The English text (the source)."""
        return self.show("en")

    def __repr__(self) -> str:
        r"""`Text('key', {params})`."""
        return f"Text({self.key!r}, {self.params!r})"


def message(key: str, lang: str | None, **kwargs: Any) -> str:
    r"""Text of `MESSAGES[key]` in `lang` (Chinese for `zh`, English otherwise), formatted with `kwargs`."""
    english, chinese = MESSAGES[key]
    shown = {name: value.show(lang) if isinstance(value, Text) else value for name, value in kwargs.items()}
    return (chinese if lang == "zh" else english).format(**shown)


def _entry(texts: dict[str, tuple[str, str]]) -> dict[str, dict[str, str]]:
    return {lang: {prop: pair[1] if lang == "zh" else pair[0] for prop, pair in texts.items()} for lang in LANGS}


def build_locales() -> dict[str, dict[str, dict[str, str]]]:
    r"""Entries for LLaMA-Board's `LOCALES`: every panel field (label, info) and the panel's other elements.

    Raises:
        KeyError: a panel field has no label or no Chinese help text here.
    """
    locales = {}
    for field in panel_fields():
        english, chinese = (f"{label} ({field.key})" for label in FIELD_LABELS[field.name])
        # the info is rendered as Markdown: tags such as <result> in the help text must stay visible
        info = html.escape(
            " ".join(part for part in (plain_help(field.help), preset_summary(field)) if part), quote=False
        )
        info_zh = html.escape(
            " ".join(part for part in (FIELD_HELP_ZH[field.name], preset_summary(field, "预设：")) if part),
            quote=False,
        )
        locales[field.name] = _entry({"label": (english, chinese), "info": (info, info_zh)})
    for name, texts in OTHER_LABELS.items():
        locales[name] = _entry(texts)
    try:  # the chat's Submit button (it replaces LLaMA-Board's) keeps LLaMA-Board's label in every language
        from llamafactory.webui.locales import LOCALES

        if "submit_btn" in LOCALES:
            locales["agentic_chat_submit_btn"] = {lang: dict(text) for lang, text in LOCALES["submit_btn"].items()}
    except ImportError:  # LLaMA-Board's locales need gradio's extra
        pass
    return locales
