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

"""`llamafactory-cli eval CONFIG.yaml key=value` (LLaMA-Factory's own command, routed by the plugin's launcher patch)
and `llamafactory-agentic eval compare` / `eval merge`, as real subprocesses. The model is served by the local fake
OpenAI-compatible server (it stands in for a vLLM server; real HTTP)."""

import json
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from llamafactory_agentic.integration import eval_command, patches

from .fake_openai import FakeOpenAIServer
from .helpers import base_config, scripted_policy


def script(name: str) -> str:
    return shutil.which(name, path=str(Path(sys.executable).parent)) or name


@pytest.mark.slow
def test_llamafactory_cli_eval_runs_the_harness_and_compare_reads_it(tmp_path, tiny_model_dir, tiny_tokenizer):
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy()) as server:
        cfg = tmp_path / "eval.yaml"
        cfg.write_text(yaml.safe_dump(base_config(tmp_path, tiny_model_dir, server.url)), encoding="utf-8")
        out_a, out_b = tmp_path / "a", tmp_path / "b"
        proc = subprocess.run(
            [script("llamafactory-cli"), "eval", str(cfg), f"eval_output_dir={out_a}", "eval_runs=1"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "mymath: judge pass@1 66.7" in proc.stdout
        metrics = json.loads((out_a / "metrics.json").read_text())
        assert metrics["protocol"]["runs"] == 1 and server.completions
        proc = subprocess.run(
            [script("llamafactory-agentic"), "eval", str(cfg), f"eval_output_dir={out_b}", "eval_runs=1"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
    cmp = subprocess.run(
        [script("llamafactory-agentic"), "eval", "compare", str(out_a), str(out_b), "--output", str(tmp_path / "c.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert cmp.returncode == 0, cmp.stderr
    assert "| mymath | judge | 3 | 66.7 | 66.7 | +0.0 |" in cmp.stdout
    assert json.loads((tmp_path / "c.json").read_text())["benchmarks"]["myqa"]["p_value"] == 1.0
    merge = subprocess.run([script("llamafactory-agentic"), "eval", "merge", str(out_a)], capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert merge.returncode == 0 and "mymath: judge pass@1" in merge.stdout
    bad = subprocess.run([script("llamafactory-cli"), "eval", str(tmp_path / "missing.yaml")], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert bad.returncode == 2 and "missing.yaml does not exist" in bad.stderr


def test_launcher_patch_checks_its_precondition():
    fake = types.ModuleType("llamafactory.launcher")
    with pytest.raises(patches.PatchError, match=r"cannot patch .*llamafactory==0\.9\.5"):
        eval_command.patch_launcher(fake)
    fake.USAGE = "| llamafactory-cli train -h: train |"
    fake.launch = lambda: None  # a launcher without an `eval` command is not the 0.9.5 one
    with pytest.raises(patches.PatchError, match="eval"):
        eval_command.patch_launcher(fake)


def test_launcher_patch_is_idempotent_and_lists_eval():
    import llamafactory.launcher as launcher

    from llamafactory_agentic.integration import activation

    activation.register()
    patched = launcher.launch
    eval_command.patch_launcher(launcher)
    assert launcher.launch is patched and launcher.USAGE.count("llamafactory-cli eval") == 1
