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

"""An ARPO branch of a trajectory that uses `python_session` (docs/tools.md "Environments"): the real agent loop, the
real executor and sandboxed interpreters; the scripted engine stands in for the policy so that the branch happens at
call 2 and the two trajectories write different third calls."""

import pytest

from llamafactory_agentic.rollout import AgenticRollout
from llamafactory_agentic.tools import ToolExecutor
from llamafactory_agentic.tools.python_session import PythonSessionTool
from llamafactory_agentic.train.arpo.config import default_rollout_config

from .helpers import ScriptedEngine


NAMES = "print(sorted(k for k in globals() if len(k) == 1))"


def make_plan():
    made = {}  # engine key -> calls written so far; the branch (key 1) starts after the two calls it inherits

    def plan(r, key):
        # key 0: the global rollout (the source), key 1: its branch; H rises at call 2 so the branch happens there
        n = made.setdefault(key, 0 if key == 0 else 2)
        made[key] = n + 1
        calls = ["a = 1", "b = 2", "c = 3" if key == 0 else "d = 4", NAMES]
        if n < len(calls):
            return f"<python_session>{calls[n]}</python_session>", "stop", 6.0 if n == 1 else 1.0
        return "<answer> \\boxed{1} </answer>", "eos", 1.0

    plan.keyed = True
    return plan


@pytest.mark.parametrize("schedule", ["rounds", "continuous"])
def test_arpo_branch_at_call_2_sees_calls_1_2_and_not_its_siblings_call_3(tiny_tokenizer, schedule):
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(
        eos_token_id=eos, group_size=2, initial_rollouts=1, branch_rule="deterministic", max_tool_calls=5,
        max_response_length=512, schedule=schedule,
    )  # fmt: skip
    tool = PythonSessionTool(timeout_s=20)
    executor = ToolExecutor([tool])
    try:
        rollout = AgenticRollout(ScriptedEngine(tiny_tokenizer, make_plan(), eos), executor, tiny_tokenizer, config)
        prompt = tiny_tokenizer.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
        out = rollout.rollout([prompt])
        source, branch = out.groups[0]
        assert branch.parent == source.index == 0
        assert branch.tool_calls[:2] == source.tool_calls[:2] and len(branch.tool_calls) == 4  # branched at call 2
        assert [c.content for c in source.tool_calls[2:]] == ["c = 3", NAMES]
        assert [c.content for c in branch.tool_calls[2:]] == ["d = 4", NAMES]

        def last_observation(traj):
            text = tiny_tokenizer.decode(traj.response_ids)
            return text.rsplit("<result>", 1)[1].split("</result>", 1)[0].strip()

        assert last_observation(source) == "['a', 'b', 'c']"
        assert last_observation(branch) == "['a', 'b', 'd']"
        metrics = executor.pop_metrics()
        assert metrics["tools/python_session/forks"] == 1
        assert metrics["tools/python_session/replayed_calls"] == 2  # the branch replayed calls 1-2, nothing else
        assert tool.live_sessions() == []  # both closed when their trajectories finished
    finally:
        executor.close()
