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

"""Agentic rollout: multi-round tool use with ARPO/AEPO entropy-gated branching (docs/algorithms.md §2, §3, §5)."""

from .agent_loop import AgenticRollout, extract_tool_call, observation_string
from .branching import premonitor_initial_rollouts, round_entropy, should_branch
from .engine import (
    GenerationEngine,
    GenerationRequest,
    GenerationResult,
    SamplingSettings,
    StopStringMatcher,
    build_engine,
)
from .trajectory import STOP_STRINGS, RolloutConfig, RolloutOutput, ToolCallRecord, Trajectory
from .weight_sync import push_weights, weight_units


__all__ = [
    "STOP_STRINGS",
    "AgenticRollout",
    "GenerationEngine",
    "GenerationRequest",
    "GenerationResult",
    "RolloutConfig",
    "RolloutOutput",
    "SamplingSettings",
    "StopStringMatcher",
    "ToolCallRecord",
    "Trajectory",
    "build_engine",
    "extract_tool_call",
    "observation_string",
    "premonitor_initial_rollouts",
    "push_weights",
    "round_entropy",
    "should_branch",
    "weight_units",
]
