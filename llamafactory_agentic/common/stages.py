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

"""The single stage registry: the parser's `stage` choices, the dispatcher and LLaMA-Board's stage list all read it."""

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class StageSpec:
    r"""One training stage added by the plugin.

    Attributes:
        name: Value of `stage:` in a recipe.
        display_name: Label in LLaMA-Board's "Stage" drop-down.
        workflow: `module:function` of the `run_<stage>` workflow, called with LLaMA-Factory's parsed arguments
            `(model_args, data_args, training_args, finetuning_args, generating_args, callbacks)`.
        runs_as: LLaMA-Factory stage whose machinery the stage reuses (`sft` for agentic SFT: its checks, dataset
            processing, packing, eval and predict), or None for a stage with its own trainer.
        dataset_kind: `sft` (trajectories) or `rl` (prompts with ground truth).
        description: One line for `--help` and `llamafactory-agentic doctor`.
    """

    name: str
    display_name: str
    workflow: str
    runs_as: Literal["sft"] | None
    dataset_kind: Literal["sft", "rl"]
    description: str

    def load_workflow(self) -> Callable[..., None]:
        r"""Import and return the workflow function."""
        module_name, func_name = self.workflow.split(":")
        return getattr(importlib.import_module(module_name), func_name)


STAGES: dict[str, StageSpec] = {
    spec.name: spec
    for spec in (
        StageSpec(
            name="agentic_sft",
            display_name="Agentic SFT (tool trajectories)",
            workflow="llamafactory_agentic.train.agentic_sft.workflow:run_agentic_sft",
            runs_as="sft",
            dataset_kind="sft",
            description="cold-start SFT on tool-augmented trajectories, tool results masked from the loss",
        ),
        StageSpec(
            name="arpo",
            display_name="ARPO (agentic RL)",
            workflow="llamafactory_agentic.train.arpo.workflow:run_arpo",
            runs_as=None,
            dataset_kind="rl",
            description="GRPO-style RL with multi-turn tool calls and entropy-guided branching (arXiv 2507.19849)",
        ),
        StageSpec(
            name="aepo",
            display_name="AEPO (agentic RL)",
            workflow="llamafactory_agentic.train.arpo.workflow:run_arpo",
            runs_as=None,
            dataset_kind="rl",
            description="ARPO plus entropy-balanced rollout and optimisation (arXiv 2510.14545)",
        ),
    )
}


def get_stage(name: str | None) -> StageSpec | None:
    r"""Return the plugin stage called `name`, or None for LLaMA-Factory's own stages."""
    return STAGES.get(name) if name else None
