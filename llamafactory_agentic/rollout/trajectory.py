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

"""Trajectory, rollout output and the resolved rollout configuration (docs/algorithms.md §1-§3, §5.1, §5.2)."""

import math
from dataclasses import asdict, dataclass, field
from typing import Literal


# The closing tags of the built-in tools: the default of `RolloutConfig.stop_strings`. `AgenticRollout` replaces the tool
# stops by the closing tags of the tools its executor runs (`rollout.tool_format`), so a tool of the tool config with
# its own tag (built-in or `module:Class`) ends a round too (docs/tools.md).
STOP_STRINGS = ("</search>", "</python>")


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    r"""One tool call of a trajectory as the agent loop recorded it: the rollout's side of the executor boundary.

    The executor receives `llamafactory_agentic.tools.ToolCall(tool, content, trajectory_id)` and answers a
    `ToolResult`; the loop keeps this record of the pair (branches inherit their source's records).

    Attributes:
        tool: Tool tag from the closing tag (`search`, `python`, a configured tool's tag) or a native call's `name`.
        content: Call text between the tags, whitespace-stripped; "" for an empty call (never executed).
        pos: `len(response_ids)` right after the closing tag (tokens).
        status: `ToolResult.status` (`ok`, `empty`, `error`, `timeout`, ...); `empty` for an empty call; with the
            evaluation settings of `RolloutConfig` also `limit` (past its tool's `tool_call_limits`) or `repeat` (it
            repeats an earlier call of a `repeat_notice_tools` tool): such a call is not run and gets a notice instead.
        latency_s: Executor latency in seconds (0.0 for a call that was not run: empty, `limit`, `repeat`).
        cached: Whether the result came from the tool cache.
        obs_tokens: Length of the inserted observation in tokens (loss mask 0).
    """

    tool: str
    content: str
    pos: int
    status: str
    latency_s: float
    cached: bool
    obs_tokens: int


@dataclass
class Trajectory:
    r"""One prompt plus one multi-round response, as token ids with a per-token loss mask.

    Token ids are the currency: a branch copies `response_ids` and `loss_mask` of its source and the text is never
    decoded and re-encoded (docs/algorithms.md §3.4, Decision (d)).

    Attributes:
        uid: Unique id within the run, `"<call>-<group>-<index>"`.
        group_index: Index of the prompt in the rollout call's `prompts` list.
        prompt_ids: Prompt token ids (shared, never modified).
        response_ids: Response token ids, `[len_response]`, sampled tokens and observations, truncated to R.
        loss_mask: `[len_response]`; 1 for sampled tokens (and the EOS appended at the call limit), 0 for observation
            tokens (leading space, tags and newlines included).
        parent: Index within its group of the source a branch was copied from; None for global rollouts.
        branch_pos: `len(response_ids)` of the source at the copy (tokens shared with the source); None for globals.
        is_fill: Whether this global rollout was added by the budget fill (docs/algorithms.md §3.4).
        num_tool_calls: Tool calls made (both tools combined; inherited by branches). Empty calls count.
        tool_calls: One `ToolCallRecord` per call in this lineage (inherited ones first).
        hit_call_limit: A round ended in a tool call while the call counter was at the limit; EOS was appended.
        truncated: The response ran into the budget R (`finish_reason == "length"`).
        finish_reason: `"eos"`, `"length"` or `"call_limit"` (empty while running); with the evaluation settings of
            `RolloutConfig` also `"answer"` (stopped at `</answer>`), `"round_length"` (a round used its whole
            `max_round_tokens` without a tool call), `"self_result"` (kept writing its own `<result>`), `"timeout"`
            (`trajectory_timeout_s`) or `"error"` (a remote engine gave no answer).
        round_entropies: Round entropy H (docs/algorithms.md §3.2) of every round of this lineage, inherited by branches.
        entropy_base: H of the lineage's first round in the current rollout call (Decision (a)).
        consecutive_branches: l of the `lineage` penalty scope (docs/algorithms.md §5.2).
        generated_tokens: Tokens this trajectory sampled itself (excluding the prefix copied from its source).
        error: Why a remote engine gave no answer (finish reason `error`); empty otherwise.
        behaviour_logps: `[len_response]` log-prob of each sampled token under the weights that sampled it
            (`GenerationResult.logprobs`); NaN where there is none (observations, the EOS appended at the call limit,
            an engine that returns none). A branch copies its source's prefix values.
        weight_version: Version of the weights that sampled this trajectory's tokens (one per trajectory: the
            producer swaps weights only between rollout calls, docs/algorithms.md §13); None: unknown.
    """

    uid: str
    group_index: int
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    parent: int | None = None
    branch_pos: int | None = None
    is_fill: bool = False
    num_tool_calls: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    hit_call_limit: bool = False
    truncated: bool = False
    finish_reason: str = ""
    round_entropies: list[float] = field(default_factory=list)
    entropy_base: float | None = None
    consecutive_branches: int = 0
    generated_tokens: int = 0
    index: int = 0
    engine_key: int = -1
    parent_engine_key: int | None = None
    finished: bool = False
    error: str = ""
    behaviour_logps: list[float] = field(default_factory=list)
    weight_version: int | None = None

    @property
    def entropy_now(self) -> float | None:
        r"""H of the latest round (None before the first round)."""
        return self.round_entropies[-1] if self.round_entropies else None

    @property
    def is_branch(self) -> bool:
        r"""Whether this trajectory was copied from a source."""
        return self.parent is not None

    def to_record(self) -> dict:
        r"""JSON-serialisable summary for `rollouts.jsonl` (branch tree, flags, entropies; no token ids)."""
        return {
            "uid": self.uid,
            "group_index": self.group_index,
            "index": self.index,
            "parent": self.parent,
            "branch_pos": self.branch_pos,
            "is_fill": self.is_fill,
            "response_length": len(self.response_ids),
            "num_tool_calls": self.num_tool_calls,
            "tool_calls": [asdict(c) for c in self.tool_calls],
            "hit_call_limit": self.hit_call_limit,
            "truncated": self.truncated,
            "finish_reason": self.finish_reason,
            "round_entropies": list(self.round_entropies),
            "entropy_base": self.entropy_base,
        }


@dataclass
class RolloutOutput:
    r"""Result of one rollout call.

    Attributes:
        groups: One list per prompt, in prompt order: exactly M trajectories in training, 1 in validation.
        metrics: `rollout/...` scalars of this call.
        timing: `time/generation`, `time/tools`, `time/premonitor` in seconds.
    """

    groups: list[list[Trajectory]]
    metrics: dict[str, float]
    timing: dict[str, float]


@dataclass(frozen=True, slots=True)
class RolloutConfig:
    r"""Resolved rollout settings (no None values), built from the arguments by `train.arpo.config.build_run_config`.

    The evaluation harness builds its own from the evaluation protocol (`evaluation.runner.rollout_config_for`).

    Field names drop the `arpo_`/`aepo_`/`agentic_` prefix of the matching key in `llamafactory_agentic/hparams.py`.
    The fields have no defaults: every value comes from the key's one declaration (hparams or the stage preset)
    through `train.arpo.config.rollout_config_from_args`; code without a recipe (evaluation, tests, benchmarks) calls
    `train.arpo.config.default_rollout_config(**fields)`.
    `budget_fill` (`arpo_budget_fill`): `per_round` adds one fresh global rollout per round to a prompt without active
    trajectories (reference code, docs/algorithms.md §3.4); `all_at_once` adds all missing ones in that round (arXiv
    2507.19849 section 3.1).

    `hf_lora_merge` (`arpo_hf_lora_merge`): how the trainer puts a LoRA policy into its generation form for the hf
    engine (`rollout.generation_weights`). `schedule` (`arpo_rollout_schedule`): `rounds` (the reference loop) or
    `continuous` (per-trajectory round boundaries with continuous batching, docs/algorithms.md §3.4).

    Evaluation settings (docs/algorithms.md §9; their defaults leave training exactly as it was, the evaluation harness sets
    them):

    * `stop_strings`: the closing tags in it stand for the default tools; `AgenticRollout` sends the engine the closing
      tags of the tools its executor runs instead (none for native tool calls), plus the other stop strings here.
    * `stop_strings` may also hold `</answer>` (a round ending there ends the trajectory, finish reason `answer`) and
      `<result>` (a result the model writes itself is cut off with the rest of that round's text and the model
      continues from what is left, at most `self_result_retries` times in a row, then the trajectory ends with
      `self_result`). Every other stop string closes a tool call, as in training.
    * `max_round_tokens`: most new tokens per generation call (one round); a round that uses all of them without a
      tool call ends the trajectory (`round_length`). None: only the response budget R applies.
    * `tool_call_limits`: per-tool call limits (e.g. `{"python": 5, "search": 10}`), counted separately; a call past
      its tool's limit is not run and gets `limit_notice_text` as its observation (status `limit`).
    * `repeat_notice_tools`: tools whose call repeating an earlier executed call of the same trajectory (same
      normalised content) is not run and gets `repeat_notice_text` (status `repeat`).
    * `repetition_penalty`: passed to the engine (`SamplingSettings.repetition_penalty`).
    * `trajectory_timeout_s`: wall-clock limit per trajectory in `AgenticRollout.stream`, checked between rounds
      (finish reason `timeout`).
    * `contamination_mode` (`agentic_contamination_mode`): what happens to an observation of a
      `contamination_tools` tool that holds the trajectory's ground truth (`rewards/contamination.py`, docs/plan.md
      §3): `log` keeps it (the leak is only counted), `mask` replaces the answer by `[masked]`, `drop` withholds the
      observation. Needs the ground truths (`AgenticRollout.rollout(ground_truths=...)`, or `stream` items with one).
    """

    group_size: int
    initial_rollouts: int
    budget_fill: Literal["per_round", "all_at_once"]
    beam_size: int
    branch_rule: Literal["stochastic", "deterministic"]
    branch_tau: float
    branch_alpha: float
    entropy_weight: float
    entropy_source: Literal["topk", "full"]
    entropy_topk: int
    entropy_tokens: int
    max_prompt_length: int
    max_response_length: int
    max_tool_calls: int
    branch_penalty: float
    branch_penalty_scope: Literal["lineage", "question"]
    dynamic_rollouts: bool
    premonitor_beta: float
    premonitor_tokens: int
    premonitor_rounds: Literal["all", "post_tool"]
    temperature: float
    top_p: float
    top_k: int
    eos_token_id: int
    stop_strings: tuple[str, ...]
    backend: str  # a registered engine name (`rollout.engine.register_engine`): hf, vllm, vllm_server
    hf_prefix_cache: bool
    hf_generation_batch_size: int
    hf_lora_merge: Literal["gpu", "cpu", "off"]
    schedule: Literal["rounds", "continuous"]
    vllm_gpu_memory_utilization: float
    vllm_enable_sleep_mode: bool
    server_urls: tuple[str, ...]  # vllm_server: the servers (`arpo_server_urls`)
    server_api_key: str | None
    server_timeout_s: float
    server_weight_transfer: str  # auto, nccl, ipc or disk
    server_weight_dir: str | None
    seed: int
    max_round_tokens: int | None
    tool_call_limits: dict[str, int] | None
    repeat_notice_tools: tuple[str, ...]
    repetition_penalty: float
    self_result_retries: int
    trajectory_timeout_s: float | None
    contamination_mode: Literal["log", "mask", "drop"]
    contamination_tools: tuple[str, ...]

    def __post_init__(self) -> None:
        r"""Validate the choices."""
        if self.group_size < 1:
            raise ValueError(f"group_size (arpo_rollout_n) must be >= 1, got {self.group_size}.")
        if self.budget_fill not in ("per_round", "all_at_once"):
            raise ValueError(f"Unknown budget fill {self.budget_fill!r}; expected 'per_round' or 'all_at_once'.")
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}.")
        if self.branch_rule not in ("stochastic", "deterministic"):
            raise ValueError(f"Unknown branch rule {self.branch_rule!r}.")
        if self.entropy_source not in ("topk", "full"):
            raise ValueError(f"Unknown entropy source {self.entropy_source!r}.")
        if self.branch_penalty_scope not in ("lineage", "question"):
            raise ValueError(f"Unknown branch penalty scope {self.branch_penalty_scope!r}.")
        if self.hf_lora_merge not in ("gpu", "cpu", "off"):
            raise ValueError(f"Unknown hf_lora_merge {self.hf_lora_merge!r}; expected 'gpu', 'cpu' or 'off'.")
        if self.schedule not in ("rounds", "continuous"):
            raise ValueError(f"Unknown rollout schedule {self.schedule!r}; expected 'rounds' or 'continuous'.")
        if self.schedule == "continuous" and self.branch_penalty_scope == "question" and self.branch_penalty > 0:
            raise ValueError(
                "arpo_rollout_schedule: continuous has no global rounds, which the `question` branch-penalty scope "
                "counts; use aepo_branch_penalty_scope: lineage (every preset) or arpo_rollout_schedule: rounds."
            )
        if self.contamination_mode not in ("log", "mask", "drop"):
            raise ValueError(
                f"Unknown contamination mode {self.contamination_mode!r} (agentic_contamination_mode); expected "
                "'log', 'mask' or 'drop'."
            )
        if self.premonitor_rounds not in ("all", "post_tool"):
            raise ValueError(f"Unknown premonitor rounds {self.premonitor_rounds!r}.")
        if self.max_response_length < 1:
            raise ValueError("max_response_length must be >= 1.")
        if self.max_round_tokens is not None and self.max_round_tokens < 1:
            raise ValueError(f"max_round_tokens must be >= 1 or None, got {self.max_round_tokens}.")
        for tool, limit in (self.tool_call_limits or {}).items():
            if int(limit) < 0:
                raise ValueError(f"tool_call_limits[{tool!r}] must be >= 0, got {limit}.")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}.")
        if self.self_result_retries < 0:
            raise ValueError(f"self_result_retries must be >= 0, got {self.self_result_retries}.")
        if self.trajectory_timeout_s is not None and self.trajectory_timeout_s <= 0:
            raise ValueError(f"trajectory_timeout_s must be > 0 or None, got {self.trajectory_timeout_s}.")

    @property
    def greedy(self) -> bool:
        r"""Whether training sampling is greedy (temperature 0)."""
        return self.temperature <= 0.0


def sigmoid(x: float) -> float:
    r"""Numerically stable logistic function."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)
