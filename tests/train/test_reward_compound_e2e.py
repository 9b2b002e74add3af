# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Two ARPO steps through `llamafactory-cli train recipes/tiny/arpo_compound_reward.yaml` (issue 28 item 2).

The compound reward correctness (F1) + format + tool efficiency + LLM judge + a user function that reads the
trajectory context, each component logged as `reward/<name>`. The judge is a local OpenAI-compatible HTTP server
started by the test (`testing.FakeJudgeServer`, real HTTP on 127.0.0.1): a hosted judge model cannot run here (no
model hub, no web API). Everything else is real, as in test_arpo_e2e.py (the CLI in a subprocess, the tools, the
tiny policy fitted to call them).
"""

import json
import sqlite3

import pytest

from ._helpers import SEARCH_QUERY, SEARCH_RESULT
from .test_arpo_e2e import run_cli


pytestmark = pytest.mark.slow

COMPONENTS = {"f1": 1.0, "format": 0.2, "tool_efficiency": 0.1, "judge": 0.5, "compound_e2e_mod.calls": -0.05}


ANSWER_SCRIPT = [
    (f"<think> Let me search. </think>\n<search> {SEARCH_QUERY} </search>", True),
    (f" <result>\n{SEARCH_RESULT}\n</result>", False),
    (" <answer> The final answer is \\[ \\boxed{3} \\] </answer>", True),
]


@pytest.fixture(scope="module")
def answering_env(tmp_path_factory, tiny_model_dir, arpo_data):
    """test_arpo_e2e's setup with the tiny policy fitted to one search call and a boxed answer (ANSWER_SCRIPT).

    Fitted on the whole prompt (test_arpo_e2e fits on its last 48 tokens, fast but it rarely reaches its answer),
    so the rollout writes boxed answers: without one the judge has nothing to judge.
    """
    import shutil

    import pyarrow.parquet as pq

    from llamafactory_agentic.tools.index import build_corpus_from_cache_json

    from ._helpers import fit_tool_policy
    from .test_arpo_e2e import REPO

    root = tmp_path_factory.mktemp("compound-e2e")
    datasets = root / "datasets"
    datasets.mkdir()
    shutil.copy(REPO / "data" / "dataset_info.json", datasets / "dataset_info.json")
    (datasets / "arpo").symlink_to(arpo_data / "arpo", target_is_directory=True)
    rows = pq.read_table(arpo_data / "arpo" / "rl" / "train_10k.parquet").slice(0, 16).to_pylist()
    policy = root / "policy"
    fit_tool_policy(tiny_model_dir, policy, rows, steps=150, context=4096, script=ANSWER_SCRIPT)
    search_index = root / "search_index"
    build_corpus_from_cache_json(arpo_data / "arpo" / "search_cache.json", search_index)
    return {"root": root, "datasets": datasets, "policy": policy, "search_index": search_index}


def _verdict(prompt: str) -> str:
    question = prompt.split("Question:")[1].split("Golden Answer:")[0]
    return "Correct" if len(question.strip()) % 2 == 0 else "Incorrect"


def test_compound_reward_with_a_judge_trains_two_steps_and_logs_each_component(answering_env, tmp_path):
    from llamafactory_agentic.testing import FakeJudgeServer

    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "compound_e2e_mod.py").write_text(
        "def calls(model_text, ground_truth, metadata, context):\n"
        "    assert context.turns == context.num_tool_calls + 1 and context.finish_reason\n"
        "    return float(context.num_tool_calls)\n"
    )
    funcs = ",".join(f"{name.replace('.', ':')}:{weight}" for name, weight in COMPONENTS.items())
    with FakeJudgeServer(_verdict) as judge:
        out = run_cli(
            answering_env,
            "recipes/tiny/arpo_compound_reward.yaml",
            "compound",
            extra_env={"PYTHONPATH": f"{module_dir}:{__import__('os').environ.get('PYTHONPATH', '')}"},
            extra_args=(
                f"agentic_reward_funcs={funcs}",
                f"agentic_reward_judge_url={judge.url}",
                "agentic_reward_judge_model=fake-judge",
                "temperature=0.3",  # sampled (RL refuses greedy), close to the fitted script: answers get written
            ),
        )
    records = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    assert [r["current_steps"] for r in records if "loss" in r] == [1, 2]
    rollouts = [r for r in records if "reward/mean" in r]
    assert rollouts
    for record in rollouts:  # every component logged one by one, beside the usual reward metrics
        for name in COMPONENTS:
            assert f"reward/{name}" in record, (name, sorted(record))
    evals = [r for r in records if "eval_reward" in r]
    assert evals and all(f"eval_reward/{name}" in evals[-1] for name in COMPONENTS)

    trajectories = [
        t for line in (out / "rollouts.jsonl").read_text().splitlines() for t in json.loads(line)["trajectories"]
    ]
    assert trajectories
    for traj in trajectories:  # the reward is the weighted sum of the logged components
        components = traj["reward_components"]
        assert set(components) == set(COMPONENTS)
        assert traj["reward"] == pytest.approx(sum(w * components[n] for n, w in COMPONENTS.items()), abs=1e-6)
        assert components["compound_e2e_mod.calls"] == traj["num_tool_calls"]
    # the judge was asked over HTTP and its verdicts kept in the run's cache (the evaluation's verdict table)
    answered = [t for t in trajectories if t["reward_components"]["format"] == 1.0]
    assert answered, [(t["finish_reason"], t["response"][-120:]) for t in trajectories]
    assert judge.prompts, "the policy wrote boxed answers, so the judge must have been called"
    with sqlite3.connect(out / "judge_cache.sqlite") as db:
        assert db.execute("select count(*) from verdicts").fetchone()[0] == len(set(judge.prompts))
