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

"""`stage: agentic_sft` through LLaMA-Factory's `run_exp` with the plugin registered (in-process, tiny model, CPU)."""

import json
from pathlib import Path

import pytest


REPO_DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.mark.slow
@pytest.mark.parametrize("mask_results", [True, False])
def test_agentic_sft_stage_runs_through_run_exp(tmp_path, tiny_model_dir, capsys, plugin_caplog, mask_results):
    import llamafactory_agentic

    llamafactory_agentic.register()
    from llamafactory.train.tuner import run_exp

    output_dir = tmp_path / "saves"
    run_exp(
        args={
            "model_name_or_path": str(tiny_model_dir),
            "stage": "agentic_sft",
            "do_train": True,
            "finetuning_type": "full",
            "dataset": "arpo_sft_demo",
            "dataset_dir": str(REPO_DATA),
            "template": "qwen",
            "cutoff_len": 1024,
            "overwrite_cache": True,
            "output_dir": str(output_dir),
            "per_device_train_batch_size": 2,
            "max_steps": 2,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "use_cpu": True,
            "cache_dir": str(tmp_path / "cache"),
            "agentic_sft_mask_results": mask_results,
        }
    )
    printed = capsys.readouterr().out + plugin_caplog.text  # the pre-run report is printed, the rest logged
    assert "[agentic-sft] template qwen -> qwen_agentic (inline tool tags)" in printed
    assert "[agentic-sft] pre-run check: rendered sample" in printed
    if mask_results:
        assert "[MASKED> <result>\n385\n</result><MASKED]" in printed
    else:
        assert "</python> <result>\n385\n</result> <think> The interpreter" in printed
        assert "agentic_sft_mask_results: false: tool results (<result>…</result>) are trained on" in printed
    logs = [json.loads(line) for line in (output_dir / "trainer_log.jsonl").read_text().splitlines()]
    assert [entry["loss"] > 0 for entry in logs if "loss" in entry] == [True, True]
