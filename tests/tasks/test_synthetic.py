# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The synthetic tool-use task: seeded, exact answers, disjoint splits, cold-start trajectories whose observations are
what the real tools return, and the `task generate` command."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamafactory_agentic.data.tags import split_inline_trajectory
from llamafactory_agentic.rewards import get_reward_function
from llamafactory_agentic.tasks.synthetic import (
    DATASET_FILES,
    DEFAULT_SKIP_TOOL_RATE,
    KINDS,
    SYSTEM_PROMPT,
    TOOLS_OF_KIND,
    TaskConfig,
    generate_task,
)


REPO = Path(__file__).resolve().parents[2]
SIZES = {"sft": 300, "train": 300, "heldout": 120}


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    summary = generate_task(TaskConfig(seed=3, sizes=dict(SIZES)), out)
    return out, summary


def facts_of(out):
    joined, city, manager = {}, {}, {}
    for row in read_jsonl(out / "facts.jsonl"):
        text = row["text"]
        if m := re.fullmatch(r"Employee #(\d+) joined in the year (\d+)\.", text):
            joined[m[1]] = m[2]
        elif m := re.fullmatch(r"The manager of employee #(\d+) is employee #(\d+)\.", text):
            manager[m[1]] = m[2]
        elif m := re.fullmatch(r"Employee #(\d+) works in the city of (\w+)\.", text):
            city[m[1]] = m[2]
        else:
            raise AssertionError(f"unknown fact {text!r}")
    return joined, city, manager


def expected_answer(question, joined, city, manager):
    """Recompute the answer from the question text and the fact base alone."""
    given = re.fullmatch(r"Employee #(\d+) (?:joined in|works in) (\w+)\. In which .+ employee #\1 .+\?", question)
    if given:
        assert given[1] not in joined  # an employee outside the directory
        return given[2]
    patterns = [
        (r"Compute (.+)\.", lambda m: str(eval(m[1]))),
        (r"How many times does (\d+) appear in the list (\[.*\])\?", lambda m: str(json.loads(m[2]).count(int(m[1])))),
        (r"In which year did the manager of employee #(\d+) join\?", lambda m: joined[manager[m[1]]]),
        (r"In which city does the manager of employee #(\d+) work\?", lambda m: city[manager[m[1]]]),
        (r"In which year did employee #(\d+) join\?", lambda m: joined[m[1]]),
        (r"In which city does employee #(\d+) work\?", lambda m: city[m[1]]),
        (r"What is the joining year of employee #(\d+) plus (\d+)\?", lambda m: str(int(joined[m[1]]) + int(m[2]))),
    ]
    for pattern, fn in patterns:
        if m := re.fullmatch(pattern, question):
            return fn(m)
    raise AssertionError(f"unknown question {question!r}")


def test_seeded_and_sized(task, tmp_path):
    out, summary = task
    assert {split: sum(c.values()) for split, c in summary["counts"].items()} == SIZES
    assert set(summary["counts"]["train"]) == set(KINDS)
    again = tmp_path / "again"
    generate_task(TaskConfig(seed=3, sizes=dict(SIZES)), again)
    for name in ("sft.jsonl", "train.jsonl", "heldout.jsonl", "facts.jsonl"):
        assert (out / name).read_text() == (again / name).read_text(), name
    other = tmp_path / "other"
    generate_task(TaskConfig(seed=4, sizes=dict(SIZES)), other)
    assert (out / "train.jsonl").read_text() != (other / "train.jsonl").read_text()


def test_answers_are_exact_and_follow_from_the_fact_base(task):
    out, _ = task
    joined, city, manager = facts_of(out)
    for name in ("train.jsonl", "heldout.jsonl"):
        for row in read_jsonl(out / name):
            assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
            question, answer = row["prompt"][1]["content"], row["reward_model"]["ground_truth"]
            assert expected_answer(question, joined, city, manager) == answer, question
            assert row["extra_info"]["tools"] == list(TOOLS_OF_KIND[row["ability"]])


def test_heldout_never_overlaps_training(task):
    out, _ = task
    heldout = read_jsonl(out / "heldout.jsonl")
    train = read_jsonl(out / "train.jsonl")
    sft = read_jsonl(out / "sft.jsonl")
    train_text = "\n".join(r["prompt"][1]["content"] for r in train)
    # what the cold start trains on: questions and model-written text; observations are context only (an unnecessary
    # search may show any fact of the shared fact base, as a web search would)
    sft_text = "\n".join(
        [r["conversations"][0]["value"] for r in sft]
        + [re.sub(r"<result>\n.*?\n</result>", "", r["conversations"][1]["value"], flags=re.S) for r in sft]
    )
    held_questions = {r["prompt"][1]["content"] for r in heldout}
    assert not held_questions & {r["prompt"][1]["content"] for r in train}
    assert not held_questions & {r["conversations"][0]["value"] for r in sft}
    # every employee of a held-out question (and the manager a two-hop question needs) is unseen in what training shows
    _, _, manager = facts_of(out)
    ids = set()
    directory_questions = {r["prompt"][1]["content"] for r in heldout if r["ability"] != "no_tool"}
    for q in directory_questions:
        for found in re.findall(r"employee #(\d+)", q):
            ids.add(found)
            if found in manager:
                ids.add(manager[found])
    assert len(ids) > 30
    for found in ids:
        assert not re.search(rf"#{found}\b", train_text) and not re.search(rf"#{found}\b", sft_text), found


def test_cold_start_trajectories_use_the_real_tools(task):
    from types import SimpleNamespace

    from llamafactory_agentic.tools import ToolCall, build_executor_from_args

    out, summary = task
    styles = summary["sft_styles"]
    counts = summary["counts"]["sft"]
    tool_questions = sum(n for kind, n in counts.items() if kind != "no_tool")
    # default rates: sums and one-hop look-ups mostly answered without a tool (0.75, 0.7), the rest 0.2; 10% call the
    # wrong tool first and recover
    expected_skips = sum(counts.get(k, 0) * r for k, r in DEFAULT_SKIP_TOOL_RATE.items())
    assert abs(styles["skipped_tool"] - expected_skips) < 4 * expected_skips**0.5
    assert 0.03 < styles["wrong_tool_then_recovered"] / tool_questions < 0.2
    assert styles["correct_tool_use"] > 0 and styles["no_tool_direct"] > 0

    args = SimpleNamespace(
        agentic_tool_workers=4,
        agentic_search_backend="local",
        agentic_search_index=str(out / "search_index"),
        agentic_search_topk=1,
        agentic_python_timeout=20,
        agentic_cache_path=None,
    )
    reward = get_reward_function("em")
    checked = 0
    with build_executor_from_args(args) as executor:
        for row in read_jsonl(out / "sft.jsonl")[:60]:
            text = row["conversations"][1]["value"]
            turns = split_inline_trajectory(text)
            calls = [t.content for t in turns if t.role == "function"]
            observations = [t.content for t in turns if t.role == "observation"]
            parsed = []
            for call in calls:
                tool = re.search(r"<(search|python)> (.*) </\1>$", call)
                parsed.append(ToolCall(tool[1], tool[2]))
            results = executor.execute(parsed)
            assert [r.text for r in results] == observations, text
            checked += len(parsed)
            # the trajectory's final answer is right and passes the reward's format gate
            view = re.sub(r"<result>\n.*?\n</result>", "<result></result>", text, flags=re.S)
            assert reward.compute(view, None).format_ok, text
    assert checked > 20


def test_cold_start_answers_are_correct(task):
    out, _ = task
    joined, city, manager = facts_of(out)
    reward = get_reward_function("em")
    skipped = 0
    for row in read_jsonl(out / "sft.jsonl"):
        question, text = row["conversations"][0]["value"], row["conversations"][1]["value"]
        view = re.sub(r"<result>\n.*?\n</result>", "<result></result>", text, flags=re.S)
        truth = expected_answer(question, joined, city, manager)
        if "</result>" not in text and row["kind"] != "no_tool":  # answered without a tool: the teacher's prior guess
            skipped += 1
            assert re.search(r"\\boxed\{(1000|1|2000|Headquarters)\}", text), text
            continue
        assert reward.compute(view, truth).correctness == 1.0, text
        assert f"The result gives {truth}." in text or row["kind"] == "no_tool", text
    assert skipped > 30


def test_difficulty_knob(tmp_path):
    easy = generate_task(TaskConfig(seed=0, difficulty=1, sizes={"train": 200}), tmp_path / "d1")
    hard = generate_task(TaskConfig(seed=0, difficulty=3, sizes={"train": 200}), tmp_path / "d3")
    assert easy["counts"]["train"] and hard["counts"]["train"]
    q1 = [r["prompt"][1]["content"] for r in read_jsonl(tmp_path / "d1" / "train.jsonl")]
    q3 = [r["prompt"][1]["content"] for r in read_jsonl(tmp_path / "d3" / "train.jsonl")]
    assert any(re.fullmatch(r"Compute \d{3} \+ \d{3}\.", q) for q in q1)
    assert re.findall(r"employee #(\d+)", " ".join(q1)) and all(
        len(i) == 3 for i in re.findall(r"employee #(\d+)", " ".join(q1))
    )
    assert all(len(i) == 5 for i in re.findall(r"employee #(\d+)", " ".join(q3)))
    assert any(re.fullmatch(r"Compute \d{4} \* \d{3} % \d+\.", q) for q in q3)
    assert max(len(json.loads(m)) for q in q3 for m in re.findall(r"\[.*\]", q)) == 12
    assert max(len(json.loads(m)) for q in q1 for m in re.findall(r"\[.*\]", q)) == 5


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="difficulty"):
        TaskConfig(difficulty=7)
    with pytest.raises(ValueError, match="unknown question kinds"):
        TaskConfig(mix={"trivia": 1.0})
    with pytest.raises(ValueError, match="skip_tool_rate"):
        TaskConfig(skip_tool_rate=1.5)
    with pytest.raises(ValueError, match="skip_tool_rate"):
        TaskConfig(skip_tool_rate={"trivia": 0.5})
    assert TaskConfig(skip_tool_rate={"python_arith": 0.9}).skip_rate("search_1hop") == 0.0


def test_registered_in_repository_dataset_info():
    info = json.loads((REPO / "data" / "dataset_info.json").read_text())
    for name, file_name in DATASET_FILES.items():
        assert info[name]["file_name"] == f"synthetic/{file_name}"
    assert info["synthetic_tool_sft"]["formatting"] == "arpo_sft"
    assert info["synthetic_tool_rl"]["formatting"] == info["synthetic_tool_heldout"]["formatting"] == "arpo_rl"


def test_generate_command(tmp_path):
    cli = [sys.executable, "-m", "llamafactory_agentic.cli"]
    help_text = subprocess.run([*cli, "task", "generate", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--difficulty" in help_text and "--seed" in help_text and "--size" in help_text
    out = tmp_path / "gen"
    proc = subprocess.run(
        [*cli, "task", "generate", "--output", str(out), "--size", "40", "--sft-size", "30", "--heldout-size", "20",
         "--seed", "5", "--difficulty", "2", "--mix", "no_tool=0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(read_jsonl(out / "train.jsonl")) == 40 and len(read_jsonl(out / "heldout.jsonl")) == 20
    assert all(r["ability"] != "no_tool" for r in read_jsonl(out / "train.jsonl"))
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["synthetic_tool_rl"]["file_name"] == "train.jsonl"
    assert (out / "search_index" / "corpus.jsonl").is_file()
    bad = subprocess.run(
        [*cli, "task", "generate", "--output", str(out), "--mix", "trivia=1"], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "KIND=WEIGHT" in bad.stderr


def test_solving_calls_retrieve_the_needed_fact_first(task):
    """With one snippet per search (the recipes' agentic_search_topk: 1), BM25 ranks the fact the question needs first."""
    from llamafactory_agentic.tasks.synthetic import ToolOracle

    out, _ = task
    joined, city, manager = facts_of(out)
    oracle = ToolOracle(out / "search_index", topk=1)
    checked = 0
    try:
        for row in read_jsonl(out / "heldout.jsonl") + read_jsonl(out / "train.jsonl"):
            question, answer, kind = row["prompt"][1]["content"], row["reward_model"]["ground_truth"], row["ability"]
            if not kind.startswith("search"):
                continue
            employee = re.search(r"employee #(\d+)", question)[1]
            if kind == "search_2hop":
                first = oracle.observe("search", f"manager of employee #{employee}")
                assert first == f"Page 1: The manager of employee #{employee} is employee #{manager[employee]}.", (
                    question
                )
                employee = manager[employee]
            if kind == "search_python":
                query = f"joining year of employee #{employee}"
            else:
                query = (
                    f"year did employee #{employee} join"
                    if "year" in question
                    else f"city does employee #{employee} work"
                )
            observation = oracle.observe("search", query)
            assert observation.startswith(f"Page 1: Employee #{employee} "), (question, observation)
            assert kind == "search_python" or answer in observation, (question, observation)
            checked += 1
    finally:
        oracle.close()
    assert checked > 100
