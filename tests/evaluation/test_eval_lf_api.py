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

"""A real `llamafactory-cli api` server (LLaMA-Factory's OpenAI-style API, chat completions only) on the tiny local
model, loopback port: the start-up check says what it serves and refuses it before any sample (exit 2), instead of
scoring every 404 as a wrong answer (the old behaviour: pass@1 0.0, exit 0)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from .helpers import base_config
from .test_eval_errors import free_port
from .test_eval_resume import console_script


@pytest.mark.slow
def test_llamafactory_cli_api_is_checked_at_start_and_refused_with_the_reason(tmp_path, tiny_model_dir):
    port = free_port()
    env = dict(os.environ, API_HOST="127.0.0.1", API_PORT=str(port), CUDA_VISIBLE_DEVICES="")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "llamafactory-cli"), "api", "--model_name_or_path", str(tiny_model_dir), "--template", "qwen"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 240
        while time.time() < deadline and server.poll() is None:
            try:
                if httpx.get(url + "/models", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        assert server.poll() is None, "llamafactory-cli api did not start"
        results = {}
        for api in ("completions", "chat"):
            cfg = tmp_path / f"{api}.yaml"
            config = base_config(tmp_path, tiny_model_dir, url, eval_api=api, eval_output_dir=str(tmp_path / api),
                                 eval_request_retries=1)  # fmt: skip
            cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
            results[api] = subprocess.run([console_script(), "eval", str(cfg)], capture_output=True, text=True,
                                          timeout=300)  # fmt: skip
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=60)
    done = results["completions"]
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{url}/completions answers HTTP 404: the server serves chat completions only. Set eval_api: chat" in (
        done.stderr
    )
    chat = results["chat"]
    assert chat.returncode == 2 and "cannot continue an assistant message (HTTP 400" in chat.stderr
    assert "llamafactory-cli api` takes only u/a/u/.../u conversations" in chat.stderr
    for api in ("completions", "chat"):  # refused before any sample: no record was written, nothing was scored
        assert not (tmp_path / api / "records.jsonl").exists() and not (tmp_path / api / "metrics.json").exists()
