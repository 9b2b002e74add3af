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

"""Kill and resume: a real `llamafactory-agentic eval` subprocess is killed (SIGKILL, whole process group) in the
middle of a run, a torn last line is left in its records file, and a second process finishes the run. The result must
have every record exactly once and the same metrics as an uninterrupted run; the remaining samples must be sent with
the same per-sample seeds. The policy is a local fake OpenAI-compatible server (real HTTP) with a delay per call;
every `<python>` call runs in the real sandbox."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from llamafactory_agentic.evaluation import evaluate

from .fake_openai import FakeOpenAIServer
from .helpers import sum_policy, write_jsonl


def console_script() -> str:
    return shutil.which("llamafactory-agentic", path=str(Path(sys.executable).parent)) or "llamafactory-agentic"


def config(tmp_path, model_dir, url, out):
    data = write_jsonl(
        tmp_path / "sums.jsonl", [{"question": f"What is {i} + 7?", "answer": i + 7} for i in range(10)]
    )
    return {
        "model_name_or_path": str(model_dir),
        "template": "qwen",
        "agentic_search_backend": "replay",
        "agentic_cache_path": str(tmp_path / "cache.sqlite"),
        "agentic_tool_workers": 2,
        "eval_preset": "paper",
        "eval_benchmarks": [{"name": "sums", "path": str(data), "task": "math", "metric": "judge"}],
        "eval_runs": 2,
        "eval_batch_size": 2,
        "eval_progress": False,
        "eval_base_url": url,
        "eval_output_dir": str(out),
    }


def count_lines(path: Path) -> int:
    return path.read_text(encoding="utf-8").count("\n") if path.is_file() else 0


@pytest.mark.slow
def test_killed_run_resumes_without_duplicates_and_same_metrics(tmp_path, tiny_model_dir, tiny_tokenizer):
    with FakeOpenAIServer(tiny_tokenizer, sum_policy, delay_s=0.1) as server:
        out = tmp_path / "resumed"
        cfg = tmp_path / "eval.yaml"
        cfg.write_text(yaml.safe_dump(config(tmp_path, tiny_model_dir, server.url, out)), encoding="utf-8")
        records = out / "records.jsonl"
        proc = subprocess.Popen(
            [console_script(), "eval", str(cfg)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ),
        )
        deadline = time.time() + 240
        while count_lines(records) < 4 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed:\n" + proc.stdout.read().decode()[-3000:]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        killed_at = count_lines(records)
        assert 4 <= killed_at < 20 and not (out / "metrics.json").exists()
        with open(records, "a", encoding="utf-8") as f:
            f.write('{"key": "sums/9/1", "benchmark": "su')  # a torn last line, as a kill during a write leaves
        first_bodies = len(server.completions)

        done = subprocess.run([console_script(), "eval", str(cfg)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        resumed_bodies = server.completions[first_bodies:]

        lines = records.read_text(encoding="utf-8").splitlines()
        keys = [json.loads(line)["key"] for line in lines]  # every line parses: the torn one was cut off
        assert len(keys) == len(set(keys)) == 20
        assert "sums: judge pass@1" in done.stdout

        reference_out = tmp_path / "uninterrupted"
        ref_cfg = config(tmp_path, tiny_model_dir, server.url, reference_out)
        start = len(server.completions)
        reference = evaluate(ref_cfg)
        reference_bodies = server.completions[start:]

    resumed = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert resumed["benchmarks"] == reference["benchmarks"] and resumed["fingerprint"] == reference["fingerprint"]
    assert resumed["benchmarks"]["sums"]["pass@1"]["mean"] == pytest.approx(5 / 10)
    # the samples finished after the restart were asked with the same per-sample, per-round seeds as without a kill
    sent = {(tuple(b["prompt"]), b["seed"]) for b in reference_bodies}
    assert resumed_bodies and all((tuple(b["prompt"]), b["seed"]) in sent for b in resumed_bodies)
    assert len({b["seed"] for b in reference_bodies}) == len(reference_bodies)  # one seed per sample, run and round


@pytest.mark.slow
def test_sampled_hf_run_killed_and_resumed_regenerates_the_same_trajectories(tmp_path, tiny_model_dir):
    """Sampling (temperature 1.0, not greedy) with the tiny model in-process (`hf` engine): a run killed with SIGKILL
    mid-way and resumed writes exactly the trajectories of an uninterrupted run. Each sample is seeded by (eval_seed,
    benchmark, sample id, run index) and its round; before the fix the `hf` engine drew from one shared generator, so
    the samples regenerated after the restart differed (issue 27: 125 of 200 identical)."""
    data = write_jsonl(
        tmp_path / "q.jsonl", [{"question": f"Name the number {i}.", "answer": str(i)} for i in range(24)]
    )

    def cfg(out):
        return {
            "model_name_or_path": str(tiny_model_dir),
            "template": "qwen",
            "agentic_search_backend": "replay",
            "agentic_cache_path": str(tmp_path / "cache.sqlite"),
            "eval_preset": "paper",
            "eval_benchmarks": [{"name": "nums", "path": str(data), "task": "qa", "metric": "f1"}],
            "eval_runs": 2,
            "eval_batch_size": 3,
            "eval_temperature": 1.0,
            "eval_max_new_tokens": 24,
            "eval_max_response_length": 48,
            "eval_progress": False,
            "eval_output_dir": str(out),
        }

    out = tmp_path / "resumed"
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(cfg(out)), encoding="utf-8")
    records = out / "records.jsonl"
    proc = subprocess.Popen([console_script(), "eval", str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))  # fmt: skip
    deadline = time.time() + 240
    while count_lines(records) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed:\n" + proc.stdout.read().decode()[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()
    killed_at = count_lines(records)
    assert 3 <= killed_at < 40, killed_at
    done = subprocess.run([console_script(), "eval", str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reference = evaluate(cfg(tmp_path / "uninterrupted"))
    assert reference["complete"]

    def trajectories(folder):
        rows = [json.loads(line) for line in (folder / "records.jsonl").read_text(encoding="utf-8").splitlines()]
        return {r["key"]: (r["segments"], r["finish_reason"], r["prediction"]) for r in rows}

    resumed, uninterrupted = trajectories(out), trajectories(tmp_path / "uninterrupted")
    assert len(resumed) == len(uninterrupted) == 48
    differ = [k for k in uninterrupted if resumed[k] != uninterrupted[k]]
    assert not differ, f"{len(differ)} of 48 trajectories differ after kill and resume: {differ[:5]}"
    assert len({str(v[0]) for v in uninterrupted.values()}) > 40  # sampled: the trajectories really differ
