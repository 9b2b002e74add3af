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

r"""Dataset formats of the agentic stages (docs/algorithms.md §2 and §8).

* `formatting: arpo_rl` — verl-style RL prompts (ARPO-RL-Reasoning-10K, ARPO-RL-DeepSearch-1K, their validation and
  test files); loaded for the RL stages with `load_rl_dataset` and tokenised with `encode_rl_prompts`.
* `formatting: arpo_sft` — sharegpt-like tool trajectories (ARPO-SFT-54K), inline or as function_call/observation
  turns, trained with the `<base>_agentic` inline-tag templates (`build_inline_template`).

Importing this package is cheap; the LLaMA-Factory-dependent parts load on first use. Their registration in
LLaMA-Factory (the converters and the inline-tag templates of qwen, qwen3, qwen3_nothink and llama3) is done by
idempotent functions here (`converters.register_converters`, `inline_template.register_default_inline_templates`) that
activation calls (`llamafactory_agentic.integration.data_registration`); no module of this package imports `integration`.
"""

from typing import Any


_LAZY = {
    "ArpoRLDatasetConverter": "converters",
    "ArpoSFTDatasetConverter": "converters",
    "RL_FORMATTING": "converters",
    "SFT_FORMATTING": "converters",
    "build_inline_template": "inline_template",
    "is_inline_template": "inline_template",
    "load_rl_dataset": "rl_loader",
    "encode_rl_prompts": "rl_loader",
    "validate_rl_rows": "rl_loader",
    "RLDataError": "rl_loader",
    "parse_rl_row": "rl_schema",
    "RLRowError": "rl_schema",
    "split_inline_trajectory": "tags",
    "join_trajectory": "tags",
    "check_tag_balance": "tags",
    "repair_boxed": "tags",
    "TrajectoryFormatError": "tags",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)

    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_LAZY)
