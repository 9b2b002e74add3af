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

"""The stateful variant of the synthetic task (`python_session_count`): its rows, and cold-start observations equal to
what the real `python_session` environment returns (docs/tools.md "Environments")."""

import json
import re

import pytest

from llamafactory_agentic.tasks.synthetic import KINDS, SESSION_SYSTEM_PROMPT, SYSTEM_PROMPT, TaskConfig, generate_task
from llamafactory_agentic.tools import PythonTool, ToolCall, ToolExecutor
from llamafactory_agentic.tools.python_session import PythonSessionTool


CALL = re.compile(r"<(python_session|python|search)> (.*?) </\1> <result>\n(.*?)\n</result>", re.DOTALL)


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    out = tmp_path_factory.mktemp("session-task")
    config = TaskConfig(seed=3, sizes={"sft": 12, "train": 6, "heldout": 4},
                        mix={"python_session_count": 1.0, "python_count": 1.0}, sft_mix={"python_session_count": 1.0})  # fmt: skip
    return out, generate_task(config, out)


def test_rows_of_the_stateful_kind(task):
    out, summary = task
    assert set(summary["counts"]["sft"]) == {"python_session_count"}
    rows = read_jsonl(out / "train.jsonl")
    kinds = {row["extra_info"]["kind"] for row in rows}
    assert kinds == {"python_session_count", "python_count"}
    for row in rows:
        session = row["extra_info"]["kind"] == "python_session_count"
        assert row["prompt"][0]["content"] == (SESSION_SYSTEM_PROMPT if session else SYSTEM_PROMPT)
        if session:
            assert row["extra_info"]["tools"] == ["python_session", "python_session"]
            listing, target = re.fullmatch(r"Let xs be the list (\[.*\])\. How many times does (\d+) appear in xs\?",
                                           row["prompt"][1]["content"]).groups()  # fmt: skip
            assert row["reward_model"]["ground_truth"] == str(json.loads(listing).count(int(target)))
    assert "python_session_count" not in KINDS  # the default mixes (and their outputs) are unchanged


def test_cold_start_observations_are_what_the_session_returns(task):
    out, _ = task
    rows = read_jsonl(out / "sft.jsonl")
    trajectories = [row["conversations"][1]["value"] for row in rows]
    solved = [t for t in trajectories if t.count("<python_session>") == 2]
    assert len(solved) >= 6 and all(row["system"] == SESSION_SYSTEM_PROMPT for row in rows)
    with (
        ToolExecutor([PythonSessionTool(timeout_s=20)]) as executor,
        ToolExecutor([PythonTool(timeout_s=20)]) as fresh,
    ):
        for n, text in enumerate(solved[:4]):
            calls = [(tool, code, obs) for tool, code, obs in CALL.findall(text) if tool == "python_session"]
            assert len(calls) == 2 and calls[0][1].startswith("xs = [") and "xs.count(" in calls[1][1]
            for _, code, observation in calls:
                assert executor.execute([ToolCall("python_session", code, f"sft-{n}")])[0].text == observation
            # the second call needs the first one's variable: a fresh interpreter per call cannot answer it
            stateless = fresh.execute([ToolCall("python", calls[1][1], f"sft-{n}")])[0]
            assert "NameError: name 'xs' is not defined" in stateless.text
            count = calls[1][2].split("= ")[1]
            assert text.endswith(f"<answer> \\boxed{{{count}}} </answer>")


def test_the_command_line_mix_accepts_the_stateful_kind():
    from llamafactory_agentic.tasks.cli import _parse_mix

    assert _parse_mix(["python_session_count=1", "python_count=0"])["python_session_count"] == 1.0
    with pytest.raises(SystemExit, match="python_session_count"):
        _parse_mix(["python_sessions=1"])


def test_second_call_reuse_is_counted_from_the_executors_status():
    """The held-out metric of `benchmarks/compare_algorithms.py`: a second call that uses the first's variable counts
    only when it ran (a fresh interpreter per call answers NameError, status `error`)."""
    from llamafactory_agentic.rollout.trajectory import ToolCallRecord
    from llamafactory_agentic.tasks.cli import parse_kind_values
    from llamafactory_agentic.tasks.evaluate import second_call_reuses_state

    code = ["xs = [3, 5, 1, 3, 2]", "print('count =', xs.count(3))"]
    with (
        ToolExecutor([PythonSessionTool(timeout_s=20)]) as executor,
        ToolExecutor([PythonTool(timeout_s=20)]) as fresh,
    ):
        session = [executor.execute([ToolCall("python_session", c, "t0")])[0] for c in code]
        stateless = [fresh.execute([ToolCall("python", c, "t1")])[0] for c in code]

    def records(tool, results, contents=code):
        return [ToolCallRecord(tool, c, 0, r.status, 0.0, False, 0) for c, r in zip(contents, results)]

    assert second_call_reuses_state(records("python_session", session)) is True
    # the same code run as two python_session calls whose second failed (as the stateless tool fails it)
    assert second_call_reuses_state(records("python_session", stateless)) is False
    assert second_call_reuses_state(records("python_session", session, ["ys = [1]", code[1]])) is False  # other name
    assert (
        second_call_reuses_state(records("python_session", session, ["xs == [1]", code[1]])) is False
    )  # no assignment
    assert second_call_reuses_state(records("python_session", session[:1])) is None  # one call only
    assert second_call_reuses_state(records("python", stateless)) is None  # not the environment
    assert parse_kind_values(["python_session_count=0.7"], {"python_count": 0.7}, "--skip-tool-rate") == {
        "python_count": 0.7,
        "python_session_count": 0.7,
    }
    with pytest.raises(SystemExit, match="--sft-mix"):
        parse_kind_values(["python_sessions=1"], {}, "--sft-mix")
