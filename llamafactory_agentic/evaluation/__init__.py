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

r"""Evaluation harness (docs/algorithms.md section 9): `evaluate(config) -> metrics`.

The harness runs the training rollout's agent loop (`rollout.AgenticRollout.stream`) with the `hf` or `vllm` engine
in-process, or an OpenAI-compatible `/v1/completions` endpoint, and the training tool executor and cache; protocol
presets `paper` and `train_val` with a fingerprint; a benchmark registry (`evaluation/benchmarks.yaml`); exact
match, token F1, math-verify, the training reward and an optional LLM judge with a verdict cache; pass@1 over R runs
and unbiased pass@k; append-only records with resume and shards; `report.html`; `compare_runs` with a paired
bootstrap. Command line: `llamafactory-agentic eval CONFIG.yaml` (also `llamafactory-cli eval CONFIG.yaml`).

Importing this package is cheap; the heavy parts load on first use.
"""

from typing import Any


_LAZY = {
    "evaluate": "runner",
    "finalize": "runner",
    "parse_eval_config": "runner",
    "EvalSetup": "runner",
    "EvalArguments": "config",
    "EvalConfigError": "config",
    "Protocol": "config",
    "resolve_protocol": "config",
    "load_registry": "benchmarks",
    "load_benchmark": "benchmarks",
    "resolve_benchmarks": "benchmarks",
    "BenchmarkError": "benchmarks",
    "extract_prediction": "scoring",
    "pass_at_k": "metrics",
    "compare_runs": "compare",
    "CompareError": "compare",
    "LLMJudge": "judge",
    "VerdictCache": "judge",
    "OpenAICompletionsEngine": "endpoint",
    "ResumeError": "records",
    "run_eval_command": "cli",
    "build_table": "table",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
