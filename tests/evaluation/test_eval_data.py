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

"""Benchmark loading (every jsonl layout, arpo_rl parquet, registry), answer extraction, pass@k, presets and
fingerprints: the parts of the harness that need no model."""

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from llamafactory_agentic.evaluation.benchmarks import (
    BenchmarkError,
    BenchmarkSpec,
    load_benchmark,
    load_registry,
    read_answers,
    resolve_benchmarks,
)
from llamafactory_agentic.evaluation.compare import paired_bootstrap
from llamafactory_agentic.evaluation.config import (
    DEFAULT_SYSTEM_PROMPT,
    EvalArguments,
    EvalConfigError,
    parse_shard,
    resolve_protocol,
    resolve_system_prompt,
)
from llamafactory_agentic.evaluation.metrics import pass_at_k
from llamafactory_agentic.evaluation.records import ResumeError, open_run, read_records
from llamafactory_agentic.evaluation.scoring import extract_prediction, headline, rule_scores

from .helpers import write_jsonl


REPO = Path(__file__).resolve().parents[2]
FT = SimpleNamespace(agentic_reward="f1", agentic_reward_math="f1", agentic_search_backend="local")


# ---------------------------------------------------------------------------------------------- layouts
def test_every_jsonl_layout(tmp_path):
    rows = [
        {"question": "q-str", "answer": "Paris"},
        {"Question": "q-gaia", "answer": "34689", "task_id": "x", "Level": 2, "Annotator_Metadata": {"Steps": "1"}},
        {"problem": "q-aime", "question": "ignored? no: question wins", "answer": 70, "id": "0"},
        {"question": "q-list", "answer": ["Frank Lowy", "F. Lowy"]},
        {"question": "q-liststr", "answer": "['Nile', 'the Nile River']"},
        {"question": "q-jsonliststr", "answer": '["Jupiter"]'},
        {"problem": "q-float", "answer": 2.5},
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    bench = load_benchmark(BenchmarkSpec(name="mixed", path=str(path)))
    got = [(s.question, s.answers) for s in bench.samples]
    assert got == [
        ("q-str", ["Paris"]),
        ("q-gaia", ["34689"]),
        ("ignored? no: question wins", ["70"]),  # `question` comes before `problem` (docs/algorithms.md section 8)
        ("q-list", ["Frank Lowy", "F. Lowy"]),
        ("q-liststr", ["Nile", "the Nile River"]),
        ("q-jsonliststr", ["Jupiter"]),
        ("q-float", ["2.5"]),
    ]
    assert bench.samples[1].metadata == {"task_id": "x", "Level": 2, "Annotator_Metadata": {"Steps": "1"}}
    assert [s.sample_id for s in bench.samples] == [str(i) for i in range(len(rows))]
    assert len(bench.sha256) == 64


def test_gsm8k_reader_and_json_list_file(tmp_path):
    assert read_answers("a\nb\n#### 1,080", "gsm8k") == ["1080"]
    assert read_answers("3 trays.\n#### 16", "gsm8k") == ["16"]
    with pytest.raises(BenchmarkError, match="####"):
        read_answers("no marker", "gsm8k", "f.jsonl: row 3 field 'answer'")
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"question": "a", "answer": "b"}]), encoding="utf-8")
    assert load_benchmark(BenchmarkSpec(name="l", path=str(path))).samples[0].answers == ["b"]


@pytest.mark.parametrize(
    "row, message",
    [
        ({"answer": "x"}, r"row 1: no question in any of the fields"),
        ({"question": "q"}, r"row 1: field 'answer' is missing"),
        ({"question": "q", "answer": None}, r"row 1 field 'answer'"),
        ({"question": "q", "answer": []}, r"row 1 field 'answer': the answer is empty"),
    ],
)
def test_bad_rows_name_file_row_and_field(tmp_path, row, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question": "ok", "answer": "1"}, row])
    with pytest.raises(BenchmarkError, match=message) as err:
        load_benchmark(BenchmarkSpec(name="bad", path=str(path)))
    assert str(path) in str(err.value)


def test_broken_json_line_names_the_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"question": "a", "answer": "b"}\n{"question": \n', encoding="utf-8")
    with pytest.raises(BenchmarkError, match=r"broken.jsonl:2: not valid JSON"):
        load_benchmark(BenchmarkSpec(name="broken", path=str(path)))


def test_shared_benchmark_samples_load_by_name(shared_data):
    registry = load_registry()
    names = ["aime24", "math500", "gsm8k", "hotpotqa", "2wiki", "musique", "bamboogle"]
    specs = resolve_benchmarks(names, registry, str(shared_data / "arpo" / "eval"))
    counts = {}
    facts = shared_data.facts
    for spec in specs:
        bench = load_benchmark(spec)
        counts[spec.name] = len(bench.samples)
        # the release's files have the reference's row counts; the synthetic ones are reported as different
        mismatch = [f"{spec.name}: {spec.path} has {len(bench.samples)} rows, the reference's file has {spec.rows}"]
        assert bench.warnings == ([] if len(bench.samples) == spec.rows else mismatch), bench.warnings
        assert all(s.answers and s.question for s in bench.samples)
    assert counts == facts["eval_rows"]  # the release: aime24 30, math500 500, gsm8k 1319, ..., bamboogle 125
    if shared_data.tier == "real":
        assert all(counts[spec.name] == spec.rows for spec in specs)
    gsm = load_benchmark(resolve_benchmarks(["gsm8k"], registry, str(shared_data / "arpo" / "eval"))[0])
    assert gsm.samples[0].answers == [facts["gsm8k_first_answer"]] and gsm.samples[0].task == "math"
    aime = load_benchmark(resolve_benchmarks(["aime24"], registry, str(shared_data / "arpo" / "eval"))[0])
    assert aime.spec.metric == "judge" and aime.samples[0].metadata["id"] == facts["aime24_first_id"]


def test_groups_paths_and_explicit_cap(shared_data, tmp_path):
    registry = load_registry()
    eval_dir = str(shared_data / "arpo" / "eval")
    with pytest.raises(BenchmarkError, match="none of"):  # aime25 is not among the shared samples
        resolve_benchmarks(["math"], registry, eval_dir)
    spec = resolve_benchmarks([str(shared_data / "arpo" / "eval" / "hotpotqa.jsonl")], registry, None)[0]
    assert spec.name == "hotpotqa" and spec.metric == "f1"  # a path named like a registry entry uses that entry
    with pytest.raises(BenchmarkError, match="eval_data_dir is not set"):
        resolve_benchmarks(["hotpotqa"], registry, None)
    with pytest.raises(BenchmarkError, match="unknown benchmark 'nope'"):
        resolve_benchmarks(["nope"], registry, eval_dir)
    bench = load_benchmark(resolve_benchmarks(["bamboogle"], registry, eval_dir)[0], max_samples=5)
    rows = shared_data.facts["eval_rows"]["bamboogle"]  # the release: 125
    assert len(bench.samples) == 5 and f"first 5 of {rows} rows" in bench.warnings[-1]


def test_row_count_mismatch_is_reported(tmp_path):
    path = write_jsonl(tmp_path / "aime24.jsonl", [{"problem": "p", "answer": 1}])
    spec = resolve_benchmarks(["aime24"], load_registry(), str(tmp_path))[0]
    bench = load_benchmark(spec)
    assert bench.warnings == [f"aime24: {path} has 1 rows, the reference's file has 30"]


def test_arpo_rl_parquet_rows(shared_data, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bench = load_benchmark(resolve_benchmarks([str(shared_data / "arpo" / "rl" / "valid.parquet")], load_registry(),
                                              None)[0])  # fmt: skip
    assert len(bench.samples) == shared_data.facts["rl_rows"]["valid"] and bench.spec.format == "arpo_rl"
    tasks = {s.task for s in bench.samples}
    assert tasks == {"math", "qa"}
    first = bench.samples[0]
    assert first.system and "\\boxed" in first.system and "\x08oxed" not in first.system  # repaired on load
    assert first.messages[-1]["content"] == first.question and first.answers == [
        shared_data.facts["valid_first_answer"]
    ]
    table = pa.table(
        {
            "data_source": ["x"],
            "prompt": [[{"role": "system", "content": "S \x08oxed{}"}, {"role": "user", "content": "Q?"}]],
            "ability": [None],
            "reward_model": [{"ground_truth": '["a", "b"]', "style": "rule"}],
        }
    )
    pq.write_table(table, tmp_path / "own.parquet")
    own = load_benchmark(resolve_benchmarks([str(tmp_path / "own.parquet")], load_registry(), None)[0])
    sample = own.samples[0]
    assert (sample.system, sample.question, sample.answers, sample.task) == ("S \\boxed{}", "Q?", ["a", "b"], "qa")
    pq.write_table(table.drop(["reward_model"]), tmp_path / "bad.parquet")
    with pytest.raises(BenchmarkError, match=r"bad.parquet: row 0: field reward_model is missing"):
        load_benchmark(resolve_benchmarks([str(tmp_path / "bad.parquet")], load_registry(), None)[0])


def test_evaluation_folder_is_not_a_python_package():
    assert not (REPO / "evaluation" / "__init__.py").exists()
    from setuptools import find_packages

    packages = find_packages(where=str(REPO), include=["llamafactory_agentic", "llamafactory_agentic.*"])
    assert "llamafactory_agentic.evaluation" in packages and not any(p.startswith("evaluation") for p in packages)
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    code = "import importlib.util; print(importlib.util.find_spec('evaluation'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/", timeout=120)
    assert out.stdout.strip() == "None", out.stdout + out.stderr
    assert importlib.util.find_spec("llamafactory_agentic.evaluation") is not None


# ---------------------------------------------------------------------------------------------- scoring
@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think> x </think> <answer> The final answer is \\[ \\boxed{42} \\] </answer>", "42"),
        ("<answer> \\boxed{1} then \\boxed{\\frac{1}{2}} </answer>", "\\frac{1}{2}"),  # last boxed in the span
        ("<answer> \\boxed{1} </answer> more <answer> \\boxed{7} </answer>", "7"),  # last answer span
        ("<answer> \\boxed{\\text{Ottawa}} </answer>", "Ottawa"),  # \text{} unwrapped
        ("<answer> \\boxed{\\text{a} + \\text{b}} </answer>", "\\text{a} + \\text{b}"),  # not one \text group
        ("<answer> \\boxed{ \\text{ \\text{x} } } </answer>", "x"),
        ("<answer> 42 </answer>", None),  # no \boxed in the span
        ("\\boxed{42} <answer> no box </answer>", None),  # a \boxed outside the answer span does not count
        ("<think> \\boxed{3} </think>", None),  # no answer span
        ("<answer> \\boxed{42}", None),  # unclosed span
    ],
)
def test_prediction_extraction(text, expected):
    assert extract_prediction(text) == expected


def test_rule_scores_and_headline():
    s = rule_scores("\\frac{3}{4}", ["0.75"], "math")
    assert s["em"] == 0.0 and s["math_equiv"] == 1.0
    q = rule_scores("Ottawa, Ontario", ["Ottawa"], "qa")
    assert q["em"] == 0.0 and 0 < q["f1"] < 1 and q["math_equiv"] is None
    assert rule_scores(None, ["x"], "math") == {"em": 0.0, "f1": 0.0, "math_equiv": 0.0}
    q.update(reward=0.5, reward_correctness=0.5)
    assert headline("f1", q, None) == (q["f1"], False, "f1")
    assert headline("judge", q, True) == (1.0, True, "judge")
    assert headline("judge", q, None) == (0.0, False, "rule")  # no judge configured
    assert headline("judge", {**q, "em": 1.0}, None, judge_error=True) == (0.0, False, "judge_error")  # never the rule


# ---------------------------------------------------------------------------------------------- pass@k
def brute_force_pass_at_k(outcomes, k):
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return sum(any(outcomes[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(outcomes, k), abs=1e-12), (n, c, k)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_paired_bootstrap_interval_and_p_value():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2, 200).astype(float)
    same = paired_bootstrap(a, a.copy(), samples=2000)
    assert same["diff"] == 0 and same["p_value"] == 1.0
    better = paired_bootstrap(a, np.ones_like(a), samples=2000)
    assert better["low"] > 0 and better["p_value"] < 0.01 and better["diff"] == pytest.approx(1 - a.mean())
    noisy = a.copy()
    noisy[:3] = 1 - noisy[:3]
    assert paired_bootstrap(a, noisy, samples=2000)["p_value"] > 0.05


# ---------------------------------------------------------------------------------------------- presets
def test_paper_preset_values_and_explicit_keys_win():
    p = resolve_protocol(EvalArguments(), FT)
    assert (p.temperature, p.top_p, p.top_k, p.repetition_penalty) == (0.6, 0.95, 0, 1.1)
    assert p.max_new_tokens == 4096 and p.tool_call_limits == {"python": 5, "search": 10}
    assert p.max_tool_calls is None and p.repeat_notice and p.drop_self_results
    assert p.stop_strings == ["</search>", "</python>", "</answer>"] and p.sample_timeout_s == 1500 and p.runs == 5
    assert p.max_prompt_length + p.max_response_length == 32768
    q = resolve_protocol(EvalArguments(eval_temperature=0.0, eval_max_search_calls=-1, eval_runs=3), FT)
    assert q.temperature == 0.0 and q.tool_call_limits == {"python": 5} and q.runs == 3
    assert q.fingerprint != p.fingerprint
    assert resolve_protocol(EvalArguments(), FT).fingerprint == p.fingerprint  # deterministic


def test_recorded_stop_strings_are_those_of_the_configured_tools(tmp_path, monkeypatch):
    """run.json recorded `</search>`, `</python>` for a run whose rollout stopped on `</calc>` (issue 35)."""
    from llamafactory_agentic.rollout.agent_loop import rollout_stop_strings
    from llamafactory_agentic.rollout.tool_format import InlineTagFormat

    monkeypatch.syspath_prepend(str(REPO / "tests" / "train"))
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - name: calc_tool:CalcTool\n")  # the tag comes from the class: calc
    ft = SimpleNamespace(**vars(FT), agentic_tool_config=str(config))
    paper = resolve_protocol(EvalArguments(), ft)
    assert paper.stop_strings == ["</calc>", "</answer>"]
    # what the agent loop sends the engine with this executor's tools, from the preset's stop strings
    assert list(
        rollout_stop_strings(["</search>", "</python>", "</answer>"], InlineTagFormat(["calc"]).stop_strings)
    ) == (paper.stop_strings)
    model = SimpleNamespace(model_name_or_path=str(tmp_path), adapter_name_or_path=None)
    saved = {"values": {"agentic_max_tool_calls": 2, "arpo_max_response_length": 96, "arpo_max_prompt_length": 64}}
    (tmp_path / "agentic_config.json").write_text(json.dumps(saved), encoding="utf-8")
    assert resolve_protocol(EvalArguments(eval_preset="train_val"), ft, model).stop_strings == ["</calc>"]
    config.write_text("tools:\n  - name: python\n  - name: search\n  - name: calc_tool:CalcTool\n    tag: add\n")
    assert resolve_protocol(EvalArguments(), ft).stop_strings == ["</search>", "</python>", "</add>", "</answer>"]
    explicit = resolve_protocol(EvalArguments(eval_stop_strings="</python>,</answer>"), ft)
    assert explicit.stop_strings == ["</python>", "</answer>"]  # set by hand: kept as given
    template = SimpleNamespace(**vars(ft), agentic_tool_protocol="template")
    assert resolve_protocol(EvalArguments(), template).stop_strings == ["</answer>"]  # native calls close no tag


def test_recorded_stop_strings_are_what_the_agent_loop_sends(tmp_path, monkeypatch, tiny_tokenizer):
    """The protocol's stop strings (run.json) against those of a real `AgenticRollout` built as the runner builds it,
    with the executor of the same tool config (issue 35: the record and the rollout must not drift apart). The
    rollout adds `<result>` exactly when the protocol drops self-written results (`drop_self_results`, recorded)."""
    from llamafactory_agentic.evaluation.runner import SELF_RESULT_STOP, rollout_config_for
    from llamafactory_agentic.rollout.agent_loop import AgenticRollout
    from llamafactory_agentic.tools import build_executor_from_args

    monkeypatch.syspath_prepend(str(REPO / "tests" / "train"))
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - name: calc_tool:CalcTool\n  - name: python\n")
    for tool_config in (None, str(config)):
        for drop in (True, False):
            ft = SimpleNamespace(**vars(FT), agentic_tool_config=tool_config)
            protocol = resolve_protocol(EvalArguments(eval_drop_self_results=drop), ft)
            keys = SimpleNamespace(
                agentic_tool_config=tool_config, agentic_search_backend="replay", agentic_tool_workers=1
            )
            executor = build_executor_from_args(keys)
            try:
                rollout_config = rollout_config_for(protocol, tiny_tokenizer.eos_token_id, "hf", 1, 0)
                sent = list(AgenticRollout(None, executor, tiny_tokenizer, rollout_config).stop_strings)
            finally:
                executor.close()
            assert sent == protocol.stop_strings + ([SELF_RESULT_STOP] if drop else []), (tool_config, drop, sent)
    assert protocol.stop_strings == [
        "</python>",
        "</calc>",
        "</answer>",
    ]  # the preset's order first (rollout_stop_strings)


def test_train_val_preset_reads_the_training_config(tmp_path):
    ft = SimpleNamespace(**vars(FT), arpo_max_prompt_length=1536, arpo_max_response_length=4096,
                         agentic_max_tool_calls=None)  # fmt: skip
    model = SimpleNamespace(model_name_or_path=str(tmp_path), adapter_name_or_path=None)
    saved = {"values": {"agentic_max_tool_calls": 6, "arpo_max_response_length": 96, "arpo_max_prompt_length": 512}}
    (tmp_path / "agentic_config.json").write_text(json.dumps(saved), encoding="utf-8")
    p = resolve_protocol(EvalArguments(eval_preset="train_val"), ft, model)
    assert (p.max_tool_calls, p.max_response_length, p.max_prompt_length) == (6, 96, 512)
    assert (p.temperature, p.runs) == (0.0, 1) and p.stop_strings == ["</search>", "</python>"]
    assert not p.tool_call_limits and p.max_new_tokens is None
    p = resolve_protocol(EvalArguments(eval_preset="train_val", eval_max_tool_calls=2), ft, model)
    assert p.max_tool_calls == 2


def test_system_prompt_sources(tmp_path, shared_data):
    assert resolve_system_prompt(None) == DEFAULT_SYSTEM_PROMPT and resolve_system_prompt("none") is None
    (tmp_path / "p.txt").write_text("my prompt\n", encoding="utf-8")
    assert resolve_system_prompt(f"file:{tmp_path / 'p.txt'}") == "my prompt"
    rl = resolve_system_prompt(f"rl:{shared_data / 'arpo' / 'rl' / 'valid.parquet'}")
    assert rl.startswith("You are a helpful assistant") and "\\boxed{answer here}" in rl and "\x08" not in rl
    with pytest.raises(EvalConfigError, match="does not exist"):
        resolve_system_prompt("file:/nonexistent")


def test_argument_checks():
    assert parse_shard("1/4") == (1, 4) and parse_shard(None) == (0, 1)
    for bad in ("4/4", "x", "1/0"):
        with pytest.raises(EvalConfigError, match="eval_shard"):
            parse_shard(bad)
    with pytest.raises(EvalConfigError, match="eval_preset"):
        EvalArguments(eval_preset="fast")
    with pytest.raises(EvalConfigError, match="eval_judge_model"):
        EvalArguments(eval_judge_base_url="http://x/v1")
    args = EvalArguments(eval_benchmarks="aime24, math500", eval_base_url=["http://a/v1", "http://b/v1"])
    assert args.eval_benchmarks == ["aime24", "math500"] and args.eval_base_url == ["http://a/v1", "http://b/v1"]


# ---------------------------------------------------------------------------------------------- records
def test_records_tolerate_a_half_written_last_line_but_not_damage(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"key": "a/0/0"}\n{"key": "a/1/0"}\n{"key": "a/2', encoding="utf-8")
    records, valid = read_records(path)
    assert [r["key"] for r in records] == ["a/0/0", "a/1/0"] and valid == len('{"key": "a/0/0"}\n{"key": "a/1/0"}\n')
    path.write_text('{"key": "a/0/0"}\nnot json\n{"key": "a/2/0"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"records.jsonl:2: damaged record"):
        read_records(path)


def test_open_run_refuses_another_fingerprint_unless_overwrite(tmp_path):
    meta = {
        "fingerprint": "aaa",
        "model": {"m": 1},
        "benchmarks": {"b": {"sha256": "s", "samples": 3}},
        "num_shards": 1,
    }
    assert open_run(tmp_path, meta) == meta
    (tmp_path / "records.jsonl").write_text('{"key": "b/0/0"}\n', encoding="utf-8")
    assert open_run(tmp_path, dict(meta))["fingerprint"] == "aaa"  # same run: resume
    other = {**meta, "fingerprint": "bbb"}
    with pytest.raises(ResumeError, match=r"different fingerprint.*aaa there, bbb now.*eval_overwrite"):
        open_run(tmp_path, other)
    with pytest.raises(ResumeError, match="different benchmarks"):
        open_run(tmp_path, {**meta, "benchmarks": {"b": {"sha256": "changed", "samples": 3}}})
    assert open_run(tmp_path, other, overwrite=True)["fingerprint"] == "bbb"
    assert not (tmp_path / "records.jsonl").exists()


def test_report_cap_spreads_over_the_sets():
    from llamafactory_agentic.evaluation.report import _spread

    records = [{"benchmark": "a", "i": i} for i in range(10)] + [{"benchmark": "b", "i": i} for i in range(3)]
    assert [(r["benchmark"], r["i"]) for r in _spread(records, 6)] == [("a", 0), ("a", 1), ("a", 2), ("b", 0),
                                                                      ("b", 1), ("b", 2)]  # fmt: skip
    assert _spread(records, 20) == records


def _rl_parquet(path, question="Who wrote Hamlet?", answer="Shakespeare"):
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {"data_source": "x", "ability": "qa", "prompt": [{"role": "user", "content": question}],
           "reward_model": {"ground_truth": answer, "style": "rule"}}  # fmt: skip
    pq.write_table(pa.Table.from_pylist([row]), path)
    return path


def test_registry_entry_applies_whatever_the_file_name_or_case(tmp_path):
    registry = load_registry()
    simpleqa = write_jsonl(tmp_path / "SimpleQA.jsonl", [{"problem": "q", "answer": "a"}])
    hle = _rl_parquet(tmp_path / "hle_test.parquet")
    gaia = _rl_parquet(tmp_path / "gaia_test.parquet")
    aime = write_jsonl(tmp_path / "AIME25" / "test.jsonl", [{"problem": "q", "answer": 1}])
    xbench = write_jsonl(tmp_path / "XBench-DeepSearch.jsonl", [{"question": "q", "answer": "a"}])
    mine = write_jsonl(tmp_path / "mydata.jsonl", [{"question": "q", "answer": "a"}])
    entries = [str(simpleqa), str(hle), f"gaia={gaia}", str(aime), str(xbench), f"GAIA_copy={mine}", str(mine),
               f"WebWalkerQA={mine}"]  # fmt: skip
    specs = {s.name: s for s in resolve_benchmarks(entries, registry, None)}
    assert list(specs) == ["simpleqa", "hle", "gaia", "aime25", "xbench", "GAIA_copy", "mydata", "WebWalkerQA"]
    got = {n: (s.registry_entry, s.metric, s.task, s.search_mode) for n, s in specs.items()}
    assert got == {
        "simpleqa": ("simpleqa", "judge", "qa", "snippets"),
        "hle": ("hle", "judge", "deep_search", "browse"),
        "gaia": ("gaia", "judge", "deep_search", "browse"),  # name=path: the entry applies, file name aside
        "aime25": ("aime25", "judge", "math", "snippets"),
        "xbench": ("xbench", "judge", "deep_search", "browse"),  # via its alias
        "GAIA_copy": (None, "f1", "qa", "snippets"),  # not a registry name, file outside the registry: defaults
        "mydata": (None, "f1", "qa", "snippets"),
        "WebWalkerQA": ("webwalker", "judge", "qa", "snippets"),  # an alias as the name, any case
    }
    assert specs["hle"].format == "arpo_rl" and load_benchmark(specs["hle"]).samples[0].answers == ["Shakespeare"]


def test_demo_heldout_jsonl_reads_as_arpo_rl_rows(tmp_path):
    from llamafactory_agentic.tasks.synthetic import SYSTEM_PROMPT, TaskConfig, generate_task

    generate_task(TaskConfig(seed=3, sizes={"sft": 4, "train": 4, "heldout": 6}), tmp_path)
    spec = resolve_benchmarks([str(tmp_path / "heldout.jsonl")], load_registry(), None)[0]
    bench = load_benchmark(spec)
    rows = [json.loads(line) for line in (tmp_path / "heldout.jsonl").read_text().splitlines()]
    assert spec.name == "heldout" and spec.format == "arpo_rl" and len(bench.samples) == len(rows) == 6
    for sample, row in zip(bench.samples, rows):
        assert sample.system == SYSTEM_PROMPT and sample.question == row["prompt"][-1]["content"]
        assert sample.answers == [str(row["reward_model"]["ground_truth"])]


def test_train_val_without_a_training_config_asks_for_the_recipe(tmp_path):
    ft = SimpleNamespace(**vars(FT), arpo_max_prompt_length=1536, arpo_max_response_length=4096,
                         agentic_max_tool_calls=None)  # fmt: skip
    model = SimpleNamespace(model_name_or_path=str(tmp_path), adapter_name_or_path=None)
    with pytest.raises(
        EvalConfigError, match="has no agentic_config.json .*Set eval_training_config to the RL recipe"
    ):
        resolve_protocol(EvalArguments(eval_preset="train_val"), ft, model)
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny" / "arpo_cpu.yaml"
    p = resolve_protocol(EvalArguments(eval_preset="train_val", eval_training_config=str(recipe)), ft, model)
    assert (p.max_prompt_length, p.max_response_length, p.max_tool_calls) == (2048, 96, 2)  # the recipe's
    explicit = EvalArguments(eval_preset="train_val", eval_max_prompt_length=100, eval_max_response_length=50,
                             eval_max_tool_calls=1)  # fmt: skip
    assert resolve_protocol(explicit, ft, model).max_response_length == 50
    sft = Path(__file__).resolve().parents[2] / "recipes" / "tiny" / "agentic_sft_cpu.yaml"
    with pytest.raises(EvalConfigError, match="stage 'agentic_sft' recipe; train_val takes the RL recipe"):
        resolve_protocol(EvalArguments(eval_preset="train_val", eval_training_config=str(sft)), ft, model)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("<think> x </think> <answer> The answer is \\[ \\boxed{42} \\] </answer>", "42"),
        ("<answer> Paris </answer>", " Paris "),  # no box: the bare answer text
        ("<answer> \\boxed{\\text{Ottawa}} </answer>", "Ottawa"),
        ("I think \\boxed{7} is right", "7"),  # no answer span: the last box anywhere
        ("<answer></answer> then \\boxed{9}", "9"),  # an empty span counts as none
        ("a\n\nb\nc\nd\ne\nf", "b\nc\nd\ne\nf"),  # nothing: the last 5 lines
    ],
)
def test_reference_prediction(output, expected):
    from llamafactory_agentic.evaluation.reference import reference_prediction

    assert reference_prediction(output) == expected
    assert extract_prediction(output) in (None, "42", "Ottawa")  # current: only a box inside the answer span


def test_reference_scores_differ_from_current_where_the_reference_differs():
    from llamafactory_agentic.evaluation.reference import is_equiv, reference_scores

    assert rule_scores("Paris.", ["Paris"], "qa")["f1"] == 1.0  # current: punctuation stripped
    assert reference_scores("Paris.", ["Paris"], "qa") == {"em": 0.0, "acc": 1.0, "f1": 0.0, "math_equal": 0.0}
    assert reference_scores("the Nile", ["Nile"], "qa")["em"] == 1.0  # articles removed for QA
    assert reference_scores("The Nile River", ["Nile"], "qa")["f1"] == pytest.approx(2 / 3)
    assert rule_scores("70.0", ["70"], "math")["math_equiv"] == 1.0 and not is_equiv("70.0", "70")
    assert rule_scores("10%", ["10"], "math")["math_equiv"] == 1.0 and not is_equiv("10%", "10")
    assert is_equiv("\\dfrac{3}{4}", "3/4") and is_equiv("x = 5", "5") and is_equiv("\\frac12", "0.5")
    assert is_equiv("10\\%", "10") and is_equiv("5^{\\circ}", "5") and is_equiv("\\sqrt3", "\\sqrt{3}")
    assert reference_scores("", ["x"], "qa")["f1"] == 0.0
