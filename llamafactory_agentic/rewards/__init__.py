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

r"""Rewards over the model-written text of agentic trajectories (docs/algorithms.md §6).

`build_model_view` turns a response into model-written text; `get_reward_function(name, math_mode)` returns a
`RewardFunction` callable as `reward(model_text, ground_truth, metadata) -> float`; `metadata["executed_tools"]`
(`executed_tools(trajectory.tool_calls)`) tells the built-in rewards which tool calls ran. The reward API for agents
(`compound.py`, docs/rewards.md): a reward may also take the trajectory's `RewardContext`; `agentic_reward_funcs`
combines weighted rewards (`build_reward`, `CompoundReward`); `score_batch` scores a generation batch with slow
rewards (the LLM `JudgeReward`, `async def` functions) running concurrently.
"""

from .compound import (
    CompoundReward,
    FormatReward,
    JudgeReward,
    JudgeSettings,
    RewardContext,
    RewardItem,
    ToolEfficiencyReward,
    build_item,
    build_reward,
    parse_reward_funcs,
    reward_from_args,
    score_batch,
    score_trajectories,
)
from .deadline import RewardTimeoutError
from .deep_research import (
    answered_tool_calls,
    exact_match_score,
    extract_answer_span,
    extract_boxed_answer,
    f1_score,
    normalize_answer,
    normalize_ground_truths,
    validate_format,
)
from .math_equivalence import math_verify_score
from .model_view import RESULT_PLACEHOLDER, build_model_view
from .registry import (
    EXECUTED_TOOLS_KEY,
    CallableReward,
    DeepResearchReward,
    RewardFunction,
    RewardResult,
    check_reward_arguments,
    check_score,
    executed_tools,
    get_reward_function,
    list_reward_functions,
    load_callable,
    register_reward_function,
)


__all__ = [
    "CompoundReward",
    "FormatReward",
    "JudgeReward",
    "JudgeSettings",
    "RewardContext",
    "RewardItem",
    "RewardTimeoutError",
    "ToolEfficiencyReward",
    "build_item",
    "build_reward",
    "parse_reward_funcs",
    "reward_from_args",
    "score_batch",
    "score_trajectories",
    "EXECUTED_TOOLS_KEY",
    "RESULT_PLACEHOLDER",
    "CallableReward",
    "DeepResearchReward",
    "RewardFunction",
    "RewardResult",
    "answered_tool_calls",
    "build_model_view",
    "check_reward_arguments",
    "check_score",
    "exact_match_score",
    "executed_tools",
    "extract_answer_span",
    "extract_boxed_answer",
    "f1_score",
    "get_reward_function",
    "list_reward_functions",
    "load_callable",
    "math_verify_score",
    "normalize_answer",
    "normalize_ground_truths",
    "register_reward_function",
    "validate_format",
]
