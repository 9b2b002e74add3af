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

"""Whole evaluation runs in-process: the `/v1/completions` engine against a local fake OpenAI-compatible server (real
HTTP; it stands in for a vLLM server hosting a trained policy), the judge and its verdict cache, resume refusal,
shards, compare, the tiny model through the `hf` engine, the `vllm` backend against a fake `vllm` module, and
`train_val` with a saved training config. The real python tool runs in its sandbox for every `<python>` call."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from llamafactory_agentic.evaluation import compare_runs, evaluate, finalize
from llamafactory_agentic.evaluation.compare import CompareError
from llamafactory_agentic.evaluation.endpoint import PROBE_USER
from llamafactory_agentic.evaluation.records import ResumeError, load_all_records

from .fake_openai import FakeOpenAIServer
from .helpers import base_config, judge_by_prediction, scripted_policy
from .test_eval_resume import console_script


JUDGE_REPLIES = {
    "Ottawa, Ontario": "Correct",  # EM says no, the judge says yes
    "1000": "The prediction is not correct.",
    "Spain": "Incorrect",
    "Nile": "Correct",  # not asked: exact match already
}


TINY_ARPO = Path(__file__).resolve().parents[2] / "recipes" / "tiny" / "arpo_cpu.yaml"


def run(tmp_path, server, **extra):
    return evaluate(base_config(tmp_path, server.model_dir, server.url, **extra))


@pytest.fixture()
def server(tiny_model_dir, tiny_tokenizer):
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy(), judge_by_prediction(JUDGE_REPLIES)) as s:
        s.model_dir = tiny_model_dir
        yield s


def test_endpoint_run_sends_token_ids_and_stop_strings(tmp_path, server, tiny_tokenizer):
    metrics = run(tmp_path, server, eval_judge_base_url=server.url, eval_judge_model="judge")
    body = server.completions[0]
    assert body["stop"] == ["</search>", "</python>", "</answer>", "<result>"]
    assert body["include_stop_str_in_output"] is True and body["return_token_ids"] is True
    assert (body["temperature"], body["top_p"], body["repetition_penalty"]) == (0.6, 0.95, 1.1)
    assert body["max_tokens"] == 4096 and isinstance(body["seed"], int) and body["model"] == "fake-policy"
    assert all(isinstance(t, int) for t in body["prompt"])
    prompt = tiny_tokenizer.decode(body["prompt"])
    assert prompt.startswith("<|im_start|>system\nYou are a helpful assistant") and prompt.endswith(
        "<|im_start|>assistant\n"
    )
    # second round of the python question: prompt + the model's call + the training observation string
    first = next(b["prompt"] for b in server.completions if "17 + 25" in tiny_tokenizer.decode(b["prompt"]))
    later = [b["prompt"] for b in server.completions if "17 + 25" in tiny_tokenizer.decode(b["prompt"])
             and tiny_tokenizer.decode(b["prompt"]).endswith("</python> <result>\n42\n</result>")]  # fmt: skip
    assert later and later[0][: len(first)] == first  # the context grows by token ids, never re-encoded as text

    records = {r["key"]: r for r in load_all_records(tmp_path / "out")}
    assert len(records) == 12  # 6 questions x 2 runs
    py = records["mymath/0/0"]
    assert py["prediction"] == "42" and py["finish_reason"] == "answer" and py["tool_counts"] == {"python": 1}
    assert py["tool_calls"][0]["status"] == "ok" and py["tool_calls"][0]["cached"] is False
    text = "".join(t for _, t in py["segments"])
    assert "99" not in text and "never seen" not in text and "trailing" not in text  # cut at the stop strings
    canada = records["myqa/0/0"]
    assert [c["status"] for c in canada["tool_calls"]] == ["cache_miss", "repeat"]  # replay miss, repeated query
    assert (
        canada["duplicate_queries"] == 1
        and canada["notices"]["repeat"] == 1
        and canada["prediction"] == ("Ottawa, Ontario")
    )
    nile = records["myqa/1/0"]
    assert nile["prediction"] == "Nile" and "<result> Nile" not in "".join(t for _, t in nile["segments"])

    scored = {
        json.loads(x)["key"]: json.loads(x) for x in (tmp_path / "out" / "scored.jsonl").read_text().splitlines()
    }
    assert scored["myqa/0/0"]["judge"]["source"] == "judge" and scored["myqa/0/0"]["judge"]["correct"] is True
    assert scored["myqa/0/0"]["headline"] == {"metric": "f1", "value": pytest.approx(2 / 3), "correct": False,
                                              "source": "f1"}  # fmt: skip
    assert scored["mymath/1/0"]["judge"]["reply"] == "The prediction is not correct."  # raw reply kept
    assert scored["mymath/1/0"]["headline"]["correct"] is False
    assert scored["mymath/2/0"]["judge"]["source"] == "rule"  # math-verify equivalent: no call
    m = metrics["benchmarks"]["mymath"]
    assert m["pass@1"]["mean"] == pytest.approx(2 / 3) and m["pass@1"]["std"] == 0.0
    assert m["pass@k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(2 / 3)}
    assert m["tool_calls_per_correct"] == pytest.approx(2 / 4)  # 2 python calls, 4 correct records
    assert metrics["benchmarks"]["myqa"]["headline_metric"] == "f1"
    # current profile: Ottawa, 1000, Spain, one call each, shared by the two runs' identical predictions; reference
    # profile (the judge-headline set mymath): 42 and 1000 against the integer gold answers 42 and 1024, which the
    # reference's is_equiv cannot read (so it asks the judge), with the reference's request (no temperature)
    assert metrics["judge"]["calls"] == 5 and len(server.chats) == 5 and metrics["judge"]["errors"] == 0
    assert sum("temperature" not in body for body in server.chats) == 2
    assert scored["mymath/2/0"]["reference"]["judge"]["source"] == "rule"  # \frac{3}{4} is_equiv the string gold
    for name in ("metrics.json", "summary.md", "summary.csv", "report.html", "records.jsonl", "run.json"):
        assert (tmp_path / "out" / name).is_file()
    # a second scoring pass judges the same records from the cache: zero calls
    before = len(server.chats)
    again = finalize(tmp_path / "out")
    assert len(server.chats) == before and again["judge"]["calls"] == 0
    assert again["benchmarks"] == metrics["benchmarks"]


def test_judge_replies_errors_and_retry_on_the_next_pass(tmp_path, tiny_model_dir, tiny_tokenizer):
    state = {"fail": True}

    def judge(prompt):
        prediction = prompt.rsplit("Predicted Answer:", 1)[-1].strip()
        if prediction == "Spain" and state["fail"]:
            return 500, {"error": "overloaded"}
        if prediction == "1000":
            return 200, b"<html>not json</html>"  # a body that is not a chat completion
        return {"Ottawa, Ontario": "banana"}.get(prediction, "Correct")  # garbage reply -> incorrect

    with FakeOpenAIServer(tiny_tokenizer, scripted_policy(), judge) as s:
        config = base_config(tmp_path, tiny_model_dir, s.url, eval_judge_base_url=s.url, eval_judge_model="j",
                             eval_judge_retries=2, eval_runs=1)  # fmt: skip
        metrics = evaluate(config)
        scored = {r["key"]: r for r in map(json.loads, (tmp_path / "out" / "scored.jsonl").read_text().splitlines())}
        assert scored["myqa/0/0"]["judge"] == {"correct": False, "source": "judge", "reply": "banana", "error": "",
                                               "reference_correct": False}  # fmt: skip
        spain, thousand = scored["myqa/2/0"]["judge"], scored["mymath/1/0"]["judge"]
        assert spain["source"] == "error" and "500" in spain["error"] and spain["correct"] is None
        assert thousand["source"] == "error" and "not a chat completion" in thousand["error"]
        # failed calls: Spain and 1000 (current), 1000 again under the reference profile's request
        assert metrics["judge"]["errors"] == 3 and metrics["benchmarks"]["mymath"]["judge_errors"] == 1
        # a judge error under a judge headline is not scored: mymath's pass@1 is over its 2 judged records, not 3
        assert scored["mymath/1/0"]["headline"] == {"metric": "judge", "value": None, "correct": None,
                                                    "source": "judge_error"}  # fmt: skip
        assert metrics["benchmarks"]["mymath"]["pass@1"]["mean"] == pytest.approx(1.0)
        assert metrics["benchmarks"]["mymath"]["n_scored"] == 2
        assert metrics["errors"] == {"generation": 0, "judge": 2, "total": 2, "records": 6, "rate": pytest.approx(1 / 3),
                                     "max_rate": 0.0, "exceeded": True}  # fmt: skip
        summary = (tmp_path / "out" / "summary.md").read_text()
        assert (
            "1 judge errors not scored (a rerun asks again)" in summary and "**ERRORS: 0 generation errors" in summary
        )
        calls = len(s.chats)
        # Ottawa once, Spain twice (a 500 is retried), 1000 once (a bad body is not); the reference profile: 42, 1000
        assert calls == 1 + 2 + 1 + 2
        state["fail"] = False
        again = finalize(tmp_path / "out")  # errors are not cached: only they are asked again
        assert len(s.chats) - calls == 1 + 1 + 1 and again["judge"]["errors"] == 2
        assert again["benchmarks"]["myqa"]["judge_errors"] == 0 and again["errors"]["total"] == 1


def test_resume_refuses_another_protocol_and_overwrite_starts_over(tmp_path, server):
    run(tmp_path, server, eval_runs=1)
    n = len(server.completions)
    run(tmp_path, server, eval_runs=1)  # same run: nothing to generate
    assert len(server.completions) == n
    with pytest.raises(ResumeError, match="fingerprint"):
        run(tmp_path, server, eval_runs=1, eval_temperature=0.0)
    metrics = run(tmp_path, server, eval_runs=1, eval_temperature=0.0, eval_overwrite=True)
    assert metrics["protocol"]["temperature"] == 0.0 and len(server.completions) > n


@pytest.mark.slow
def test_shards_merge_to_the_unsharded_result(tmp_path, server):
    whole = run(tmp_path / "whole", server)
    first = run(tmp_path / "sharded", server, eval_shard="0/2")
    assert first["complete"] is False and first["records"] == 6
    assert first["shards"] == [{"shard": "1/2", "file": "records.shard-1-of-2.jsonl", "exists": False, "missing": 6,
                                "expected": 6}]  # fmt: skip
    merge = subprocess.run([console_script(), "eval", "merge", str(tmp_path / "sharded" / "out")],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert merge.returncode == 1
    assert "shard 1/2 (records.shard-1-of-2.jsonl) has not started (no file): 6 of its 6 records missing" in (
        merge.stderr
    )
    merged = run(tmp_path / "sharded", server, eval_shard="1/2")
    assert merged["complete"] is True and merged["benchmarks"] == whole["benchmarks"]
    out = tmp_path / "sharded" / "out"
    assert sorted(p.name for p in out.glob("records*.jsonl")) == [
        "records.shard-0-of-2.jsonl",
        "records.shard-1-of-2.jsonl",
    ]
    assert finalize(out)["benchmarks"] == whole["benchmarks"]


def test_compare_two_runs(tmp_path, server, tiny_model_dir, tiny_tokenizer):
    run(tmp_path / "a", server)
    better = {**__import__("tests.evaluation.helpers", fromlist=["SCRIPTS"]).SCRIPTS}
    better["What is 2 to the power 10?"] = ["<think> 2^10 </think> <answer> \\boxed{1024} </answer>"]
    better["In which country is Porto?"] = ["<think> a </think> <search> Porto </search>", "<answer> \\boxed{Portugal} </answer>"]  # fmt: skip
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy(better)) as s2:
        evaluate(base_config(tmp_path / "b", tiny_model_dir, s2.url))
    result = compare_runs(tmp_path / "a" / "out", tmp_path / "b" / "out", samples=500)
    math = result["benchmarks"]["mymath"]
    assert (
        math["a"] == pytest.approx(2 / 3) and math["b"] == pytest.approx(1.0) and math["diff"] == pytest.approx(1 / 3)
    )
    assert [g["question"] for g in math["gained"]] == ["What is 2 to the power 10?"] and not math["lost"]
    qa = result["benchmarks"]["myqa"]
    assert qa["tool_call_ratio"] == pytest.approx((2 + 0 + 1) / (2 + 0 + 0))
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as s3:
        evaluate(base_config(tmp_path / "c", tiny_model_dir, s3.url, eval_top_p=0.9))
    with pytest.raises(CompareError, match=r"different protocols.*top_p"):
        compare_runs(tmp_path / "a" / "out", tmp_path / "c" / "out")


def test_several_servers_share_the_requests(tmp_path, tiny_model_dir, tiny_tokenizer):
    with (
        FakeOpenAIServer(tiny_tokenizer, scripted_policy(), token_ids=False) as s1,
        FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as s2,
    ):
        metrics = evaluate(base_config(tmp_path, tiny_model_dir, [s1.url, s2.url], eval_runs=1))
        assert s1.completions and s2.completions
    assert metrics["benchmarks"]["mymath"]["pass@1"]["mean"] == pytest.approx(2 / 3)


def test_engine_errors_end_the_sample_and_are_recorded(tmp_path, tiny_model_dir, tiny_tokenizer):
    policy = scripted_policy()

    def flaky(context, body):
        if "Porto" in context:
            return 500, {"error": "boom"}
        return policy(context, body)

    with FakeOpenAIServer(tiny_tokenizer, flaky) as s:
        evaluate(base_config(tmp_path, tiny_model_dir, s.url, eval_runs=1, eval_retry_wait=0.05))
        assert sum("Porto" in tiny_tokenizer.decode(b["prompt"]) for b in s.completions) == 4  # eval_request_retries
    record = {r["key"]: r for r in load_all_records(tmp_path / "out")}["myqa/2/0"]
    assert record["finish_reason"] == "error" and "500" in record["error"]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    qa = metrics["benchmarks"]["myqa"]
    # the failed sample is not scored: Ottawa (F1 2/3) and Nile (1.0) over 2 records, not 3
    assert qa["errors"]["generation"] == 1 and qa["n_scored"] == 2 and qa["n_records"] == 3
    assert qa["pass@1"]["mean"] == pytest.approx((2 / 3 + 1.0) / 2)
    assert metrics["errors"]["generation"] == 1 and metrics["errors"]["exceeded"] is True


def test_hf_engine_in_process_with_the_tiny_model(tmp_path, tiny_model_dir):
    config = base_config(tmp_path, tiny_model_dir, eval_runs=2, eval_max_new_tokens=8, eval_max_response_length=24)
    metrics = evaluate(config)
    records = load_all_records(tmp_path / "out")
    assert len(records) == 12 and metrics["complete"]
    assert all(r["tokens"]["generated"] <= 24 and r["finish_reason"] in ("round_length", "eos", "answer", "length",
                                                                         "self_result") for r in records)  # fmt: skip
    assert metrics["model"]["backend"] == "hf"


def test_train_val_preset_with_a_saved_training_config(tmp_path, tiny_model_dir, tiny_tokenizer):
    import shutil

    model = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, model)
    values = {"agentic_max_tool_calls": 1, "arpo_max_response_length": 200, "arpo_max_prompt_length": 1024}
    (model / "agentic_config.json").write_text(json.dumps({"values": values}), encoding="utf-8")
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as s:
        metrics = evaluate(base_config(tmp_path, model, s.url, eval_preset="train_val", eval_runs=None))
        body = s.completions[0]
    assert body["temperature"] == 0.0 and body["stop"] == ["</search>", "</python>"] and body["max_tokens"] == 200
    assert metrics["protocol"]["max_tool_calls"] == 1 and metrics["protocol"]["runs"] == 1
    records = {r["key"]: r for r in load_all_records(tmp_path / "out")}
    canada = records["myqa/0/0"]  # second search call: past the combined limit of 1 -> EOS, as in training
    assert canada["finish_reason"] == "call_limit" and canada["limit_hits"] == 1 and canada["prediction"] is None


class _FakeLLM:
    """Stands in for `vllm.LLM` (vLLM cannot run here): scripted replies, cut at the request's stop strings."""

    instances = []

    def __init__(self, **kwargs):
        self.kwargs, self.calls = kwargs, []
        self.tokenizer = None
        # vLLM 0.22: `LLM.llm_engine.model_config.logprobs_mode` (default raw_logprobs), which VLLMEngine checks
        config = types.SimpleNamespace(logprobs_mode=kwargs.get("logprobs_mode", "raw_logprobs"))
        self.llm_engine = types.SimpleNamespace(model_config=config)
        _FakeLLM.instances.append(self)

    def generate(self, prompts, sampling_params=None, use_tqdm=False):
        outs = []
        policy = scripted_policy()
        for prompt, sp in zip(prompts, sampling_params):
            self.calls.append(sp)
            text = policy(self.tokenizer.decode(prompt["prompt_token_ids"]), None)
            hits = [(text.find(s), s) for s in sp.stop if s in text]
            finish, reason = "length", None
            if hits:
                pos, stop = min(hits)
                text, finish, reason = text[: pos + len(stop)], "stop", stop
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: sp.max_tokens]
            done = types.SimpleNamespace(token_ids=ids, logprobs=None, finish_reason=finish, stop_reason=reason)
            outs.append(types.SimpleNamespace(outputs=[done]))
        return outs


def test_vllm_backend_against_a_fake_vllm_module(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch):
    import importlib.machinery

    import llamafactory.hparams.parser as lf_parser
    from llamafactory.model import load_tokenizer  # noqa: F401  (TRL's import-time package scan must not see the fake)

    module = types.ModuleType("vllm")
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    module.LLM = _FakeLLM
    module.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(lf_parser, "_check_extra_dependencies", lambda *a, **k: None)  # no vllm distribution here
    original = _FakeLLM.__init__

    def init(self, **kwargs):
        original(self, **kwargs)
        self.tokenizer = tiny_tokenizer

    monkeypatch.setattr(_FakeLLM, "__init__", init)
    metrics = evaluate(base_config(tmp_path, tiny_model_dir, infer_backend="vllm", eval_runs=1))
    llm = _FakeLLM.instances[-1]
    assert llm.kwargs["model"] == str(tiny_model_dir) and llm.kwargs["enable_prefix_caching"] is True
    assert llm.kwargs["max_model_len"] == 32768 and llm.kwargs["logprobs_mode"] == "processed_logprobs"
    sp = llm.calls[0]
    assert sp.stop == ["</search>", "</python>", "</answer>", "<result>"] and sp.include_stop_str_in_output
    assert sp.repetition_penalty == 1.1 and isinstance(sp.seed, int) and sp.max_tokens == 4096
    assert metrics["model"]["backend"] == "vllm"
    assert metrics["benchmarks"]["mymath"]["pass@1"]["mean"] == pytest.approx(2 / 3)


def test_config_errors_are_clear(tmp_path, tiny_model_dir):
    from llamafactory_agentic.evaluation.config import EvalConfigError

    with pytest.raises(EvalConfigError, match=r"unknown evaluation keys \['eval_tempreature'\]"):
        evaluate(base_config(tmp_path, tiny_model_dir, eval_tempreature=0.1))
    with pytest.raises(EvalConfigError, match=r"\['temperature'\]: generation keys.*eval_temperature"):
        evaluate(base_config(tmp_path, tiny_model_dir, temperature=0.1))
    with pytest.raises(EvalConfigError, match="eval_output_dir is not set"):
        evaluate(base_config(tmp_path, tiny_model_dir, eval_output_dir=None))
    assert not Path(tmp_path / "out").exists()


def test_training_cache_read_only_replays_exactly(tmp_path, server):
    from llamafactory_agentic.tools import normalize_search_query, open_cache

    cache_path = tmp_path / "training_cache.sqlite"
    cache = open_cache(str(cache_path))
    cache.put("search", normalize_search_query("capital of Canada"), "Page 1: Ottawa is the capital of Canada.")
    cache.close()
    keys = {"agentic_cache_path": str(cache_path), "agentic_cache_mode": "read_only", "eval_runs": 1}
    runs = []
    for name in ("first", "second"):
        run(tmp_path / name, server, **keys)
        runs.append({r["key"]: r for r in load_all_records(tmp_path / name / "out")})
    canada = runs[0]["myqa/0/0"]
    assert canada["tool_calls"][0]["status"] == "ok" and canada["tool_calls"][0]["cached"] is True
    assert "Ottawa is the capital of Canada." in "".join(t for kind, t in canada["segments"] if kind == "obs")

    def strip(record):
        return {k: v for k, v in record.items() if k not in ("latency_s", "finished_at", "tool_calls")} | {
            "calls": [(c["tool"], c["content"], c["status"], c["cached"]) for c in record["tool_calls"]]
        }

    assert {k: strip(r) for k, r in runs[0].items()} == {k: strip(r) for k, r in runs[1].items()}
    reopened = open_cache(str(cache_path), mode="read_only")
    assert reopened.count() == 1  # nothing written in read_only mode
    reopened.close()


def test_train_val_on_an_arpo_rl_file_uses_its_own_system_prompt(tmp_path, server, shared_data, tiny_tokenizer):
    valid = shared_data / "arpo" / "rl" / "valid.parquet"
    metrics = run(tmp_path, server, eval_preset="train_val", eval_runs=None, eval_benchmarks=[str(valid)],
                  eval_max_samples=3, eval_headline_metric="accuracy", eval_training_config=str(TINY_ARPO))  # fmt: skip
    prompt = tiny_tokenizer.decode(server.completions[0]["prompt"])
    assert "wikipedia search tool and python interpreter tool" in prompt and "\\boxed{answer here}" in prompt
    valid_metrics = metrics["benchmarks"]["valid"]
    assert valid_metrics["headline_metric"] == "accuracy" and valid_metrics["n_questions"] == 3
    rows = shared_data.facts["rl_rows"]["valid"]  # the release: 180
    assert any(
        w.startswith(f"valid: evaluating the first 3 of {rows} rows (eval_max_samples") for w in metrics["warnings"]
    )


def _fake_vllm_distribution(folder: Path, version: str, monkeypatch) -> None:
    """A `vllm` distribution record on sys.path (vLLM itself cannot be installed on the CPU machines)."""
    info = folder / f"vllm-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(folder))


def test_vllm_backend_accepts_the_vllm_extra_release(tmp_path, tiny_model_dir, monkeypatch):
    """LLaMA-Factory's `vllm<=0.11.0` check refused vLLM 0.22.1 (the extra's release) before the evaluation began."""
    from llamafactory_agentic.evaluation.runner import parse_eval_config

    monkeypatch.delenv("DISABLE_VERSION_CHECK", raising=False)
    _fake_vllm_distribution(tmp_path / "site", "0.22.1", monkeypatch)
    setup = parse_eval_config(base_config(tmp_path, tiny_model_dir, infer_backend="vllm"))
    assert str(getattr(setup.model_args.infer_backend, "value", setup.model_args.infer_backend)) == "vllm"


def test_vllm_backend_refuses_a_release_outside_the_extra(tmp_path, tiny_model_dir, monkeypatch):
    from llamafactory_agentic.evaluation.runner import VLLM_REQUIREMENT, parse_eval_config

    monkeypatch.delenv("DISABLE_VERSION_CHECK", raising=False)
    _fake_vllm_distribution(tmp_path / "site", "0.11.0", monkeypatch)
    with pytest.raises(ImportError, match=VLLM_REQUIREMENT.replace(".", r"\.")):
        parse_eval_config(base_config(tmp_path, tiny_model_dir, infer_backend="vllm"))


def test_demo_heldout_split_by_path_with_the_training_recipe(tmp_path, server, tiny_tokenizer):
    from llamafactory_agentic.tasks.synthetic import SYSTEM_PROMPT, TaskConfig, generate_task

    generate_task(TaskConfig(seed=1, sizes={"sft": 4, "train": 4, "heldout": 5}), tmp_path / "task")
    heldout = tmp_path / "task" / "heldout.jsonl"
    config = base_config(tmp_path, server.model_dir, server.url, eval_preset="train_val", eval_runs=None,
                         eval_benchmarks=[str(heldout)], eval_headline_metric="accuracy",
                         eval_training_config=str(TINY_ARPO))  # fmt: skip
    del config["agentic_python_timeout"]  # not set for the evaluation: the training's applies
    metrics = evaluate(config)
    assert metrics["benchmarks"]["heldout"]["n_questions"] == 5 and metrics["errors"]["total"] == 0
    body = server.completions[0]
    assert SYSTEM_PROMPT in tiny_tokenizer.decode(body["prompt"])  # the row's own system prompt
    assert body["max_tokens"] == 96 and body["temperature"] == 0.0  # the recipe's response budget, greedy
    protocol = metrics["protocol"]
    assert (protocol["max_prompt_length"], protocol["max_tool_calls"]) == (2048, 2)
    assert protocol["tools"]["python_timeout"] == 10  # the recipe's, not the evaluation YAML's default
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert f"| heldout | `{heldout}` | none (defaults) | qa | accuracy | snippets |" in summary


def test_train_val_on_an_sft_checkpoint_without_recipe_is_refused(tmp_path, server):
    from llamafactory_agentic.evaluation.config import EvalConfigError

    with pytest.raises(EvalConfigError, match="has no agentic_config.json"):
        run(tmp_path, server, eval_preset="train_val", eval_runs=None)
    assert not server.completions


@pytest.mark.slow
def test_vllm_backend_without_vllm_gives_the_install_hint(tmp_path, tiny_model_dir):
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(json.dumps(base_config(tmp_path, tiny_model_dir, infer_backend="vllm")), encoding="utf-8")
    done = subprocess.run([console_script(), "eval", str(cfg)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert (
        "infer_backend: vllm needs vLLM, which is not installed: `pip install -c constraints.txt "
        "llamafactory-agentic[vllm]`" in done.stderr
    )


def test_two_scoring_profiles_side_by_side_and_the_reference_prompts(tmp_path, tiny_model_dir, tiny_tokenizer):
    from llamafactory_agentic.evaluation.reference import REFERENCE_PROMPTS

    from .helpers import write_jsonl

    scripts = {
        "Capital of France?": ["<think> a </think> <answer> \\boxed{Paris.} </answer>"],  # punctuation kept: F1 0
        "Capital of Italy?": ["<think> a </think> <answer> Rome </answer>"],  # no box: reference reads the bare text
        "What is 69 + 1?": ["<think> a </think> <answer> \\boxed{70.0} </answer>"],  # math-verify yes, is_equiv no
    }
    qa = write_jsonl(tmp_path / "d" / "capitals.jsonl", [{"question": "Capital of France?", "answer": "Paris"},
                                                         {"question": "Capital of Italy?", "answer": "Rome"}])  # fmt: skip
    sums = write_jsonl(tmp_path / "d" / "sum.jsonl", [{"problem": "What is 69 + 1?", "answer": 70}])
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy(scripts)) as s:
        config = base_config(tmp_path, tiny_model_dir, s.url, eval_runs=1,
                             eval_benchmarks=[str(qa), f"xbench={sums}"])  # fmt: skip
        metrics = evaluate(config)
        prompts = [tiny_tokenizer.decode(b["prompt"]) for b in s.completions]
    # the paper preset's default system prompt is the reference's, per set: xbench gets the Chinese one
    assert any(REFERENCE_PROMPTS["code_search"] in p and "France" in p for p in prompts)
    assert any(REFERENCE_PROMPTS["code_search_cn"] in p and "69 + 1" in p for p in prompts)
    capitals, xbench = metrics["benchmarks"]["capitals"], metrics["benchmarks"]["xbench"]
    assert capitals["pass@1"]["mean"] == pytest.approx(0.5)  # current: Paris. = Paris, Rome has no prediction
    assert capitals["reference"]["pass@1"]["mean"] == pytest.approx(0.5)  # reference: Paris. != Paris, Rome = Rome
    assert capitals["metrics"]["em"] == 0.5 and capitals["reference"]["metrics"]["em"] == 0.5
    scored = {
        json.loads(x)["key"]: json.loads(x) for x in (tmp_path / "out" / "scored.jsonl").read_text().splitlines()
    }
    assert scored["capitals/0/0"]["headline"]["value"] == 1.0 and scored["capitals/0/0"]["reference"]["headline"][
        "value"] == 0.0  # fmt: skip
    assert (
        scored["capitals/1/0"]["prediction"] is None and scored["capitals/1/0"]["reference"]["prediction"] == " Rome "
    )
    # judge headline without a judge: current = math-verify (70.0 = 70), reference = MATH is_equiv (70.0 != 70)
    assert xbench["pass@1"]["mean"] == 1.0 and xbench["reference"]["pass@1"]["mean"] == 0.0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "pass@1 current (mean ± std over 1 runs)" in summary and "pass@1 reference" in summary
    assert "| capitals | 2 | f1 | 50.0 ± 0.0 | 50.0 ± 0.0 |" in summary
    assert "| xbench | 1 | judge | 100.0 ± 0.0 | 0.0 ± 0.0 |" in summary
    header = (tmp_path / "out" / "summary.csv").read_text().splitlines()[0].split(",")
    assert "reference_pass@1_mean" in header and "reference_f1" in header
    assert "reference_pass@1_mean" in (tmp_path / "out" / "report.html").read_text()


def test_chat_api_gives_the_same_trajectories_and_a_rerun_costs_no_generation(tmp_path, tiny_model_dir,
                                                                              tiny_tokenizer):  # fmt: skip
    cache = str(tmp_path / "replies.sqlite")
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as s:
        completions = evaluate(base_config(tmp_path / "c", tiny_model_dir, s.url, eval_runs=1))
        chat = evaluate(base_config(tmp_path / "h", tiny_model_dir, s.url, eval_runs=1, eval_api="chat",
                                    eval_response_cache=cache))  # fmt: skip
        bodies = [x for x in s.chat_bodies if x.get("user") != PROBE_USER]  # the start-up check's aside
        sent = len(s.completions)
        again = evaluate(base_config(tmp_path / "h2", tiny_model_dir, s.url, eval_runs=1, eval_api="chat",
                                     eval_response_cache=cache, eval_headline_metric="em"))  # fmt: skip
        assert len(s.completions) == sent  # a new folder and a new metric: every reply from the cache
    a = {r["key"]: r for r in load_all_records(tmp_path / "c" / "out")}
    b = {r["key"]: r for r in load_all_records(tmp_path / "h" / "out")}
    c = {r["key"]: r for r in load_all_records(tmp_path / "h2" / "out")}

    def trajectory(r):
        calls = [(t["tool"], t["content"], t["status"]) for t in r["tool_calls"]]
        return r["prediction"], r["finish_reason"], "".join(text for _, text in r["segments"]), calls

    assert len(a) == 6 and {k: trajectory(r) for k, r in a.items()} == {k: trajectory(r) for k, r in b.items()}
    assert {k: trajectory(r) for k, r in c.items()} == {k: trajectory(r) for k, r in b.items()}
    assert chat["benchmarks"]["mymath"]["pass@1"] == completions["benchmarks"]["mymath"]["pass@1"]
    assert chat["model"]["api"] == "chat" and again["benchmarks"]["myqa"]["headline_metric"] == "em"
    assert bodies[0]["messages"][0]["role"] == "system" and "continue_final_message" not in bodies[0]
    later = [x for x in bodies if x.get("continue_final_message")]  # rounds after a tool call continue the turn
    assert later and later[0]["messages"][-1]["role"] == "assistant" and later[0]["add_generation_prompt"] is False
    assert "<result>\n" in later[0]["messages"][-1]["content"]  # the observation inside the assistant turn
