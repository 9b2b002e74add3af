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

from llamafactory_agentic.evaluation import compare_runs, evaluate
from llamafactory_agentic.evaluation.compare import CompareError
from llamafactory_agentic.evaluation.table import build_table, format_csv, format_html, format_markdown

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
    assert "| SFT | 50.0 ± 0.0 (n=2) | 33.3 ± 0.0 (n=2) | 41.7* |" in md  # (50 + 33.3) / 2 over 2 of the 10 sets
    assert "| ARPO | 100.0 ± 0.0 (n=2) | 83.3 ± 0.0 (n=2) | 91.7* |" in md
    assert "| SFT | 100.0 ± 0.0 (n=1) | 100.0* |" in md  # GAIA
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


def test_table_shows_n_errors_and_caps_and_marks_what_compare_refuses(tmp_path, tiny_model_dir, tiny_tokenizer):
    policy = scripted_policy()

    def flaky(context, body):  # Porto fails after its retries: an error record, never scored
        return (500, {"error": "boom"}) if "Porto" in context else policy(context, body)

    qa = [{"name": "hotpotqa", "path": str(write_jsonl(tmp_path / "d" / "h.jsonl", QA_ROWS)), "task": "qa"}]
    runs = {}
    for name, server_policy, extra in (("full", policy, {}), ("capped", policy, {"eval_max_samples": 2}),
                                       ("errors", flaky, {})):  # fmt: skip
        with FakeOpenAIServer(tiny_tokenizer, server_policy) as server:
            out = tmp_path / name
            evaluate(base_config(tmp_path, tiny_model_dir, server.url, eval_benchmarks=qa, eval_runs=1,
                                 eval_retry_wait=0.01, eval_request_retries=1, eval_output_dir=str(out), **extra))  # fmt: skip
            runs[name] = str(out)
    with pytest.raises(CompareError, match="different questions \\(3 in A, 2 in B"):
        compare_runs(runs["full"], runs["capped"])
    data = build_table([runs["full"], runs["capped"], runs["errors"]], ["FULL", "CAPPED", "ERRORS"])
    md = format_markdown(data)
    # every cell says what it is over; the capped run evaluated other questions than the first row: marked †
    assert "| FULL | 55.6 ± 0.0 (n=3) | 55.6* |" in md
    assert "| CAPPED | 83.3 ± 0.0 (n=2 of 3)† | 83.3*† |" in md
    assert "| ERRORS! | 83.3 ± 0.0 (n=3, 1/3 unscored) | 83.3* |" in md  # same questions as FULL: comparable
    assert "† HotpotQA: CAPPED (n=2 of 3) evaluated other questions than FULL (n=3): not comparable with it" in md
    assert "`eval compare` refuses such a pair" in md
    assert "! ERRORS: 1 of 3 records (33.3%) are generation or judge errors, past its eval_max_error_rate" in md
    # the pair without a mark is one that compare takes (over the questions scored in both)
    assert compare_runs(runs["full"], runs["errors"])["benchmarks"]["hotpotqa"]["questions"] == 2
    rows = list(csv.DictReader(format_csv(data).splitlines()))
    capped = next(r for r in rows if r["checkpoint"] == "CAPPED" and r["set"] == "hotpotqa")
    assert (capped["n"], capped["rows"], capped["comparable"]) == ("2", "3", "False")
    errors = next(r for r in rows if r["checkpoint"] == "ERRORS" and r["set"] == "hotpotqa")
    assert (errors["errors"], errors["records"], errors["run_errors_exceeded"]) == ("1", "3", "True")
    page = format_html(data)
    assert "83.3 ± 0.0 (n=2 of 3)†" in page and "evaluated other questions than FULL" in page
    assert "<td>ERRORS!</td><td>83.3 ± 0.0 (n=3, 1/3 unscored)</td>" in page
