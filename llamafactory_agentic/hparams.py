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
`shared/specs/ALGORITHMS.md`: `arpo_*` rollout and advantage (shared by ARPO and AEPO), `aepo_*` AEPO only,
`agentic_*` tools, data and reward, `rl_*` optimisation.

Keys whose default depends on the preset of the stage (section 5.5 of the spec) default to `None` here and are filled
by `llamafactory_agentic.train.presets.resolve_presets`, so an explicit value in a recipe always wins.

This module imports nothing heavy (no torch, no LLaMA-Factory): it is loaded while LLaMA-Factory's parser is built.
"""

from dataclasses import dataclass, field, fields
from typing import Literal


@dataclass
class AgenticArguments:
    r"""Arguments of the agentic stages (`agentic_sft`, `arpo`, `aepo`)."""

    # ---------------------------------------------------------------- rollout (ARPO, section 3 of the spec)
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
            "spec section 3.4): one per round, so a policy that stops early needs M - N extra rounds. "
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
    arpo_advantage_attribution: Literal["soft", "hard"] | None = field(
        default=None,
        metadata={
            "help": "`soft`: plain GRPO over the group, branches included (reference, default). `hard`: tokens of a "
            "shared prefix get the mean advantage of every trajectory that contains them."
        },
    )
    arpo_hard_dedup: bool = field(
        default=False,
        metadata={"help": "With hard attribution, keep each shared segment in one row only (weight 1 instead of d)."},
    )
    arpo_max_prompt_length: int = field(
        default=1536,
        metadata={"help": "Prompts longer than this many tokens are truncated from the left (tokens)."},
    )
    arpo_max_response_length: int = field(
        default=4096,
        metadata={"help": "Response budget R in tokens, observations included."},
    )
    arpo_rollout_backend: Literal["hf", "vllm"] = field(
        default="hf",
        metadata={"help": "Generation backend of the rollout: `hf` (transformers, CPU and GPU) or `vllm` (extra)."},
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
    arpo_vllm_gpu_memory_utilization: float = field(
        default=0.6,
        metadata={"help": "vllm backend: share of GPU memory for the colocated engine (reference: 0.6-0.7)."},
    )
    arpo_vllm_enable_sleep_mode: bool = field(
        default=True,
        metadata={"help": "vllm backend: release the engine's memory during the optimisation phase."},
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

    # ---------------------------------------------------------------- AEPO (section 5 of the spec)
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
        metadata={"help": "Count consecutive branches per trajectory lineage (paper) or per question (reference)."},
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

    # ---------------------------------------------------------------- tools (section 7)
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
        default=120.0,
        metadata={"help": "Wall-clock limit per code execution (seconds)."},
    )
    agentic_python_max_output_chars: int = field(
        default=4000,
        metadata={"help": "Python output cap (characters): first and last halves kept around an omission line."},
    )
    agentic_search_backend: str = field(
        default="local",
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
        default="auto",
        metadata={"help": "Sandbox of the python tool; `auto` takes the strongest one this machine offers."},
    )
    agentic_search_topk: int = field(
        default=10,
        metadata={"help": "Snippets per search query."},
    )
    agentic_search_snippet_chars: int = field(
        default=1000,
        metadata={"help": "Characters kept per snippet."},
    )
    agentic_cache_path: str | None = field(
        default=None,
        metadata={"help": "Persistent tool cache: a SQLite file path or a `redis://` URL."},
    )
    agentic_cache_mode: Literal["read_write", "read_only", "offline"] = field(
        default="read_write",
        metadata={"help": "Cache mode; `offline` answers misses with the no-result text."},
    )
    agentic_cache_tools: str = field(
        default="search",
        metadata={"help": "Comma-separated tools whose results are cached (python results are not by default)."},
    )

    # ---------------------------------------------------------------- data and reward (sections 2, 6, 8)
    agentic_repair_boxed: bool = field(
        default=True,
        metadata={"help": "Repair the `\\x08oxed` corruption of the ARPO RL files on load and log the count."},
    )
    agentic_skip_bad_rows: bool = field(
        default=False,
        metadata={"help": "Skip malformed RL rows with a count instead of failing on the first one."},
    )
    agentic_tool_protocol: Literal["inline_tags", "template"] = field(
        default="inline_tags",
        metadata={"help": "`inline_tags` (ARPO's <search>/<python>/<result> tags) or the template's own tool calls."},
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

    # ---------------------------------------------------------------- optimisation (section 4)
    rl_epsilon: float = field(
        default=0.2,
        metadata={"help": "Lower PPO clip range eps_low."},
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
    rl_num_iterations: int = field(
        default=1,
        metadata={"help": "Passes over each rollout batch."},
    )


def agentic_field_names() -> set[str]:
    r"""Names of every plugin hyper-parameter (used by the clash test and the web UI)."""
    return {f.name for f in fields(AgenticArguments)}
