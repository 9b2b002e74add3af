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

"""Evaluation fidelity (issue 34, mediums 6 and 8): `train_val` repeats the training's recorded keys and says where each
protocol value came from; the `reference` profile sends the reference harness's judge request; the run's identity,
fingerprint, row cap and exit codes. Runs go through a local fake OpenAI-compatible server (real HTTP; it stands in for
a vLLM server hosting the checkpoint and for the judge)."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from llamafactory_agentic.evaluation import evaluate
from llamafactory_agentic.evaluation.cli import run_eval_command
from llamafactory_agentic.evaluation.config import (
    EvalArguments,
    EvalConfigError,
    read_training_config,
    resolve_protocol,
)
from llamafactory_agentic.evaluation.records import load_all_records
from llamafactory_agentic.rewards.judge import JUDGE_PROMPT

from .fake_openai import FakeOpenAIServer
from .helpers import base_config, scripted_policy, write_jsonl


FT = SimpleNamespace(agentic_reward="f1", agentic_reward_math="f1", agentic_search_backend="local")


# ---------------------------------------------------------------------------------------------- medium 6: train_val
def test_training_records_every_tool_and_rollout_key(tmp_path):
    from llamafactory_agentic.train.presets import agentic_namespace, resolve_presets

    args = agentic_namespace("arpo", {"agentic_search_topk": 1, "agentic_python_max_output_chars": 700,
                                      "arpo_max_response_length": 300})  # fmt: skip
    resolve_presets(args, output_dir=str(tmp_path), verbose=False)
    saved = json.loads((tmp_path / "agentic_config.json").read_text())
    assert saved["keys"]["agentic_search_topk"] == 1 and saved["keys"]["agentic_tool_protocol"] == "inline_tags"
    values = read_training_config(str(tmp_path))
    assert values["agentic_search_topk"] == 1 and values["agentic_python_max_output_chars"] == 700
    # a checkpoint-N folder reads the run's agentic_config.json in the output folder above it
    (tmp_path / "checkpoint-2").mkdir()
    assert read_training_config(str(tmp_path / "checkpoint-2"))["agentic_search_topk"] == 1


def test_train_val_uses_the_checkpoint_keys_and_reports_each_source(tmp_path, tiny_model_dir, tiny_tokenizer):
    model = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, model)
    values = {"agentic_max_tool_calls": 1, "arpo_max_response_length": 200, "arpo_max_prompt_length": 1024}
    keys = {"agentic_search_topk": 1, "agentic_search_snippet_chars": 300, "agentic_python_timeout": 20}
    (model / "agentic_config.json").write_text(json.dumps({"values": values, "keys": keys}), encoding="utf-8")
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as s:
        config = base_config(tmp_path, model, s.url, eval_preset="train_val", eval_runs=None, eval_max_new_tokens=48,
                             agentic_search_topk=3)  # fmt: skip
        path = tmp_path / "eval.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        metrics = evaluate(str(path), ["eval_max_tool_calls=2"])
        first = s.completions[0]
    protocol = metrics["protocol"]
    # the checkpoint's top-k and response budget, not the config file's 3 and 48 tokens per call
    assert protocol["tools"]["search_topk"] == 1 and protocol["tools"]["search_snippet_chars"] == 300
    assert protocol["max_new_tokens"] is None and protocol["max_response_length"] == 200 and first["max_tokens"] == 200
    assert protocol["max_tool_calls"] == 2  # the command line wins over the checkpoint's 1
    sources = metrics["protocol_sources"]
    assert sources["tools.search_topk"] == "checkpoint" and sources["max_new_tokens"] == "checkpoint"
    assert sources["max_response_length"] == "checkpoint" and sources["max_tool_calls"] == "command line"
    assert sources["runs"] == "default (preset train_val)" and sources["seed"] == "default (preset train_val)"
    assert sources["tools.python_max_output_chars"] == "default" and sources["stop_strings"].startswith("default")
    warnings = "\n".join(metrics["warnings"])
    assert "eval_max_new_tokens=48 in the config file is not used" in warnings
    assert "agentic_search_topk=3 in the config file is not used: train_val takes agentic_search_topk=1" in warnings
    assert "eval_max_tool_calls=2 (command line) overrides agentic_max_tool_calls=1" in warnings
    assert "does not record" in warnings and "agentic_python_max_output_chars" in warnings  # an older file's gap
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "- `tools.search_topk`: `1` (checkpoint)" in summary
    assert "- `max_tool_calls`: `2` (command line)" in summary
    assert f"training config read by `train_val`: `{model / 'agentic_config.json'}`" in summary


# ---------------------------------------------------------------------------------------------- medium 8: fidelity
def test_paper_preset_caps_every_set_at_500_rows_as_the_reference():
    from llamafactory_agentic.evaluation.config import resolve_max_samples

    assert resolve_max_samples(EvalArguments()) == 500
    assert resolve_max_samples(EvalArguments(eval_preset="train_val")) is None
    assert resolve_max_samples(EvalArguments(eval_max_samples=-1)) is None
    assert resolve_max_samples(EvalArguments(eval_max_samples=20)) == 20
    with pytest.raises(EvalConfigError, match="-1: every row"):
        EvalArguments(eval_max_samples=0)


def test_tool_protocol_is_part_of_the_fingerprint():
    inline = resolve_protocol(EvalArguments(), SimpleNamespace(**vars(FT)))
    template = resolve_protocol(EvalArguments(), SimpleNamespace(**vars(FT), agentic_tool_protocol="template"))
    assert template.tools["tool_protocol"] == "template" and "tool_protocol" not in inline.tools
    assert template.fingerprint != inline.fingerprint


SIMPLEQA = [
    {"question": "Who received the IEEE Frank Rosenblatt Award in 2010?", "answer": ["Michio Sugeno"]},
    {"question": "Which river flows through Cairo?", "answer": "Nile"},
    {"question": "In which country is Porto?", "answer": ["Portugal", "Portuguese Republic"]},
]
SIMPLEQA_SCRIPTS = {
    SIMPLEQA[0]["question"]: ["<think> a </think> <answer> \\boxed{Michio Sugeno} </answer>"],
    SIMPLEQA[1]["question"]: ["<think> a </think> <answer> \\boxed{Nile} </answer>"],
    SIMPLEQA[2]["question"]: ["<think> a </think> <answer> \\boxed{Spain} </answer>"],
}


def test_reference_profile_sends_the_reference_judge_request(tmp_path, tiny_model_dir, tiny_tokenizer):
    data = write_jsonl(tmp_path / "d" / "simpleqa.jsonl", SIMPLEQA)

    def judge(prompt):
        return "Incorrect" if "Spain" in prompt.rsplit("Predicted Answer:", 1)[-1] else "Correct"

    with FakeOpenAIServer(tiny_tokenizer, scripted_policy(SIMPLEQA_SCRIPTS), judge) as s:
        config = base_config(tmp_path, tiny_model_dir, s.url, eval_runs=1, eval_judge_base_url=s.url,
                             eval_judge_model="judge", eval_benchmarks=[{"name": "simpleqa", "path": str(data),
                                                                         "task": "qa", "metric": "judge"}])  # fmt: skip
        metrics = evaluate(config)
        chats = list(s.chats)
    reference = [b for b in chats if "temperature" not in b]  # the reference sends no temperature
    current = [b for b in chats if "temperature" in b]
    assert all(b["temperature"] == 0.0 for b in current)
    sent = sorted(b["messages"][0]["content"] for b in reference)
    # byte for byte the reference's prompt: the answer field as the file holds it, a list with its brackets; the
    # string gold `Nile` equals the prediction under is_equiv, so the reference decides it without a call
    expected = sorted(
        JUDGE_PROMPT.format(question=row["question"], labeled_answer=row["answer"], pred_answer=pred)
        for row, pred in ((SIMPLEQA[0], "Michio Sugeno"), (SIMPLEQA[2], "Spain"))
    )
    assert sent == expected and "Golden Answer: ['Michio Sugeno']\n" in sent[1]
    assert all(b["messages"] == [{"role": "user", "content": b["messages"][0]["content"]}] for b in reference)
    assert set(reference[0]) == {"model", "messages"}
    lines = (tmp_path / "out" / "scored.jsonl").read_text().splitlines()
    scored = {r["key"]: r for r in map(json.loads, lines)}
    assert scored["simpleqa/0/0"]["reference"]["judge"]["source"] == "judge"  # a list gold is never is_equiv
    assert scored["simpleqa/1/0"]["reference"]["judge"]["source"] == "rule"
    # the headline says `judge` only where the judge saw the record
    assert scored["simpleqa/1/0"]["headline"]["source"] == "rule_equivalent"
    assert scored["simpleqa/1/0"]["reference"]["headline"]["source"] == "rule_equivalent"
    assert scored["simpleqa/2/0"]["headline"]["source"] == "judge"
    assert metrics["benchmarks"]["simpleqa"]["headline_source"] == {"rule_equivalent": 2, "judge": 1}
    assert metrics["benchmarks"]["simpleqa"]["reference"]["pass@1"]["mean"] == pytest.approx(2 / 3)


def test_a_moved_server_resumes_the_run(tmp_path, tiny_model_dir, tiny_tokenizer):
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as first:
        evaluate(base_config(tmp_path, tiny_model_dir, first.url, eval_runs=1))
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as moved:
        assert moved.url != first.url
        metrics = evaluate(base_config(tmp_path, tiny_model_dir, moved.url, eval_runs=1))
        assert moved.completions == [] and metrics["complete"]  # resumed: nothing generated again
    assert len(load_all_records(tmp_path / "out")) == 6


def test_an_incomplete_shard_exits_1(tmp_path, tiny_model_dir, tiny_tokenizer, capsys):
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as s:
        path = tmp_path / "eval.yaml"
        path.write_text(yaml.safe_dump(base_config(tmp_path, tiny_model_dir, s.url, eval_runs=1)), encoding="utf-8")
        assert run_eval_command([str(path), "eval_shard=0/2"]) == 1
        assert "shard 1/2" in capsys.readouterr().err
        assert run_eval_command([str(path), "eval_shard=1/2"]) == 0
    assert Path(tmp_path / "out" / "metrics.json").is_file()
