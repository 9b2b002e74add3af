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

"""Honest failures: the model server (a separate process serving OpenAI-compatible `/v1/completions` over real HTTP;
it stands in for a vLLM server) is killed in the middle of a real `llamafactory-agentic eval` run. The samples it
could not answer become error records: not scored, counted in metrics.json, summary.md, summary.csv and report.html,
and the command exits 3. With the server still down a rerun is refused at the start-up check (exit 2); with the
server back on the same port the rerun retries exactly the failed samples and ends with the uninterrupted result."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from llamafactory_agentic.evaluation.records import is_error, read_records

from .test_eval_resume import config, console_script, count_lines


FAKE_SERVER = Path(__file__).with_name("fake_openai.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: Path, port: int, delay: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(FAKE_SERVER),
            "--tokenizer",
            str(model_dir),
            "--policy",
            "sum",
            "--port",
            str(port),
            "--delay",
            str(delay),
        ],  # fmt: skip
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("ready "), line + proc.stdout.read()[-2000:]
    return proc


def kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    proc.stdout.close()


@pytest.mark.slow
def test_server_killed_mid_run_gives_error_records_that_a_rerun_retries(tmp_path, tiny_model_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    out = tmp_path / "out"
    cfg = tmp_path / "eval.yaml"
    settings = config(tmp_path, tiny_model_dir, url, out)
    settings.update(eval_request_retries=2, eval_retry_wait=0.05, eval_request_timeout=20)
    cfg.write_text(yaml.safe_dump(settings), encoding="utf-8")
    records = out / "records.jsonl"

    server = start_server(tiny_model_dir, port, delay=0.15)
    try:
        run = subprocess.Popen([console_script(), "eval", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # fmt: skip
        deadline = time.time() + 240
        while count_lines(records) < 4 and run.poll() is None and time.time() < deadline:
            time.sleep(0.05)
    finally:
        kill(server)  # the model server dies with 4 or so of 20 records written
    stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 3, stdout[-3000:] + stderr[-3000:]  # errors past eval_max_error_rate (0)

    first, _ = read_records(records)
    errors = [r for r in first if is_error(r)]
    answered = [r for r in first if not is_error(r)]
    assert len(first) == 20 and 4 <= len(answered) < 20 and errors
    assert all("ConnectError" in r["error"] or "RemoteProtocolError" in r["error"] for r in errors)
    metrics = json.loads((out / "metrics.json").read_text())
    sums = metrics["benchmarks"]["sums"]
    assert metrics["errors"]["generation"] == len(errors) == sums["errors"]["generation"]
    assert metrics["errors"]["exceeded"] is True and sums["n_scored"] == len(answered)
    # pass@1 is over the answered records only (even X answered right, odd X wrong): an error is never a wrong answer
    runs = sorted({r["run"] for r in answered})
    per_run = [sum(int(r["sample_id"]) % 2 == 0 for r in answered if r["run"] == k)
               / sum(1 for r in answered if r["run"] == k) for k in runs]  # fmt: skip
    assert sums["pass@1"]["per_run"] == pytest.approx(per_run)
    scored = [json.loads(line) for line in (out / "scored.jsonl").read_text().splitlines()]
    assert all(r["headline"]["value"] is None and r["headline"]["source"] == "generation_error"
               for r in scored if is_error(r))  # fmt: skip
    summary = (out / "summary.md").read_text()
    assert f"**ERRORS: {len(errors)} generation errors and 0 judge errors in 20 records" in summary
    assert f"| {len(errors)}/0 |" in summary
    assert "generation_errors" in (out / "summary.csv").read_text().splitlines()[0]
    report = (out / "report.html").read_text()
    assert 'id="errors"' in report and f"{len(errors)} generation errors" in report
    assert f"ERRORS: {len(errors)} generation errors" in stderr

    # the server is still down: the start-up check refuses the run at once and names the server
    refused = subprocess.run([console_script(), "eval", str(cfg)], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and f"{url} cannot be reached" in refused.stderr, refused.stderr[-3000:]

    server = start_server(tiny_model_dir, port, delay=0.0)
    try:
        rerun = subprocess.run([console_script(), "eval", str(cfg)], capture_output=True, text=True, timeout=300)
    finally:
        kill(server)
    log = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, log[-3000:]
    assert f"{len(errors)} to generate ({len(errors)} of them generation errors of an earlier pass, retried)" in log
    assert "endpoint " + url in log and "token ids come back" in log  # what the start-up check found

    lines, _ = read_records(records)
    assert len(lines) == 20 + len(errors)  # appended: the answered records were not generated again
    assert [r["key"] for r in lines[:20]] == [r["key"] for r in first]
    retried = lines[20:]
    assert sorted(r["key"] for r in retried) == sorted(r["key"] for r in errors) and not any(map(is_error, retried))
    final = json.loads((out / "metrics.json").read_text())
    assert final["errors"]["total"] == 0 and final["errors"]["exceeded"] is False
    assert final["benchmarks"]["sums"]["pass@1"]["mean"] == pytest.approx(0.5)  # the uninterrupted result
    assert final["benchmarks"]["sums"]["n_scored"] == 20 and "ERRORS" not in (out / "summary.md").read_text()
