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

r"""Rollout progress: a tqdm bar that ticks once per generation round and a status file (main process only).

The status file (`rollout_progress.json` in the run's output folder) is what LLaMA-Board reads to show a progress line
while a rollout runs and no training step is logged.
"""

import json
import os
import time
from typing import Any


ROLLOUT_PROGRESS_NAME = "rollout_progress.json"  # live state of the current rollout (read by LLaMA-Board)


class RolloutProgress:
    r"""Engine proxy that shows rollout progress: one tqdm tick per generation round (main process only).

    Wraps any `GenerationEngine`; every attribute is delegated. `reset` (start of a rollout call) opens the bar,
    `generate` ticks it with the number of active trajectories and new tokens, `release` closes it. With
    `status_path`, the same state is also written there as JSON after every round (`rollout` count, `phase`,
    `global_step` (optimiser steps done before the call), `round`, `active` trajectories, `new_tokens` of the round,
    `total_tokens` of the rollout, `started`/`updated` Unix times, `done`), which LLaMA-Board reads to show a progress
    line while no training step is logged.
    """

    def __init__(self, engine: Any, enabled: bool, status_path: str | None = None):
        r"""Wrap `engine`; the bar is drawn and the status written (to `status_path`) only when `enabled`."""
        self._engine, self._enabled, self._bar = engine, enabled, None
        self._status_path = status_path if enabled else None
        self.phase = "training"  # "training" or "validation", set by the trainer before each rollout call
        self.global_step = 0  # optimiser steps done before the call, set by the trainer (as in rollouts.jsonl)
        self._status: dict[str, Any] = {"rollout": 0, "done": True}

    def __getattr__(self, name: str) -> Any:
        r"""Delegate everything else to the wrapped engine."""
        return getattr(self._engine, name)

    def reset(self) -> None:
        r"""Forward to the engine and open a fresh bar."""
        self._engine.reset()
        if self._enabled:
            from tqdm.auto import tqdm

            if self._bar is not None:
                self._bar.close()
            self._bar = tqdm(desc="rollout", unit="round", leave=False, dynamic_ncols=True)
        if self._status["done"]:  # AEPO's pre-monitoring resets the engine again inside the same rollout call
            now = time.time()
            self._status = {
                "rollout": self._status["rollout"] + 1,
                "phase": self.phase,
                "global_step": self.global_step,
                "round": 0,
                "active": 0,
                "new_tokens": 0,
                "total_tokens": 0,
                "started": now,
                "updated": now,
                "done": False,
            }
            self._write_status()

    def generate(self, requests: list, sampling: Any) -> list:
        r"""Forward to the engine, tick the bar and write the status."""
        results = self._engine.generate(requests, sampling)
        new_tokens = sum(len(r.token_ids) for r in results)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(active=len(requests), new_tokens=new_tokens)
        self._status.update(active=len(requests), new_tokens=new_tokens, updated=time.time())
        self._status["round"] = self._status.get("round", 0) + 1
        self._status["total_tokens"] = self._status.get("total_tokens", 0) + new_tokens
        self._write_status()
        return results

    def release(self) -> None:
        r"""Forward to the engine and close the bar."""
        self._engine.release()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._status.update(done=True, active=0, updated=time.time())
        self._write_status()

    def _write_status(self) -> None:
        if self._status_path is None:
            return
        try:  # atomic replace: a reader never sees half a file; a full disk never stops the rollout
            tmp = f"{self._status_path}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self._status, f)
            os.replace(tmp, self._status_path)
        except OSError:
            pass
