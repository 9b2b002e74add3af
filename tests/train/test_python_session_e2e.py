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

"""Two ARPO steps of `llamafactory-cli train recipes/tiny/arpo_cpu.yaml` with the `python_session` environment.

The tiny policy is fitted to define a variable in one call and use it in the next; the run's sandboxed sessions keep
it between the calls (docs/tools.md "Environments"). Real subprocess, real sandbox, hf engine.
"""

import pytest

from .test_tool_formats_e2e import ANSWER, _train, env  # noqa: F401 - `env` is the shared module fixture


pytestmark = pytest.mark.slow

SESSION_SCRIPT = [
    ("<think> Keep x. </think>\n<python_session> x = 40 </python_session>", True),
    (" <result>\nTool(python_session) returned empty output.\n</result>", False),
    (" <python_session> x + 2 </python_session>", True),
    (" <result>\n42\n</result>", False),
    (ANSWER, True),
]


def test_python_session_keeps_variables_across_calls_in_two_arpo_steps(env):  # noqa: F811
    tools = env["root"] / "session_tools.yaml"
    tools.write_text("tools:\n  - name: python_session\n    timeout: 20\n    params: {memory_mb: 2048}\n")
    records, trajectories = _train(env, "python-session", SESSION_SCRIPT, "arpo_max_response_length=160",
                                   tools=tools)  # fmt: skip
    second = [
        (traj, i)
        for traj in trajectories
        for i, call in enumerate(traj["tool_calls"])
        if call["tool"] == "python_session" and call["content"] == "x + 2" and i > 0
    ]
    assert second, [t["response"][:300] for t in trajectories]
    for traj, i in second:
        first = traj["tool_calls"][i - 1]
        if first["content"] == "x = 40" and first["status"] == "empty":
            assert traj["tool_calls"][i]["status"] == "ok"
            assert "<python_session> x + 2 </python_session> <result>\n42\n</result>" in traj["response"]
            break
    else:
        raise AssertionError("no trajectory defined x and then used it")
    assert sum(r.get("tools/python_session/calls", 0) for r in records) > 0
    assert sum(r.get("tools/python_session/sessions_created", 0) for r in records) > 0
