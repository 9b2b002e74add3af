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

"""The plugin's hyper-parameters.

`AgenticArguments` is mixed into LLaMA-Factory's `FinetuningArguments` by the activation hook, so every key below is
accepted in a recipe YAML and on the command line next to LLaMA-Factory's own keys. Prefixes follow
`docs/algorithms.md`: `arpo_*` rollout and advantage (shared by ARPO and AEPO), `aepo_*` AEPO only,
`agentic_*` tools, data and reward, `rl_*` optimisation.

Keys whose default depends on the preset of the stage (docs/algorithms.md §5.5) default to `None` here and are filled
by `llamafactory_agentic.train.presets.resolve_presets`, so an explicit value in a recipe always wins.

This module imports nothing heavy (no torch, no LLaMA-Factory): it is loaded while LLaMA-Factory's parser is built.
"""

import types
import typing
from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal


# ---------------------------------------------------------------- tool defaults (docs/algorithms.md §7.1)
# Declared once: the `agentic_*` tool fields below are declared with them, and the classes of
# `llamafactory_agentic/tools` take them as their default arguments, so a tool built on its own (a test, a notebook,
# the standalone `llamafactory-agentic tool` command) behaves as in a run with default keys.
PYTHON_TIMEOUT_S = 120.0  # agentic_python_timeout
PYTHON_MAX_OUTPUT_CHARS = 4000  # agentic_python_max_output_chars
PYTHON_ISOLATION = "auto"  # agentic_python_isolation
PYTHON_MIN_ISOLATION = "unprivileged"  # agentic_python_min_isolation
SEARCH_BACKEND = "local"  # agentic_search_backend
SEARCH_TOPK = 10  # agentic_search_topk
SEARCH_SNIPPET_CHARS = 1000  # agentic_search_snippet_chars
CACHE_MODE = "read_write"  # agentic_cache_mode
CACHE_TOOLS = "search"  # agentic_cache_tools
# The two stage-dependent tool keys default to None below and get their value from the stage preset; these are the
# `arpo` preset's values (`train/presets.py` uses them), which the tools layer uses where no preset was resolved.
TOOL_RETRIES = 3  # agentic_tool_retries
TOOL_WORKERS = 64  # agentic_tool_workers
JUDGE_TIMEOUT_S = 120.0  # agentic_reward_judge_timeout (and eval_judge_timeout): seconds per judge request, whole
JUDGE_RETRIES = 3  # agentic_reward_judge_retries (and eval_judge_retries): attempts per judge call
REWARD_TOOL_BONUS = 0.1  # agentic_reward_tool_bonus (also the reward functions' default argument)
REWARD_TIMEOUT_S = 60.0  # agentic_reward_timeout (also the reward objects' default, docs/rewards.md §3)
REWARD_WORKERS = 1  # agentic_reward_workers (also the reward objects' default)
MCP_MAX_RESULT_BYTES = 4 * 1024 * 1024  # `max_result_bytes` of an `mcp_servers` entry (docs/tools.md "MCP servers")


@dataclass
class AgenticArguments:
    r"""Arguments of the agentic stages (`agentic_sft`, `arpo`, `aepo`)."""

    # ---------------------------------------------------------------- rollout (ARPO, docs/algorithms.md §3)
    arpo_rollout_n: int = field(
        default=16,
        metadata={"help": "Group size M: trajectories per prompt. Every group has exactly M members."},
    )
    arpo_initial_rollouts: int | None = field(
        default=None,
        metadata={
            "help": "Global rollouts N started per prompt; M - N is the branch/fill budget. N = M is plain GRPO "
            "sampling (RUC-NLPIR/ARPO issue 22). Preset default: 8 (arpo, aepo), M (`arpo_variant: grpo`)."
        },
    )
    arpo_variant: Literal["arpo", "grpo"] = field(
        default="arpo",
        metadata={
            "help": "Preset of `stage: arpo`: `arpo` (entropy-guided branching) or `grpo` (the baseline of both papers: "
            "M independent trajectories per prompt, N = M, no branching; same tools, rewards, loss and logging)."
        },
    )
    arpo_budget_fill: Literal["per_round", "all_at_once"] = field(
        default="per_round",
        metadata={
            "help": "How the budget fill adds fresh global rollouts to a prompt that has no active trajectory left "
            "while its group is short of M. `per_round` (default, reference code RUC-NLPIR/ARPO "
            "`ARPO/verl_arpo_entropy/verl/workers/rollout/vllm_rollout/vllm_rollout_with_tools.py:237-555`, "
            "docs/algorithms.md §3.4): one per round, so a policy that stops early needs M - N extra rounds. "
            "`all_at_once`: all M - len(group) remaining rollouts in that round, as the paper describes "
            "(arXiv 2507.19849 section 3.1)."
        },
    )
    arpo_beam_size: int | None = field(
        default=None,
        metadata={"help": "At most `beam_size - 1` branches per source per round. Preset default: 2."},
    )
    arpo_branch_rule: Literal["stochastic", "deterministic"] | None = field(
        default=None,
        metadata={
            "help": "`stochastic` (reference code: branch with probability clip(tau + beta * dH)) or "
            "`deterministic` (paper: branch iff (alpha + beta * dH) > tau). Preset default: stochastic."
        },
    )
    arpo_branch_tau: float | None = field(
        default=None,
        metadata={"help": "tau: base branch probability (stochastic) or threshold (deterministic). Preset: 0.5."},
    )
    arpo_branch_alpha: float = field(
        default=0.5,
        metadata={"help": "alpha of the deterministic branching rule (arXiv 2507.19849 App. C.2)."},
    )
    arpo_entropy_weight: float | None = field(
        default=None,
        metadata={"help": "beta: weight of the entropy change dH in the branching rule. Preset default: 0.2."},
    )
    arpo_entropy_source: Literal["topk", "full"] | None = field(
        default=None,
        metadata={
            "help": "`topk`: round entropy from the k most likely log-probs (reference approximation); `full`: exact "
            "full-vocabulary entropy. Preset default: topk."
        },
    )
    arpo_entropy_topk: int | None = field(
        default=None,
        metadata={"help": "k of the `topk` entropy source. Preset default: 10."},
    )
    arpo_entropy_tokens: int | None = field(
        default=None,
        metadata={"help": "Leading tokens of a round used for its entropy. Preset default: 20."},
    )
    arpo_advantage_attribution: str | None = field(
        default=None,
        metadata={
            "help": "Advantage estimator, by its name in the registry (`llamafactory_agentic.algorithms."
            "register_advantage_estimator`): `soft`: plain GRPO over the group, branches included (reference, "
            "default). `hard`: tokens of a shared prefix get the mean advantage of every trajectory that contains "
            "them. Or one you registered before training. Preset default: soft."
        },
    )
    arpo_hard_dedup: bool = field(
        default=False,
        metadata={"help": "With hard attribution, keep each shared segment in one row only (weight 1 instead of d)."},
    )
    arpo_max_prompt_length: int = field(
        default=1536,
        metadata={
            "help": "Longest prompt in tokens (system prompt and tool instructions included, rendered with the "
            "template); longer prompts are never cut, see `arpo_overlong_prompt`."
        },
    )
    arpo_overlong_prompt: Literal["skip", "error"] = field(
        default="skip",
        metadata={
            "help": "A prompt longer than `arpo_max_prompt_length`: `skip` drops the row and logs a count naming the "
            "first rows (file and row); `error` stops before training with the file, the row and the length."
        },
    )
    arpo_max_response_length: int = field(
        default=4096,
        metadata={"help": "Response budget R in tokens, observations included."},
    )
    arpo_rollout_backend: Literal["hf", "vllm", "vllm_server"] = field(
        default="hf",
        metadata={
            "help": "Generation backend of the rollout: `hf` (transformers, CPU and GPU), `vllm` (extra, colocated) or "
            "`vllm_server` (vLLM's own server at `arpo_server_urls`, weights pushed after each optimiser step that a "
            "rollout reads; docs/scaling.md)."
        },
    )
    arpo_rollout_batch_size: int = field(
        default=128,
        metadata={
            "help": "Prompts per rollout step over all ranks. Each optimiser update takes "
            "`per_device_train_batch_size * gradient_accumulation_steps * world_size` prompts (times M "
            "trajectories) of them, so one rollout feeds several updates (reference: 128 prompts, 8 updates)."
        },
    )
    arpo_hf_prefix_cache: bool = field(
        default=True,
        metadata={"help": "hf backend: reuse the shared prefix's KV cache when a branch is created."},
    )
    arpo_hf_generation_batch_size: int = field(
        default=64,
        metadata={"help": "hf backend: trajectories decoded together in one batch."},
    )
    arpo_hf_lora_merge: Literal["gpu", "cpu", "off"] = field(
        default="gpu",
        metadata={
            "help": "hf backend with a LoRA policy: merge the adapters into the base weights for the rollout (decode "
            "at the speed of the plain model). `gpu`: merged copies of the adapted weights for the rollout (+2 bytes "
            "per adapted weight); `cpu`: merge in place and restore the originals bit for bit from a pinned CPU copy "
            "(no extra GPU memory); `off`: decode through the unmerged adapters."
        },
    )
    arpo_rollout_schedule: Literal["rounds", "continuous"] = field(
        default="rounds",
        metadata={
            "help": "`rounds`: every round waits for all active trajectories (the reference loop). `continuous` "
            "(hf backend): a trajectory whose round ends gets its tool result, branch decision and next round at "
            "once, and a freed KV slot is refilled at once by waiting work (next rounds, branches, fills, further "
            "prompts); same group semantics (docs/algorithms.md §3.4)."
        },
    )
    arpo_vllm_gpu_memory_utilization: float = field(
        default=0.6,
        metadata={"help": "vllm backend: share of GPU memory for the colocated engine (reference: 0.6-0.7)."},
    )
    arpo_vllm_enable_sleep_mode: bool = field(
        default=True,
        metadata={"help": "vllm backend: release the engine's memory during the optimisation phase."},
    )
    arpo_server_urls: str | None = field(
        default=None,
        metadata={
            "help": "vllm_server backend: the rollout servers' URLs, comma-separated (`http://127.0.0.1:8000/v1`; a "
            "loopback or private address is reached because it is named here)."
        },
    )
    arpo_server_api_key: str | None = field(
        default=None,
        metadata={"help": "vllm_server backend: the servers' API key (`vllm serve --api-key`), None: none."},
    )
    arpo_server_timeout: float = field(
        default=600.0,
        metadata={"help": "vllm_server backend: seconds for one generation request or weight-update call, whole."},
    )
    arpo_server_weight_transfer: Literal["auto", "nccl", "ipc", "disk"] = field(
        default="auto",
        metadata={
            "help": "vllm_server backend: how weights reach the server. `auto`: the server's `--weight-transfer-config` "
            "backend (`nccl`: GPUs of its own; `ipc`: the trainer's GPU), `disk` when it has none (safetensors in "
            "`arpo_server_weight_dir`, loaded by vLLM's reload_weights)."
        },
    )
    arpo_server_weight_dir: str | None = field(
        default=None,
        metadata={
            "help": "vllm_server backend, `disk` transfer: a folder the server can read (None: `server_weights` in "
            "the output directory)."
        },
    )
    arpo_rollout_log_ratio: float = field(
        default=0.0,
        metadata={
            "help": "Share of groups written with their branch tree to `rollouts.jsonl` in the output directory "
            "(0 turns the file off)."
        },
    )
    arpo_val_max_samples: int | None = field(
        default=None,
        metadata={"help": "Validation prompts per evaluation (greedy, one trajectory, no branching). None: all."},
    )

    # ---------------------------------------------------------------- AEPO (docs/algorithms.md §5)
    aepo_variant: Literal["released", "paper"] = field(
        default="released",
        metadata={"help": "AEPO preset: `released` (the published scripts) or `paper` (the paper's description)."},
    )
    aepo_branch_penalty: float | None = field(
        default=None,
        metadata={"help": "lambda of the consecutive-branch penalty f(l) = max(0, 1 - lambda * l). ARPO: 0."},
    )
    aepo_branch_penalty_scope: Literal["lineage", "question"] | None = field(
        default=None,
        metadata={
            "help": "Consecutive-branch count of the penalty: `lineage` (every preset; per trajectory lineage, as the "
            "paper describes) or `question` (the released code's per-question count, which makes branching depend on "
            "which prompts share a batch; for bit-for-bit comparisons with the release). Preset default: lineage."
        },
    )
    aepo_dynamic_rollouts: bool | None = field(
        default=None,
        metadata={"help": "Entropy pre-monitoring: split each prompt's budget between global samples and branches."},
    )
    aepo_premonitor_beta: float | None = field(
        default=None,
        metadata={"help": "beta_pm of m = clip(floor(M * sigmoid(beta_pm * (H_root - H_tool))) + 1, 1, M)."},
    )
    aepo_premonitor_tokens: int | None = field(
        default=None,
        metadata={"help": "Tokens sampled from the bare prompt to measure H_root."},
    )
    aepo_premonitor_rounds: Literal["all", "post_tool"] | None = field(
        default=None,
        metadata={"help": "Rounds of the probe trajectory averaged into H_tool: `all` (reference) or `post_tool`."},
    )
    aepo_balanced_clip: bool | None = field(
        default=None,
        metadata={"help": "Gradient-preserving upper clip (value 1 + eps_high, gradient kept)."},
    )
    aepo_balanced_clip_scope: Literal["all", "high_entropy"] | None = field(
        default=None,
        metadata={"help": "Apply the gradient-preserving clip to every token (released) or high-entropy tokens."},
    )
    aepo_high_entropy_z: float = field(
        default=0.0,
        metadata={"help": "Entropy z-score above which a token counts as high-entropy (`high_entropy` scope)."},
    )
    aepo_entropy_advantage: bool | None = field(
        default=None,
        metadata={"help": "Entropy-aware advantage A * (1 + a * z_t)."},
    )
    aepo_entropy_advantage_coef: float | None = field(
        default=None,
        metadata={"help": "a of the entropy-aware advantage. Preset (paper): 0.2."},
    )

    # ---------------------------------------------------------------- tools (docs/algorithms.md §7)
    agentic_tool_config: str | None = field(
        default=None,
        metadata={"help": "YAML file listing the tools (name or class, params, timeout, retries, call limit)."},
    )
    agentic_max_tool_calls: int | None = field(
        default=None,
        metadata={"help": "Per-trajectory tool-call limit, both tools combined. Preset default: 3 (ARPO) / 6 (AEPO)."},
    )
    agentic_tool_retries: int | None = field(
        default=None,
        metadata={"help": "Attempts per call on exception or empty search result. Preset default: 3 / 4."},
    )
    agentic_tool_workers: int | None = field(
        default=None,
        metadata={"help": "Concurrent tool calls per rollout engine. Preset default: 64 / 32."},
    )
    agentic_python_timeout: float = field(
        default=PYTHON_TIMEOUT_S,
        metadata={"help": "Wall-clock limit per code execution (seconds)."},
    )
    agentic_python_max_output_chars: int = field(
        default=PYTHON_MAX_OUTPUT_CHARS,
        metadata={"help": "Python output cap (characters): first and last halves kept around an omission line."},
    )
    agentic_search_backend: str = field(
        default=SEARCH_BACKEND,
        metadata={"help": "Search backend: `local` (BM25 index), `replay` (cache only), `web`, `retriever`."},
    )
    agentic_search_index: str | None = field(
        default=None,
        metadata={
            "help": "Local search backend: folder with corpus.jsonl and the bm25s index, built by "
            "`llamafactory-agentic index build` (default: $AGENTIC_SEARCH_INDEX or ~/.cache/llamafactory_agentic)."
        },
    )
    agentic_python_isolation: Literal["auto", "bwrap", "unshare", "rlimits-only"] = field(
        default=PYTHON_ISOLATION,
        metadata={"help": "Sandbox of the python tool; `auto` takes the strongest one this machine offers."},
    )
    agentic_python_min_isolation: Literal["none", "unprivileged", "confined", "full"] = field(
        default=PYTHON_MIN_ISOLATION,
        metadata={
            "help": "`arpo`/`aepo` refuse to start when the python tool's isolation, measured by a probe run inside "
            "its sandbox (see `llamafactory-agentic doctor`), is below this level. `unprivileged`: model code never "
            "runs as root or with capabilities; `confined`: also no network and no host writes; `full`: also reads "
            "only what uid 65534 may read; `none`: accept anything. A python tool with `backend: sandbox_fusion` "
            "runs elsewhere and is not measured."
        },
    )
    agentic_search_topk: int = field(
        default=SEARCH_TOPK,
        metadata={"help": "Snippets per search query."},
    )
    agentic_search_snippet_chars: int = field(
        default=SEARCH_SNIPPET_CHARS,
        metadata={"help": "Characters kept per snippet."},
    )
    agentic_contamination_mode: Literal["log", "mask", "drop"] = field(
        default="log",
        metadata={
            "help": "Search results that hold the row's ground truth (contamination guard, docs/plan.md §3): `log` "
            "only counts them (`tools/answer_leak_rate`), `mask` replaces the answer by `[masked]`, `drop` withholds "
            "the whole result. Applies to training, validation and `llamafactory-agentic eval`."
        },
    )
    agentic_cache_path: str | None = field(
        default=None,
        metadata={"help": "Persistent tool cache: a SQLite file path or a `redis://` URL."},
    )
    agentic_cache_mode: Literal["read_write", "read_only", "offline"] = field(
        default=CACHE_MODE,
        metadata={"help": "Cache mode; `offline` answers misses with the no-result text."},
    )
    agentic_cache_tools: str = field(
        default=CACHE_TOOLS,
        metadata={"help": "Comma-separated tools whose results are cached (python results are not by default)."},
    )

    # ---------------------------------------------------------------- data and reward (docs/algorithms.md §2, §6, §8)
    agentic_repair_boxed: bool = field(
        default=True,
        metadata={"help": "Repair the `\\x08oxed` corruption of the ARPO RL files on load and log the count."},
    )
    agentic_skip_bad_rows: bool = field(
        default=False,
        metadata={
            "help": "Skip malformed rows (RL prompts, or agentic SFT trajectories) with a count instead of failing "
            "on the first one."
        },
    )
    agentic_tool_protocol: Literal["inline_tags", "template"] = field(
        default="inline_tags",
        metadata={
            "help": "Tool-call format of agentic SFT and of the RL rollout (training, validation, evaluation): "
            "`inline_tags` (ARPO's <tag>...</tag> calls of every configured tool, <result> observations) or "
            "`template` (the chat template's own JSON tool calls and tool messages, e.g. Qwen's <tool_call> / "
            "<tool_response>, Llama 3.1's JSON calls; docs/algorithms.md §2.7)."
        },
    )
    agentic_sft_mask_results: bool = field(
        default=True,
        metadata={
            "help": "Agentic SFT: exclude tool results (<result>...</result>, tags included) from the loss. False "
            "trains on them as the reference cold start did (RUC-NLPIR/ARPO issue 9)."
        },
    )
    agentic_sft_check: bool = field(
        default=True,
        metadata={"help": "Agentic SFT: print one rendered sample with masked spans and validate tags first."},
    )
    agentic_reward: str = field(
        default="f1",
        metadata={
            "help": "Reward: `f1` (reference: F1 with format gate and multi-tool bonus), `em`, `math`, or a "
            "`module:function` import path."
        },
    )
    agentic_reward_math: Literal["f1", "math_verify", "max"] = field(
        default="f1",
        metadata={"help": "Correctness of `ability == math` rows: token F1, math-verify equivalence, or the max."},
    )
    agentic_reward_tool_bonus: float = field(
        default=REWARD_TOOL_BONUS,
        metadata={
            "help": "Built-in rewards (`f1`, `em`, `math`): added to a correct answer that used both search and "
            "python. 0.1 is the reference's; 0 turns it off (on tasks whose questions need one tool it pays for "
            "useless calls, see docs/algorithms.md §6.4)."
        },
    )
    agentic_reward_funcs: str | None = field(
        default=None,
        metadata={
            "help": "Several weighted rewards instead of `agentic_reward` (docs/rewards.md): comma-separated "
            "`name[:weight]` entries (weight 1.0 by default), each a registered reward (`f1`, `em`, `math`, `format`, "
            "`tool_efficiency`, `judge`) or `module:function`, e.g. `f1:1.0,format:0.2,tool_efficiency:0.1,"
            "my_mod:fn:0.5`. The score is the weighted sum; each component is logged as `reward/<name>`; the first "
            "gives `reward/accuracy`. Checked before the model loads."
        },
    )
    agentic_reward_judge_url: str | None = field(
        default=None,
        metadata={"help": "The `judge` reward's OpenAI-compatible endpoint, e.g. `http://127.0.0.1:8000/v1`."},
    )
    agentic_reward_judge_model: str | None = field(default=None, metadata={"help": "The `judge` reward's model."})
    agentic_reward_judge_cache: str | None = field(
        default=None,
        metadata={
            "help": "SQLite verdict cache of the `judge` reward (default: judge_cache.sqlite in output_dir); the "
            "evaluation's `eval_judge_cache` format, so both can share it."
        },
    )
    agentic_reward_judge_api_key_env: str | None = field(
        default=None, metadata={"help": "Environment variable holding the `judge` reward's API key."}
    )
    agentic_reward_timeout: float = field(
        default=REWARD_TIMEOUT_S,
        metadata={
            "help": "Seconds one call of a user reward (`module:function`, a registered function or class) may take, "
            "counted from its start; a call still running then stops the step with an error naming the reward "
            "(docs/rewards.md §3). Calls slower than half of it are logged. The `judge` has its own limits."
        },
    )
    agentic_reward_workers: int = field(
        default=REWARD_WORKERS,
        metadata={
            "help": "Threads scoring the calls of a synchronous user reward at once (docs/rewards.md §3): 1 (default) "
            "calls it one trajectory after the other; more requires a thread-safe function. `async def` rewards "
            "always run their calls concurrently."
        },
    )
    agentic_reward_judge_timeout: float = field(
        default=JUDGE_TIMEOUT_S,
        metadata={
            "help": "Seconds per `judge` reward request, whole (connection, headers and body: a server that trickles "
            'is cut off there; docs/tools.md "Outbound limits").'
        },
    )
    agentic_reward_judge_retries: int = field(
        default=JUDGE_RETRIES,
        metadata={
            "help": "Attempts per `judge` reward call (HTTP 5xx, 429, network errors, timeouts; the server's "
            "Retry-After is honoured within timeout x retries)."
        },
    )

    # ---------------------------------------------------------------- optimisation (docs/algorithms.md §4)
    rl_policy_loss: str = field(
        default="ppo_clip",
        metadata={
            "help": "Policy loss, by its name in the loss registry (`llamafactory_agentic.algorithms."
            "register_policy_loss`): `ppo_clip` (= `arpo`, clipped PPO with dual clip; AEPO's gradient-preserving "
            "clip is switched by `aepo_balanced_clip`), `aepo`, `gspo` (sequence-level ratio and clip, arXiv "
            "2507.18071), `dr_grpo` (no std division of the advantage, token sum over a constant, arXiv 2503.20783), "
            "`cispo` (clipped stop-gradient IS weights on REINFORCE, arXiv 2506.13585), or one you registered before "
            "training (docs/algorithms.md §4.8)."
        },
    )
    rl_loss_agg_mode: Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean"] | None = field(
        default=None,
        metadata={
            "help": "How per-token losses become the loss: `token_mean` over every loss-mask token of the update "
            "(DAPO), `seq_mean_token_sum` or `seq_mean_token_mean` (sum or mean over each trajectory's tokens, then "
            "mean over trajectories). None: the loss's own (`gspo`: seq_mean_token_mean, `dr_grpo`: token sum over "
            "trajectories x arpo_max_response_length, others token_mean); docs/algorithms.md §4.8."
        },
    )
    rl_advantage_std_norm: bool | None = field(
        default=None,
        metadata={
            "help": "Divide the group-centred reward by the group std (GRPO). None: on, except off with "
            "`rl_policy_loss: dr_grpo`; docs/algorithms.md §4.8."
        },
    )
    rl_epsilon: float = field(
        default=0.2,
        metadata={
            "help": "Lower clip range eps_low (PPO's token ratio; GSPO's sequence ratio; CISPO's IS weight, where 1.0 "
            "means no lower bound)."
        },
    )
    rl_epsilon_high: float | None = field(
        default=None,
        metadata={"help": "Upper PPO clip range eps_high (None: equal to rl_epsilon)."},
    )
    rl_dual_clip: float | None = field(
        default=3.0,
        metadata={"help": "Dual-clip constant c for negative advantages (None disables it)."},
    )
    rl_kl_coef: float = field(
        default=0.0,
        metadata={"help": "Coefficient of the low-variance KL penalty; 0 loads no reference model."},
    )
    rl_entropy_coef: float = field(
        default=0.0,
        metadata={"help": "Coefficient of the entropy bonus."},
    )
    rl_logprob_chunk_size: int = field(
        default=1024,
        metadata={
            "help": "Positions per chunk of the log-prob/entropy computation fused with the output projection (no "
            "[batch, seq, vocab] logits); 0 computes the full logits at once (the materialising path)."
        },
    )
    rl_micro_batch_tokens: int = field(
        default=0,
        metadata={
            "help": "Cut each optimiser update's trajectories into micro-batches of at most this many padded tokens "
            "(rows x longest prompt + longest response) instead of `per_device_train_batch_size` trajectories; the "
            "update size stays per_device_train_batch_size x gradient_accumulation_steps trajectories per rank and "
            "the loss normalisation is unchanged. 0: micro-batches of per_device_train_batch_size trajectories."
        },
    )
    rl_num_iterations: int = field(
        default=1,
        metadata={"help": "Passes over each rollout batch."},
    )
    rl_dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO's dynamic sampling: drop the groups whose M rewards are all equal (zero advantage, no "
            "gradient) and roll out more prompts, drawn at random from the training set, until the update holds "
            "arpo_rollout_batch_size groups with different rewards or rl_dynamic_sampling_max_batches generation "
            "batches were rolled out (then equal-reward groups fill the rest). Costs extra rollouts."
        },
    )
    rl_dynamic_sampling_max_batches: int = field(
        default=3,
        metadata={
            "help": "Most generation batches (of arpo_rollout_batch_size prompts) rolled out for one update with "
            "rl_dynamic_sampling, the first included."
        },
    )
    rl_max_staleness: int = field(
        default=0,
        metadata={
            "help": "Asynchronous rollout: a producer with its own copy of the weights rolls out up to this many "
            "optimiser steps ahead of the trainer, overlapping rollout and update; groups older than this are "
            "dropped (counted in async/groups_dropped_stale). 0: the lockstep step (docs/algorithms.md §13). Engines hf "
            "and vllm_server; one process or DDP/ZeRO-1/2 ranks (ZeRO-3 and FSDP are refused)."
        },
    )
    rl_off_policy_correction: Literal["tis", "decoupled", "none"] = field(
        default="tis",
        metadata={
            "help": "Correction of tokens sampled by older weights (rl_max_staleness > 0): tis (truncated importance "
            "sampling, weight min(pi_prox/pi_behav, rl_off_policy_cap)), decoupled (decoupled PPO, uncapped weight) "
            "or none. No effect on tokens sampled by the current weights (docs/algorithms.md §13.2)."
        },
    )
    rl_off_policy_cap: float = field(
        default=2.0,
        metadata={"help": "Upper bound of the tis importance weight pi_prox/pi_behav (> 0)."},
    )


def agentic_field_names() -> set[str]:
    r"""Names of every plugin hyper-parameter (used by the clash test and the web UI)."""
    return {f.name for f in fields(AgenticArguments)}


def agentic_field(key: str) -> Field:
    r"""The dataclass field of the plugin key `key` (its `default`, `type` and `metadata["help"]`).

    Raises:
        KeyError: `key` is not a plugin hyper-parameter.
    """
    for f in fields(AgenticArguments):
        if f.name == key:
            return f
    raise KeyError(f"{key!r} is not a key of llamafactory_agentic.hparams.AgenticArguments")


def agentic_default(key: str) -> Any:
    r"""The declared default of the plugin key `key` (None for a key the stage presets fill).

    Raises:
        KeyError: `key` is not a plugin hyper-parameter.
    """
    return agentic_field(key).default


def agentic_value(args: Any, key: str) -> Any:
    r"""The value of the plugin key `key` in `args`, or its declared default where `args` does not carry the key.

    For the layers that also serve LLaMA-Factory's own objects, which carry no plugin key (its `DataArguments` in a
    converter, an `sft` run's arguments): the default is read from the declaration above, never written again.
    (`validation.validate_tool_keys` resolves the tool keys the same way.)

    Raises:
        KeyError: `key` is not a plugin hyper-parameter.
    """
    default = agentic_default(key)
    return getattr(args, key, default)


# ---------------------------------------------------------------------------------------------- declared types
_HINTS: dict[str, Any] = {}


def key_annotation(key: str) -> Any:
    r"""The declared type of the plugin key `key` (`hparams.AgenticArguments`).

    Raises:
        KeyError: `key` is not a plugin key.
    """
    if not _HINTS:
        _HINTS.update(typing.get_type_hints(AgenticArguments))
    return _HINTS[key]


def key_choices(key: str) -> tuple[Any, ...]:
    r"""The `Literal` choices declared for the plugin key `key` (`()` for a key that is not a choice).

    Raises:
        KeyError: `key` is not a plugin key.
    """
    annotation = key_annotation(key)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    return typing.get_args(annotation) if typing.get_origin(annotation) is Literal else ()
