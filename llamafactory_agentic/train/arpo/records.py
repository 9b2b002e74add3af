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

r"""The trainer's per-trajectory record, from scoring through the training batch to the logs and `rollouts.jsonl`."""

from dataclasses import dataclass, field
from typing import Any

from ...rollout.trajectory import ToolCallRecord, Trajectory


@dataclass(slots=True)
class ScoredTrajectory:
    r"""One trajectory of a rollout with its reward (built by the score stage, `pipeline.score_groups`).

    The token lists are response tokens, all of length `len_response` (observations included). `token_advantages`
    and `loss_mask_train` are filled by `pipeline.assign_advantages` for training rollouts; `eval_index` by
    `prediction_step` for validation.
    """

    group: int  # group id in the generation batch (validation: row within the evaluation batch)
    member: int  # index within the group, creation order (`parent` points into it)
    prompt_ids: list[int]  # [len_prompt]
    response_ids: list[int]  # [len_response] sampled tokens and observations
    loss_mask: list[int]  # [len_response] 1 sampled, 0 observation (the rollout's mask)
    parent: int | None  # member index of the branch source; None for a global rollout
    branch_pos: int | None  # tokens shared with the source (response prefix); None for a global rollout
    is_fill: bool  # global rollout added by the budget fill
    num_tool_calls: int  # tool calls of the lineage, inherited ones included
    hit_call_limit: bool  # ended by the tool-call limit (EOS appended)
    truncated: bool  # ran into the response budget
    finish_reason: str  # "eos", "length" or "call_limit"
    tool_calls: list[ToolCallRecord]  # one per call of the lineage
    branch_call_index: int | None  # tool calls the source had made when this branch was copied; None for globals
    reward: float  # scalar reward on the model view
    accuracy: float  # 1.0 when the reward's correctness is 1, else 0.0
    format_ok: bool  # the reward's format gate passed
    round_entropies: list[float] = field(default_factory=list)  # [rounds] round entropy H of the lineage (nats)
    entropy_base: float | None = None  # H of the lineage's first round in this rollout call; None: no round yet
    token_advantages: list[float] = field(default_factory=list)  # [len_response], 0 where loss_mask_train is 0
    loss_mask_train: list[int] = field(default_factory=list)  # [len_response] loss mask after attribution (hard dedup)
    eval_index: int | None = None  # validation: dataset row (`_eval_index`), None without the column
    components: dict[str, float] = field(default_factory=dict)  # compound reward: unweighted score per component
    # [len_response] log-prob of each sampled token under the weights that sampled it, NaN where none (observations,
    # an appended EOS); the off-policy correction's behaviour policy (docs/algorithms.md §13)
    behaviour_logps: list[float] = field(default_factory=list)
    weight_version: int | None = None  # optimiser steps behind the weights that sampled it; None: unknown

    @classmethod
    def from_trajectory(
        cls,
        trajectory: Trajectory,
        group: int,
        member: int,
        reward: float,
        accuracy: float,
        format_ok: bool,
        components: dict[str, float] | None = None,
    ) -> "ScoredTrajectory":
        r"""The record of a rollout `Trajectory` (token lists copied) with its score (and component scores)."""
        return cls(
            group=group,
            member=member,
            prompt_ids=list(trajectory.prompt_ids),
            response_ids=list(trajectory.response_ids),
            loss_mask=list(trajectory.loss_mask),
            parent=trajectory.parent,
            branch_pos=trajectory.branch_pos,
            is_fill=bool(getattr(trajectory, "is_fill", False)),
            num_tool_calls=int(trajectory.num_tool_calls),
            hit_call_limit=bool(trajectory.hit_call_limit),
            truncated=bool(trajectory.truncated),
            finish_reason=trajectory.finish_reason,
            tool_calls=list(trajectory.tool_calls or []),
            branch_call_index=branch_call_index(trajectory),
            reward=reward,
            accuracy=accuracy,
            format_ok=format_ok,
            round_entropies=[float(h) for h in trajectory.round_entropies],
            entropy_base=None if trajectory.entropy_base is None else float(trajectory.entropy_base),
            components=dict(components or {}),
            behaviour_logps=[float(v) for v in getattr(trajectory, "behaviour_logps", None) or ()],
            weight_version=getattr(trajectory, "weight_version", None),
        )


def has_reward_signal(group: list[ScoredTrajectory]) -> bool:
    r"""True when the rewards of a group are not all equal (exact comparison), i.e. some advantage is non-zero.

    The one test of an equal-reward group: `reward/identical_groups` (metrics.py) and dynamic sampling use it, and
    `algorithms.compute_grpo_advantages` gives exactly 0 to the groups it rejects.
    """
    return len({r.reward for r in group}) > 1


def branch_call_index(trajectory: Trajectory) -> int | None:
    r"""Number of tool calls the source had made when this branch was copied (None for a global rollout)."""
    if trajectory.parent is None:
        return None
    inherited = 0
    for call in trajectory.tool_calls or []:
        if call.pos <= trajectory.branch_pos:
            inherited += 1
    return inherited


def prompt_ids_of(row: dict[str, Any]) -> list[int]:
    r"""Prompt token ids of a dataset row (`prompt_ids`, else `input_ids`).

    Raises:
        KeyError: the row has neither column.
    """
    for key in ("prompt_ids", "input_ids"):
        if key in row and row[key] is not None:
            return list(row[key])
    raise KeyError(f"dataset row has no `prompt_ids`/`input_ids` column (columns: {sorted(row)})")
