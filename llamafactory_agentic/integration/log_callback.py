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

r"""Patch of LLaMA-Factory's `LogCallback`: every numeric metric of a log record reaches `trainer_log.jsonl`.

The instances LLaMA-Factory built get a subclass by a class swap (same state, one overridden method), so LLaMA-Board's
plots see the plugin's `rollout/...`, `tools/...`, `reward/...`, `loss/...`, `time/...` and `aepo/...` metrics.
"""

from collections.abc import Callable
from typing import Any

from transformers.trainer_callback import TrainerCallback


class _MergingPool:
    r"""Wraps LogCallback's thread pool so the record it writes also carries the plugin's metrics."""

    def __init__(self, pool: Any, extra: dict[str, float]):
        self.pool, self.extra = pool, extra

    def submit(self, fn: Callable, output_dir: str, logs: dict[str, Any]):
        merged = dict(logs)
        merged.update({k: v for k, v in self.extra.items() if k not in merged})
        return self.pool.submit(fn, output_dir, merged)


_STANDARD_KEYS = {"loss", "learning_rate", "epoch", "step", "total_flos", "eval_loss", "predict_loss", "reward"}


def extend_log_callback(callbacks: list[TrainerCallback] | None) -> None:
    r"""Make LLaMA-Factory's `LogCallback` write every numeric metric of a log record to `trainer_log.jsonl`.

    LogCallback writes a fixed set of keys (loss, reward, lr, ...). The instances in `callbacks` get the subclass
    `AgenticLogCallback` (same state, one overridden method), so `rollout/...`, `tools/...`, `reward/...`,
    `loss/...`, `time/...` and `aepo/...` reach the file LLaMA-Board reads.
    """
    from llamafactory.train.callbacks import LogCallback

    class AgenticLogCallback(LogCallback):
        def on_log(self, args, state, control, **kwargs):
            record = state.log_history[-1] if state.log_history else {}
            extra = {
                k: v
                for k, v in record.items()
                if k not in _STANDARD_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            pool = self.thread_pool
            if pool is None or not extra:
                return super().on_log(args, state, control, **kwargs)
            self.thread_pool = _MergingPool(pool, extra)
            try:
                return super().on_log(args, state, control, **kwargs)
            finally:
                self.thread_pool = pool

    for callback in callbacks or []:
        if type(callback) is LogCallback:
            callback.__class__ = AgenticLogCallback
