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

r"""Was the policy cold-started on the tool tags? A warning before an RL run that would have no learning signal.

An `arpo`/`aepo` run from a model that never learned to write `<search>`, `<python>` and `<answer>` blocks gets the
same reward (-1, the format gate) for every trajectory of every group: every advantage is 0 and nothing is learned
(the live side of this is the monitor's `no_learning_signal` pattern, `guards/gaming.py`). `agentic_sft` leaves a
small marker next to its model (`agentic_sft.json`) and every RL run its `agentic_config.json`; a policy whose folder
(or its parent, for a `checkpoint-N` folder, or an adapter folder) holds neither gets a warning before the run, in the
log and in LLaMA-Board's checks. It is a warning, not an error: a model cold-started elsewhere (a released ARPO
checkpoint, your own SFT) has no marker and trains fine.
"""

import json
import os
from typing import Any


COLD_START_MARKER = "agentic_sft.json"
_EVIDENCE = (COLD_START_MARKER, "agentic_config.json")


def write_cold_start_marker(output_dir: str, info: dict[str, Any]) -> str:
    r"""Write `<output_dir>/agentic_sft.json` (`info`: stage, template, tool protocol, ...) and return its path."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, COLD_START_MARKER)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return path


def _candidates(path: str | None) -> list[str]:
    if not path:
        return []
    out = []
    for one in str(path).split(","):  # LLaMA-Factory allows several adapters, comma-separated
        one = os.path.expanduser(one.strip())
        if one:
            out += [one, os.path.dirname(os.path.normpath(one))]  # checkpoint-N lies inside the run's folder
    return out


def cold_start_evidence(model_name_or_path: str | None, adapter_name_or_path: str | None = None) -> str | None:
    r"""The marker file that shows the policy was trained on the tool tags by this plugin, or None.

    Args:
        model_name_or_path: LLaMA-Factory's `model_name_or_path` (a local folder or a hub id).
        adapter_name_or_path: LLaMA-Factory's `adapter_name_or_path` (comma-separated folders), if any.

    Returns:
        The path of the first `agentic_sft.json` or `agentic_config.json` found in the model's or an adapter's
        folder or their parent folders; None when there is none (a hub id has none).
    """
    for folder in _candidates(adapter_name_or_path) + _candidates(model_name_or_path):
        for name in _EVIDENCE:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return path
    return None


def cold_start_warning(model_name_or_path: str | None, adapter_name_or_path: str | None = None) -> str | None:
    r"""The warning for an RL run whose policy shows no sign of a cold start (None when it shows one)."""
    if cold_start_evidence(model_name_or_path, adapter_name_or_path) is not None:
        return None
    where = ", ".join(p for p in (model_name_or_path, adapter_name_or_path) if p) or "the model"
    return (
        f"{where} shows no sign of a cold start on the tool tags (no {COLD_START_MARKER} from `stage: agentic_sft` "
        "and no agentic_config.json of an RL run next to it). RL from a model that never writes `<search>`, `<python>`, "
        "`<answer>` blocks usually has no learning signal: every trajectory fails the format gate, every group's "
        "rewards are equal and every advantage is 0. Fix: train `stage: agentic_sft` on tool trajectories first and "
        "start RL from its output_dir (docs/tutorial.md). If the model was cold-started elsewhere (e.g. a released "
        "ARPO checkpoint), ignore this."
    )
