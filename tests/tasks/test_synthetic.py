# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The synthetic tool-use task: seeded, exact answers, disjoint splits, cold-start trajectories whose observations are
what the real tools return and whose think blocks restate every found fact and labelled python output, difficulty 0
shapes, the task model's tokenizer, and the `task generate` command."""

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamafactory_agentic.data.tags import split_inline_trajectory
from llamafactory_agentic.rewards import get_reward_function
from llamafactory_agentic.tasks.synthetic import (
    DATASET_FILES,
    DEFAULT_MIX,
    DEFAULT_SFT_MIX,
    DEFAULT_SKIP_TOOL_RATE,
    KINDS,
    SPLITS,
    SYSTEM_PROMPT,
    TOOLS_OF_KIND,
    TaskConfig,
    generate_task,
)


REPO = Path(__file__).resolve().parents[2]
SIZES = {"sft": 300, "train": 300, "heldout": 120}
CLI = [sys.executable, "-m", "llamafactory_agentic.cli"]
# one block of an inline trajectory: a tagged model-written block, or an observation as the rollout inserts it
BLOCK = re.compile(r"<(think|search|python|answer)> (.*?) </\1>|<result>\n(.*?)\n</result>", re.S)
GIVEN = re.compile(r"Employee #(\d+) (?:joined in|works in) (\w+)\. In which .+ employee #\1 .+\?")
LABELLED = re.compile(r"print\('(.+) =', \1\)")


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


def questions_of(out):
    """`{split: [(kind, question)]}` of the three files."""
    rows = {split: read_jsonl(out / f"{split}.jsonl") for split in SPLITS}
    out = {split: [(r["ability"], r["prompt"][1]["content"]) for r in rows[split]] for split in ("train", "heldout")}
    out["sft"] = [(r["kind"], r["conversations"][0]["value"]) for r in rows["sft"]]
    return out


def expected_answer(question, joined, city, manager):
    """Recompute the answer from the question text and the fact base alone."""
    given = GIVEN.fullmatch(question)
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


def solving_calls(question, joined, manager):
    """The calls that solve a question, recomputed from its text and the fact base alone."""
    if m := re.fullmatch(r"Compute (.+)\.", question):
        return [("python", f"print('{m[1]} =', {m[1]})")]
    if m := re.fullmatch(r"How many times does (\d+) appear in the list (\[.*\])\?", question):
        return [("python", f"print('count =', {m[2]}.count({m[1]}))")]
    if m := re.fullmatch(r"In which (year|city) \w+ the manager of employee #(\d+) (?:join|work)\?", question):
        boss = manager[m[2]]
        second = f"year did employee #{boss} join" if m[1] == "year" else f"city does employee #{boss} work"
        return [("search", f"manager of employee #{m[2]}"), ("search", second)]
    if m := re.fullmatch(r"In which year did employee #(\d+) join\?", question):
        return [("search", f"year did employee #{m[1]} join")]
    if m := re.fullmatch(r"In which city does employee #(\d+) work\?", question):
        return [("search", f"city does employee #{m[1]} work")]
    if m := re.fullmatch(r"What is the joining year of employee #(\d+) plus (\d+)\?", question):
        expr = f"{joined[m[1]]} + {m[2]}"
        return [("search", f"joining year of employee #{m[1]}"), ("python", f"print('{expr} =', {expr})")]
    assert GIVEN.fullmatch(question), question
    return []


def blocks(text):
    """`[(tag, content)]` of an inline trajectory (tag `result` for an observation); nothing else is in the text."""
    assert BLOCK.sub("", text).strip(" ") == "", text
    return [(m[1], m[2]) if m[1] else ("result", m[3]) for m in BLOCK.finditer(text)]


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
    # search may show any fact of the shared fact base, but never a held-out one: see the test below)
    sft_text = "\n".join(
        [r["conversations"][0]["value"] for r in sft]
        + [re.sub(r"<result>\n.*?\n</result>", "", r["conversations"][1]["value"], flags=re.S) for r in sft]
    )
    # no question text in two splits
    texts = {split: [q for _, q in qs] for split, qs in questions_of(out).items()}
    assert sum(len(set(t)) for t in texts.values()) == len(set().union(*texts.values())) == sum(SIZES.values())
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


def test_splits_ask_about_disjoint_employees_and_managers(task):
    out, _ = task
    _, _, manager = facts_of(out)
    subjects, managers = {}, {}
    for split, qs in questions_of(out).items():
        ids = {i for kind, q in qs if kind != "no_tool" for i in re.findall(r"employee #(\d+)", q)}
        subjects[split] = ids
        managers[split] = {manager[i] for i in ids}
        assert len(ids) > 20 and managers[split], split
    for a, b in (("sft", "train"), ("sft", "heldout"), ("train", "heldout")):
        assert not (subjects[a] | managers[a]) & (subjects[b] | managers[b]), (a, b)


def test_unnecessary_searches_show_no_heldout_fact(task):
    # an unnecessary search (or a wrong tool's) matches nothing well and returns whatever ranks first; bm25s ranked a
    # held-out fact first among ties (seeds 0, 1, 3), so the generator drops such a call from the trajectory
    out, _ = task
    heldout = [q for kind, q in questions_of(out)["heldout"] if kind != "no_tool"]
    heldout_ids = {i for q in heldout for i in re.findall(r"#(\d+)", q)}
    shown = set()
    for row in read_jsonl(out / "sft.jsonl"):
        for tag, content in blocks(row["conversations"][1]["value"]):
            if tag == "result":
                shown |= set(re.findall(r"#(\d+)", content))
    assert not shown & heldout_ids, sorted(shown & heldout_ids)


def test_cold_start_trajectories_use_the_real_tools(task):
    from types import SimpleNamespace

    from llamafactory_agentic.tools import ToolCall, build_executor_from_args

    out, summary = task
    styles = summary["sft_styles"]
    counts = summary["counts"]["sft"]
    tool_questions = sum(n for kind, n in counts.items() if kind != "no_tool")
    # default rates: counts and one-hop look-ups mostly answered without a tool (0.7, 0.6), sums 0.3, the rest 0.1;
    # 10% call the wrong tool first and recover
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
    """Tool and no-tool trajectories answer right, read from their last think block; skipped ones the prior guess."""
    out, _ = task
    joined, city, manager = facts_of(out)
    reward = get_reward_function("em")
    skipped = restated = 0
    for row in read_jsonl(out / "sft.jsonl"):
        question, text, kind = row["conversations"][0]["value"], row["conversations"][1]["value"], row["kind"]
        view = re.sub(r"<result>\n.*?\n</result>", "<result></result>", text, flags=re.S)
        truth = expected_answer(question, joined, city, manager)
        if "</result>" not in text and kind != "no_tool":  # answered without a tool: the teacher's prior guess
            skipped += 1
            guess = re.search(r"\\boxed\{(1000|1|2000|Headquarters)\}", text)
            assert guess, text
            if kind in ("python_arith", "search_1hop", "search_2hop"):  # never right at difficulty 0
                assert guess[1] != truth, text
            continue
        assert reward.compute(view, truth).correctness == 1.0, text
        thinks = [content for tag, content in blocks(text) if tag == "think"]
        if thinks[-1] != "Let me check first.":  # the answer is read from the last restated fact or output
            assert thinks[-1].endswith(f" {truth}."), text
            restated += 1
    assert skipped > 30 and restated > 100


def test_every_solving_search_is_followed_by_its_restated_fact(task):
    """After each search of the solving calls, `<think> FACT </think>` repeats the top snippet as it stands in the
    observation; the next call or the answer uses what the fact says. A wrong-tool or unnecessary search (no use to
    the answer) is not restated."""
    out, _ = task
    joined, city, manager = facts_of(out)
    restated = unrestated = 0
    for row in read_jsonl(out / "sft.jsonl"):
        question, text = row["conversations"][0]["value"], row["conversations"][1]["value"]
        solving = solving_calls(question, joined, manager)
        seq = blocks(text)
        made = [(tag, content) for tag, content in seq if tag in ("search", "python")]
        if made:  # the solving calls in order, after at most one wrong-tool or unnecessary call
            assert len(made) - len(solving) in (0, 1), text
            assert made[len(made) - len(solving) :] == solving, text
        for i, (tag, content) in enumerate(seq):
            if tag != "search":
                continue
            observation = seq[i + 1][1]
            assert seq[i + 1][0] == "result", text
            after = seq[i + 2]
            if ("search", content) not in solving:
                assert after[0] != "think", text
                unrestated += 1
                continue
            assert after[0] == "think", text
            fact = after[1]
            assert observation.splitlines()[0] == f"Page 1: {fact}", text
            assert fact in observation, text
            # the fact is the one the query asks for: the queried employee's
            employee = re.search(r"employee #(\d+)", content)[1]
            assert re.search(rf"employee #{employee}\b", fact, flags=re.I), text
            following = seq[i + 3]
            if m := re.fullmatch(r"The manager of employee #\d+ is employee #(\d+)\.", fact):
                assert following[0] == "search" and f"employee #{m[1]} " in following[1], text
            elif m := re.fullmatch(r"Employee #\d+ joined in the year (\d+)\.", fact):
                assert following[0] == "answer" or following[1].startswith(f"print('{m[1]} + "), text
            else:
                assert following[0] == "answer", text
            restated += 1
    assert restated > 150 and unrestated > 0


@pytest.mark.slow
def test_labelled_python_output_is_what_the_python_tool_prints(task):
    """Sums and year offsets print `EXPR = VALUE`, counts `count = N` (the trajectory restates both); the real python
    tool, in process and through `llamafactory-agentic tool python`, prints exactly the observation of the generated
    code."""
    from llamafactory_agentic.tools import PythonTool

    out, _ = task
    labelled, count = {}, {}
    for row in read_jsonl(out / "sft.jsonl"):
        seq = blocks(row["conversations"][1]["value"])
        for i, (tag, code) in enumerate(seq):
            if tag != "python":
                continue
            observation = seq[i + 1][1]
            if m := LABELLED.fullmatch(code):
                assert observation == f"{m[1]} = {eval(m[1])}", code
                assert seq[i + 2] == ("think", f"{observation}."), code
                labelled.setdefault(row["kind"], (code, observation))
            elif row["kind"] == "python_count":
                m = re.fullmatch(r"print\('count =', (\[[\d, ]+\])\.count\((\d+)\)\)", code)
                assert m and observation == f"count = {json.loads(m[1]).count(int(m[2]))}", code
                assert seq[i + 2] == ("think", f"{observation}."), code
                count.setdefault(row["kind"], (code, observation))
            else:  # the wrong tool first: a look-up's query printed
                assert code == f"print({observation!r})", code
    assert set(labelled) == {"python_arith", "search_python"} and count

    tool = PythonTool(timeout_s=30)
    for code, observation in [*labelled.values(), *count.values()]:
        result = tool.execute(code)
        assert (result.status, result.text) == ("ok", observation), code
    code, observation = labelled["python_arith"]
    proc = subprocess.run([*CLI, "tool", "python", "--code", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == f"{observation}\n", proc.stderr


def test_difficulty_0_shapes(task):
    """The default: 2-digit sums, 5-item lists of 1-5, 4-digit ids, joining years 1900-1999, offsets 2-9."""
    out, summary = task
    assert TaskConfig().difficulty == 0 and summary["config"]["difficulty"] == 0
    joined, city, manager = facts_of(out)
    ids = set(joined) | set(city) | set(manager) | set(manager.values())
    assert ids == set(joined) == set(city)  # every employee has a year and a city
    assert all(len(i) == 4 and not 1900 <= int(i) <= 2099 for i in ids)
    assert all(1900 <= int(y) <= 1999 for y in joined.values())
    assert min(map(int, joined.values())) < 1910 and max(map(int, joined.values())) > 1990
    seen = dict.fromkeys(KINDS, 0)
    for qs in questions_of(out).values():
        for kind, q in qs:
            seen[kind] += 1
            if kind == "python_arith":
                assert re.fullmatch(r"Compute \d{2} \+ \d{2}\.", q), q
            elif kind == "python_count":
                items = json.loads(re.search(r"\[.*\]", q)[0])
                assert len(items) == 5 and all(1 <= x <= 5 for x in items), q
            elif kind == "search_python":
                assert 2 <= int(re.search(r"plus (\d+)\?", q)[1]) <= 9, q
            elif kind == "no_tool":
                m = GIVEN.fullmatch(q)
                assert len(m[1]) == 4 and (not m[2].isdigit() or 1900 <= int(m[2]) <= 1999), q
            assert all(len(i) == 4 for i in re.findall(r"#(\d+)", q)), q
    assert all(seen.values()), seen


def test_difficulty_knob(tmp_path):
    levels = {}
    for difficulty in (1, 2, 3):
        generate_task(TaskConfig(seed=0, difficulty=difficulty, sizes={"train": 200}), tmp_path / f"d{difficulty}")
        questions = [r["prompt"][1]["content"] for r in read_jsonl(tmp_path / f"d{difficulty}" / "train.jsonl")]
        joined, _, _ = facts_of(tmp_path / f"d{difficulty}")
        assert all(1950 <= int(y) <= 2024 for y in joined.values())  # joining years above difficulty 0
        ids = re.findall(r"employee #(\d+)", " ".join(questions))
        lists = [len(json.loads(m)) for q in questions for m in re.findall(r"\[.*\]", q)]
        levels[difficulty] = questions, ids, lists
    q1, ids1, lists1 = levels[1]
    assert any(re.fullmatch(r"Compute \d{3} \+ \d{3}\.", q) for q in q1)
    assert ids1 and all(len(i) == 3 for i in ids1)
    assert max(lists1) == 5
    q2, ids2, lists2 = levels[2]
    assert any(re.fullmatch(r"Compute \d{3} \* \d{2}\.", q) for q in q2)
    assert ids2 and all(len(i) == 4 for i in ids2)
    assert max(lists2) == 8
    q3, ids3, lists3 = levels[3]
    assert all(len(i) == 5 for i in ids3)
    assert any(re.fullmatch(r"Compute \d{4} \* \d{3} % \d+\.", q) for q in q3)
    assert max(lists3) == 12


def test_no_tool_ids_never_belong_to_the_directory(task, tmp_path):
    """Difficulty 0 draws a fresh id per `no_tool` question; difficulty 1 (about 900 ids) a pool of 100 outside ids."""
    out1 = tmp_path / "d1"
    generate_task(TaskConfig(seed=1, difficulty=1, sizes={"sft": 100, "train": 400, "heldout": 100}), out1)
    for out, digits in ((task[0], 4), (out1, 3)):
        joined, city, manager = facts_of(out)
        directory = set(joined) | set(city) | set(manager) | set(manager.values())
        outside = []
        for qs in questions_of(out).values():
            outside += [GIVEN.fullmatch(q)[1] for kind, q in qs if kind == "no_tool"]
        assert len(outside) > 40
        assert all(len(i) == digits for i in outside)
        assert not set(outside) & directory, sorted(set(outside) & directory)
    assert len(set(outside)) <= 100  # difficulty 1: drawn from the pool


@pytest.fixture(scope="module")
def task_tokenizer(task, tmp_path_factory):
    from transformers import AutoConfig, AutoTokenizer

    from llamafactory_agentic.tasks.model import TOKENIZER, build_task_model

    path = build_task_model(tmp_path_factory.mktemp("task_model"), task[0], size="test")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    assert AutoConfig.from_pretrained(str(path)).vocab_size == len(tokenizer) <= TOKENIZER["vocab_size"]
    assert json.loads((path / "tiny_model.json").read_text())["size"] == "test"
    return tokenizer


def test_model_shape_overrides_are_applied_and_unknown_keys_refused(task, tmp_path):
    """`build_task_model(overrides=...)` replaces entries of the size's shape (the cold-start sweep's `--model-extra`)."""
    from transformers import AutoConfig

    from llamafactory_agentic.tasks.model import MODEL_SIZES, build_task_model

    path = build_task_model(tmp_path / "wide", task[0], size="test", overrides={"hidden_size": 128, "num_kv_heads": 4})
    config = AutoConfig.from_pretrained(str(path))
    assert (config.hidden_size, config.num_key_value_heads) == (128, 4)
    assert config.num_hidden_layers == MODEL_SIZES["test"]["num_layers"]  # the rest of the size is kept
    assert json.loads((path / "tiny_model.json").read_text())["overrides"] == {"hidden_size": 128, "num_kv_heads": 4}
    with pytest.raises(KeyError, match="unknown model setting.*hidden_sise"):
        build_task_model(tmp_path / "bad", task[0], size="test", overrides={"hidden_sise": 128})
    assert not (tmp_path / "bad").exists()  # refused before anything is written


def test_city_names_are_single_tokens(task, task_tokenizer):
    """Every city is one token where it stands: after a space in facts and questions, after `{` in the answer."""
    _, city, _ = facts_of(task[0])
    cities = set(city.values())
    assert len(cities) >= 10
    for name in cities:
        assert f"Ġ{name}" in task_tokenizer.tokenize(f"Employee #4817 works in the city of {name}."), name
        assert name in task_tokenizer.tokenize(f"<answer> \\boxed{{{name}}} </answer>"), name
    # an invented name of the same shape that the text never had is not a token: the tokenizer learnt the cities
    assert len(task_tokenizer.tokenize(" Quxyholm")) > 1


def test_numbers_tokenise_as_two_digit_chunks(task, task_tokenizer):
    """Numbers are cut from the left into chunks of up to two digits, each chunk a token, in any text of the task."""
    digits = [t for t in task_tokenizer.tokenize("Employee #4817 joined in the year 1993.") if t.isdigit()]
    assert digits == ["48", "17", "19", "93"]
    assert [t for t in task_tokenizer.tokenize("60 + 90 = 150") if t.isdigit()] == ["60", "90", "15", "0"]
    assert all(task_tokenizer.tokenize(f"{i:02d}") == [f"{i:02d}"] for i in range(100))
    texts = [r["conversations"][1]["value"] for r in read_jsonl(task[0] / "sft.jsonl")[:80]]
    texts += [r["text"] for r in read_jsonl(task[0] / "facts.jsonl")[:200]]
    for text in texts:
        tokens = task_tokenizer.tokenize(text)
        with_digits = [t for t in tokens if any(c.isdigit() for c in t)]
        assert with_digits == re.findall(r"\d{1,2}", text), text


def test_question_mix_follows_the_config(tmp_path):
    """Each split's kinds follow its mix (`mix` for train and held-out, `sft_mix` for the cold start).

    Tolerance per kind: 4 binomial standard deviations (each question's kind is an independent draw, so a kind's count
    is binomial(N, p); a false failure with another seed has a chance below 1e-4 per kind) plus 0.015 for redraws. A
    question text drawn before (in any split) is redrawn, kind included, which lowers the share of kinds with few
    distinct texts: at difficulty 0 only sums (8100 texts) and counts (two count questions are equal with probability
    about 1.2e-4) repeat; here about 30 of the ~500 held-out count draws are redrawn, a shift of about 0.011.
    """
    sizes = {"sft": 1000, "train": 1000, "heldout": 2000}
    counts = generate_task(TaskConfig(seed=11, sizes=dict(sizes)), tmp_path)["counts"]

    def off(split, mix):
        n, total = sizes[split], sum(mix.values())
        return {
            kind: abs(counts[split].get(kind, 0) / n - w / total)
            - (4 * math.sqrt(w / total * (1 - w / total) / n) + 0.015)
            for kind, w in mix.items()
        }

    for split, mix, other in (("sft", DEFAULT_SFT_MIX, DEFAULT_MIX), ("train", DEFAULT_MIX, DEFAULT_SFT_MIX),
                              ("heldout", DEFAULT_MIX, DEFAULT_SFT_MIX)):  # fmt: skip
        assert sum(counts[split].values()) == sizes[split]
        assert max(off(split, mix).values()) <= 0, (split, counts[split])
        # the tolerance tells the two default mixes apart
        assert max(off(split, other).values()) > 0, (split, counts[split])


def test_bad_config_is_refused():
    for difficulty in (-1, 4, 7):
        with pytest.raises(ValueError, match="difficulty"):
            TaskConfig(difficulty=difficulty)
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


@pytest.mark.slow
def test_generate_command(tmp_path):
    from llamafactory_agentic.tasks.cli import add_subcommands

    helps = {}
    for command in ("generate", "build-model", "eval"):
        proc = subprocess.run([*CLI, "task", command, "--help"], capture_output=True, text=True, check=True)
        assert proc.stdout.startswith("usage:"), command
        helps[command] = proc.stdout
    assert all(f"--{name}" in helps["generate"] for name in ("difficulty", "seed", "size", "mix", "skip-tool-rate"))
    assert "--task-dir" in helps["build-model"] and "--search-index" in helps["eval"]
    # the defaults the help describes
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["task", "generate", "--output", str(tmp_path / "x")])
    assert (args.difficulty, args.size, args.sft_size, args.heldout_size) == (0, 800, 600, 100)

    out = tmp_path / "gen"
    proc = subprocess.run(
        [*CLI, "task", "generate", "--output", str(out), "--size", "40", "--sft-size", "30", "--heldout-size", "20",
         "--seed", "5", "--difficulty", "2", "--mix", "no_tool=0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(read_jsonl(out / "train.jsonl")) == 40 and len(read_jsonl(out / "heldout.jsonl")) == 20
    assert all(r["ability"] != "no_tool" for r in read_jsonl(out / "train.jsonl"))
    assert json.loads((out / "task.json").read_text())["config"]["difficulty"] == 2
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["synthetic_tool_rl"]["file_name"] == "train.jsonl"
    assert (out / "search_index" / "corpus.jsonl").is_file()
    bad = subprocess.run(
        [*CLI, "task", "generate", "--output", str(out), "--mix", "trivia=1"], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "KIND=WEIGHT" in bad.stderr


def test_solving_calls_retrieve_the_needed_fact_first(task):
    """With one snippet per search (the recipes' agentic_search_topk: 1), BM25 ranks the needed fact first."""
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


def test_evaluation_defaults_to_the_task_search_topk():
    """`evaluate_policy`, `task eval` and `task generate` agree on snippets per search (a policy trained on one snippet
    and evaluated on three read the wrong one: a throwaway check with the old default of 3 scored 0% on one-hop
    look-ups that `task eval` scored 94% on)."""
    import argparse
    import inspect

    from llamafactory_agentic.tasks.cli import add_subcommands
    from llamafactory_agentic.tasks.evaluate import evaluate_policy
    from llamafactory_agentic.tasks.synthetic import TaskConfig

    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers(dest="command"))
    evaluate_args = parser.parse_args(["task", "eval", "model", "--data", "heldout.jsonl"])
    generate_args = parser.parse_args(["task", "generate", "--output", "out"])
    default = inspect.signature(evaluate_policy).parameters["search_topk"].default
    assert default == TaskConfig().search_topk == evaluate_args.search_topk == generate_args.search_topk == 1
