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

r"""Rollout progress display: a tqdm bar that ticks once per generation round (main process only)."""

from typing import Any


class RolloutProgress:
    r"""Engine proxy that shows rollout progress: one tqdm tick per generation round (main process only).

    Wraps any `GenerationEngine`; every attribute is delegated. `reset` (start of a rollout call) opens the bar,
    `generate` ticks it with the number of active trajectories and new tokens, `release` closes it.
    """

    def __init__(self, engine: Any, enabled: bool):
        r"""Wrap `engine`; the bar is drawn only when `enabled`."""
        self._engine, self._enabled, self._bar = engine, enabled, None

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

    def generate(self, requests: list, sampling: Any) -> list:
        r"""Forward to the engine and tick the bar."""
        results = self._engine.generate(requests, sampling)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(active=len(requests), new_tokens=sum(len(r.token_ids) for r in results))
        return results

    def release(self) -> None:
        r"""Forward to the engine and close the bar."""
        self._engine.release()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
