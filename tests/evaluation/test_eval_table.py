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

"""`eval table`: two finished runs (a weaker and a better scripted policy behind a local fake OpenAI-compatible server,
real HTTP; it stands in for two served checkpoints) become the papers' Table 1/2 layout through the real
`llamafactory-agentic eval table` command, in Markdown, CSV and HTML."""

import csv
import subprocess

import pytest

from llamafactory_agentic.evaluation import evaluate

from .fake_openai import FakeOpenAIServer
from .helpers import MATH_ROWS, QA_ROWS, SCRIPTS, base_config, scripted_policy, write_jsonl
from .test_eval_resume import console_script


@pytest.mark.slow
def test_table_of_two_runs_in_the_papers_layout(tmp_path, tiny_model_dir, tiny_tokenizer):
    data = tmp_path / "data"
    aime = write_jsonl(data / "a.jsonl", MATH_ROWS[:2])  # 17 + 25 (right), 2^10 (wrong, then right in B)
    hotpot = write_jsonl(data / "h.jsonl", [QA_ROWS[0], QA_ROWS[2]])  # Canada (F1 2/3), Porto (0, then 1 in B)
    gaia = write_jsonl(data / "g.jsonl", [QA_ROWS[1]])  # Nile (right)
    benchmarks = [f"aime24={aime}", f"hotpotqa={hotpot}", f"gaia={gaia}"]
    better = dict(SCRIPTS)
    better["What is 2 to the power 10?"] = ["<think> 2^10 </think> <answer> \\boxed{1024} </answer>"]
    better["In which country is Porto?"] = ["<think> a </think> <answer> \\boxed{Portugal} </answer>"]
    runs = []
    for name, scripts in (("sft", SCRIPTS), ("arpo", better)):
        with FakeOpenAIServer(tiny_tokenizer, scripted_policy(scripts)) as server:
            out = tmp_path / name
            evaluate(base_config(tmp_path, tiny_model_dir, server.url, eval_benchmarks=benchmarks,
                                 eval_output_dir=str(out)))  # fmt: skip
            runs.append(str(out))
    done = subprocess.run(
        [console_script(), "eval", "table", *runs, "--labels", "SFT,ARPO", "--output", str(tmp_path / "table")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    md = (tmp_path / "table" / "table.md").read_text()
    assert md in done.stdout
    assert "### Table 1: reasoning (pass@1 ± std)" in md and "### Table 2: deep search (pass@2)" in md
    assert "Groups: Mathematical Reasoning (AIME24) | Knowledge-Intensive Reasoning (HotpotQA)." in md
    assert "| Checkpoint | AIME24 | HotpotQA | Avg. |" in md and "| Checkpoint | GAIA | Avg. |" in md
    assert "| SFT | 50.0 ± 0.0 | 33.3 ± 0.0 | 41.7* |" in md  # (50 + 33.3) / 2 over 2 of the 10 sets
    assert "| ARPO | 100.0 ± 0.0 | 83.3 ± 0.0 | 91.7* |" in md
    assert "| SFT | 100.0 ± 0.0 | 100.0* |" in md  # GAIA
    assert "SFT: average over 2 of 10 sets" in md and "different protocols" not in md
    rows = list(csv.DictReader((tmp_path / "table" / "table.csv").read_text().splitlines()))
    sft_aime = next(r for r in rows if r["checkpoint"] == "SFT" and r["set"] == "aime24")
    assert sft_aime["group"] == "Mathematical Reasoning" and float(sft_aime["pass@1_mean"]) == 0.5
    assert sft_aime["metric"] == "judge" and sft_aime["pass@2"] == "0.5"
    avg = next(
        r for r in rows if r["checkpoint"] == "ARPO" and r["set"] == "Avg." and r["table"].startswith("Table 1")
    )
    assert abs(float(avg["pass@1_mean"]) - (1.0 + 5 / 6) / 2) < 1e-9 and avg["sets"] == "2/10"
    page = (tmp_path / "table" / "table.html").read_text()
    assert '<th colspan="1">Mathematical Reasoning</th>' in page and "<td>ARPO</td>" in page
    refused = subprocess.run([console_script(), "eval", "table", str(tmp_path / "nope")], capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert refused.returncode == 2 and "no metrics.json" in refused.stderr
