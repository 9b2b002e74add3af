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

"""A real `llamafactory-cli api` server (LLaMA-Factory's OpenAI-style API, chat completions only) on a tiny local
model fitted to answer one question with a native (Qwen `<tool_call>`) python call, on a loopback port.

* `agentic_tool_protocol: template` + `eval_api: chat`: the evaluation runs through the server turn by turn (each
  model turn an assistant message, each observation a `tool` message), the python tool really runs, and the
  trajectory is token for token the in-process (`infer_backend: huggingface`) one on the same checkpoint. The
  repetition penalty reaches LLaMA-Factory as `presence_penalty` (seen in the server's request log).
* `/v1/completions` and the inline-tag chat loop (which continues an assistant message) are refused at start with
  the reason and the fix, before any sample (exit 2), instead of scoring every 404 as a wrong answer.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from .helpers import base_config, write_jsonl
from .test_eval_errors import free_port
from .test_eval_resume import console_script


QUESTION = "What is 43+64?"
CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(43+64)"}}\n</tool_call>'
PLACEHOLDER = "0"  # the observation seen while fitting (context only): a 107 in the trajectory comes from the tool
ANSWER = "<answer> The tool computed it. </answer>"


def fit_native_policy(model_dir: Path, output_dir: Path, steps: int = 80) -> Path:
    """Fit the tiny model to answer QUESTION (qwen template, default system) with CALL, then after the template's
    tool message with ANSWER; save it."""
    import torch
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llamafactory_agentic.rollout.tool_format import NativeToolFormat

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    template = get_template_and_fix_tokenizer(tok, DataArguments(template="qwen"))
    prompt, _ = template.encode_oneturn(
        tok, [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": ""}]
    )
    fmt = NativeToolFormat(template, tok)
    call = tok.encode(CALL, add_special_tokens=False) + [tok.eos_token_id]
    observation = fmt.observation_ids(tok, PLACEHOLDER)
    answer = tok.encode(ANSWER, add_special_tokens=False) + [tok.eos_token_id]
    ids = list(prompt) + call + observation + answer
    labels = [-100] * len(prompt) + call + [-100] * len(observation) + answer
    ids_t, labels_t = torch.tensor([ids]), torch.tensor([labels])
    optim = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        model(input_ids=ids_t, labels=labels_t).loss.backward()
        optim.step()
        optim.zero_grad()
    model.save_pretrained(str(output_dir))
    tok.save_pretrained(str(output_dir))
    return output_dir


@pytest.fixture(scope="module")
def lf_api(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("lf_api")
    policy = fit_native_policy(tiny_model_dir, root / "policy")
    port = free_port()
    env = dict(os.environ, API_HOST="127.0.0.1", API_PORT=str(port), CUDA_VISIBLE_DEVICES="", API_VERBOSE="1")
    log = open(root / "server.log", "w")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "llamafactory-cli"), "api", "--model_name_or_path", str(policy),
         "--template", "qwen"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
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
        assert server.poll() is None, (
            "llamafactory-cli api did not start: " + (root / "server.log").read_text()[-3000:]
        )
        yield {"url": url, "root": root, "policy": policy, "log": root / "server.log"}
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=60)
        log.close()


def _native_config(lf_api, name, **extra):
    root = lf_api["root"]
    bench = write_jsonl(root / "sum.jsonl", [{"question": QUESTION, "answer": "107"}])
    config = {
        "model_name_or_path": str(lf_api["policy"]),
        "template": "qwen",
        "agentic_tool_protocol": "template",
        "agentic_search_backend": "replay",
        "agentic_cache_path": str(root / f"{name}_tools.sqlite"),
        "agentic_python_timeout": 20,
        "eval_preset": "paper",
        "eval_system_prompt": "none",
        "eval_benchmarks": [{"name": "sum", "path": str(bench), "task": "qa", "metric": "f1"}],
        "eval_runs": 1,
        "eval_temperature": 0.0,
        "eval_repetition_penalty": 1.1,
        "eval_max_response_length": 128,
        "eval_batch_size": 1,
        "eval_progress": False,
        "eval_output_dir": str(root / name),
    }
    config.update(extra)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_native_tool_calls_evaluate_through_llamafactory_cli_api_as_in_process(lf_api):
    served = subprocess.run([console_script(), "eval", str(_native_config(lf_api, "served", eval_base_url=lf_api["url"],
                             eval_api="chat", eval_request_retries=1))], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert served.returncode == 0, served.stdout[-3000:] + served.stderr[-3000:]
    local = subprocess.run([console_script(), "eval", str(_native_config(lf_api, "local"))], capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]

    (remote,), (inproc,) = _records(lf_api["root"] / "served"), _records(lf_api["root"] / "local")
    assert not remote["error"] and remote["finish_reason"] == inproc["finish_reason"] == "answer", (remote, inproc)
    # the python tool ran on the model's native call, and the model answered after the tool message
    assert [(c["tool"], c["content"], c["status"]) for c in remote["tool_calls"]] == [("python", "print(43+64)", "ok")]
    text = "".join(piece for _, piece in remote["segments"])
    assert CALL + "<|im_end|>\n<|im_start|>user\n<tool_response>\n107" in text, text
    assert "<answer> The tool computed it. </answer>" in remote["segments"][-1][1], remote["segments"]
    # token for token the in-process trajectory on the same checkpoint
    assert remote["segments"] == inproc["segments"]
    assert remote["tokens"] == inproc["tokens"] and remote["prediction"] == inproc["prediction"]
    assert remote["tool_calls"][0]["content"] == inproc["tool_calls"][0]["content"]
    # the conversation reached the server as messages: user, assistant (the call), tool (the observation)
    log = lf_api["log"].read_text()
    decoder = json.JSONDecoder()
    requests = [decoder.raw_decode(block.strip())[0] for block in log.split("==== request ====")[1:]]
    turns = [r for r in requests if len(r["messages"]) == 3]
    assert turns, log[-3000:]
    assert [m["role"] for m in turns[-1]["messages"]] == ["user", "assistant", "tool"]
    assert turns[-1]["messages"][1]["content"] == CALL and turns[-1]["messages"][2]["content"].startswith("107")
    assert turns[-1]["presence_penalty"] == 1.1  # LLaMA-Factory's name of the repetition penalty
    assert "LLaMA-Factory's API: the repetition penalty is sent as presence_penalty" in served.stdout + served.stderr


@pytest.mark.slow
def test_completions_and_inline_chat_are_refused_with_the_reason(lf_api, tmp_path, tiny_model_dir):
    url = lf_api["url"]
    results = {}
    for api in ("completions", "chat"):
        cfg = tmp_path / f"{api}.yaml"
        config = base_config(tmp_path, tiny_model_dir, url, eval_api=api, eval_output_dir=str(tmp_path / api),
                             eval_request_retries=1)  # fmt: skip
        cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
        results[api] = subprocess.run([console_script(), "eval", str(cfg)], capture_output=True, text=True,
                                      timeout=300)  # fmt: skip
    done = results["completions"]
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{url}/completions answers HTTP 404: the server serves chat completions only. Set eval_api: chat" in (
        done.stderr
    )
    chat = results["chat"]
    assert chat.returncode == 2 and "cannot continue an assistant message (HTTP 400" in chat.stderr
    assert "llamafactory-cli api` takes only u/a/u/.../u conversations" in chat.stderr
    assert "set agentic_tool_protocol: template" in chat.stderr
    for api in ("completions", "chat"):  # refused before any sample: no record was written, nothing was scored
        assert not (tmp_path / api / "records.jsonl").exists() and not (tmp_path / api / "metrics.json").exists()
