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

r"""Save and restore the rollout's own random generators (branching draws, engine sampling, rollouts.jsonl sampler).

They live outside the global RNGs that Transformers checkpoints, so a resumed run would otherwise replay the draws of
step 0.
"""

import json
import os
import random
from typing import Any

import torch


def rollout_rng_state(rollout: Any, log_rng: random.Random) -> dict[str, Any]:
    r"""JSON-serialisable states of the rollout's generators: branching (numpy), engine sampling (torch), log sampler.

    Args:
        rollout: An `AgenticRollout` (anything without `rng` / `engine._generator` is skipped).
        log_rng: The trainer's `random.Random` choosing the groups written to rollouts.jsonl.

    Returns:
        `{"branching": ..., "engine": [bytes as ints] | None, "log": ...}`.
    """
    rng = getattr(rollout, "rng", None)
    generator = getattr(getattr(rollout, "engine", None), "_generator", None)
    return {
        "branching": rng.bit_generator.state if rng is not None else None,
        "engine": generator.get_state().tolist() if generator is not None else None,
        "log": [log_rng.getstate()[0], list(log_rng.getstate()[1]), log_rng.getstate()[2]],
    }


def set_rollout_rng_state(rollout: Any, log_rng: random.Random, state: dict[str, Any]) -> None:
    r"""Inverse of `rollout_rng_state`; parts missing on either side are left as they are."""
    rng = getattr(rollout, "rng", None)
    if rng is not None and state.get("branching") is not None:
        rng.bit_generator.state = state["branching"]
    generator = getattr(getattr(rollout, "engine", None), "_generator", None)
    if generator is not None and state.get("engine") is not None:
        generator.set_state(torch.tensor(state["engine"], dtype=torch.uint8))
    if state.get("log") is not None:
        version, internal, gauss = state["log"]
        log_rng.setstate((version, tuple(internal), gauss))


def rng_state_path(directory: str, rank: int) -> str:
    r"""`<directory>/rollout_rng_state_<rank>.json`: one file per rank (each rank draws from its own generators)."""
    return os.path.join(directory, f"rollout_rng_state_{rank}.json")


def save_rollout_rng_state(directory: str, rank: int, rollout: Any, log_rng: random.Random) -> str:
    r"""Write `rollout_rng_state(rollout, log_rng)` to `rng_state_path(directory, rank)` and return the path."""
    path = rng_state_path(directory, rank)
    with open(path, "w") as f:
        json.dump(rollout_rng_state(rollout, log_rng), f)
    return path


def load_rollout_rng_state(directory: str, rank: int, rollout: Any, log_rng: random.Random) -> bool:
    r"""Restore what `save_rollout_rng_state` wrote; False (nothing changed) when the checkpoint has no such file."""
    path = rng_state_path(directory, rank)
    if not os.path.isfile(path):
        return False
    with open(path) as f:
        set_rollout_rng_state(rollout, log_rng, json.load(f))
    return True
