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

The instances LLaMA-Factory built get a subclass by a class swap (same state, `on_log` extended), so LLaMA-Board's
plots see the plugin's `rollout/...`, `tools/...`, `reward/...`, `loss/...`, `time/...` and `aepo/...` metrics, and
under LLaMA-Board its running log gets one line of the main RL values per training step.
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
# the RL line LLaMA-Board shows each step: (record key, name in the line); rollout keys come from the latest rollout
_RL_LINE_NAMES = (
    ("reward", "reward"),
    ("reward/accuracy", "accuracy"),
    ("reward/identical_groups", "identical_groups"),
    ("dynamic_sampling/identical_groups_in_update", "identical_in_update"),
    ("rollout/tool_calls_per_traj", "tool_calls"),
    ("rollout/branches", "branches"),
    ("rollout/response_length", "response_length"),
    ("loss/entropy", "entropy"),
    ("loss/kl", "kl"),
    ("loss/approx_kl", "approx_kl"),
    ("loss/clip_frac", "clip_frac"),
)
_RL_LINE_ROLLOUT_KEYS = ("reward", "reward/accuracy", "reward/identical_groups",
                         "dynamic_sampling/identical_groups_in_update", "rollout/tool_calls_per_traj",
                         "rollout/branches", "rollout/response_length")  # fmt: skip
_RL_LINE_UPDATE_KEYS = ("loss/entropy", "loss/kl", "loss/approx_kl", "loss/clip_frac")


def extend_log_callback(callbacks: list[TrainerCallback] | None) -> None:
    r"""Make LLaMA-Factory's `LogCallback` write every numeric metric of a log record to `trainer_log.jsonl`.

    LogCallback writes a fixed set of keys (loss, reward, lr, ...). The instances in `callbacks` get the subclass
    `AgenticLogCallback` (same state, `on_log` extended), so `rollout/...`, `tools/...`, `reward/...`,
    `loss/...`, `time/...` and `aepo/...` reach the file LLaMA-Board reads. When training begins (at the step of the
    checkpoint it resumes from, or 0), the records of later steps are removed from `trainer_log.jsonl` and
    `rollouts.jsonl` (`train.checkpoints.drop_records_after`), so a resumed run logs each step once. Under
    LLaMA-Board it also logs one line per training step with the main RL values (reward, accuracy, share of
    identical-reward groups, tool calls, branches, response length, entropy, KL, clip fraction) next to LogCallback's
    loss line.
    """
    from llamafactory.train.callbacks import LogCallback

    from ..common.log import get_logger
    from .checkpoints import drop_records_after

    logger = get_logger(__name__)

    class AgenticLogCallback(LogCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            # a resumed run repeats the steps after its checkpoint: their old records go (`drop_records_after`)
            if args.should_save:
                drop_records_after(args.output_dir, state.global_step)
            return super().on_train_begin(args, state, control, **kwargs)

        def on_log(self, args, state, control, **kwargs):
            record = state.log_history[-1] if state.log_history else {}
            extra = {
                k: v
                for k, v in record.items()
                if k not in _STANDARD_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            for key in ("warnings", "warning_details"):  # the reward-gaming monitor's (guards/gaming.py)
                if isinstance(record.get(key), list):
                    extra[key] = record[key]
            pool = self.thread_pool
            if pool is None or not extra:
                result = super().on_log(args, state, control, **kwargs)
            else:
                self.thread_pool = _MergingPool(pool, extra)
                try:
                    result = super().on_log(args, state, control, **kwargs)
                finally:
                    self.thread_pool = pool
            if self.webui_mode and args.should_save and "loss" in record:
                self._log_rl_line(record, state.global_step)
            return result

        def _log_rl_line(self, record: dict[str, Any], step: int) -> None:
            # LogCallback's line shows `reward` only when it is truthy (0.0 is dropped) and only in the record of the
            # step whose first micro-step ran the rollout: one rollout feeds `steps_per_generation` updates, and
            # TRL's `log` reports a metric only in the window it was appended in. The rollout's values are kept
            # here and repeated, marked with the step that produced them, on the steps trained on that rollout.
            if "reward" in record:
                self._rollout_record = (step, record)
            rollout_step, rollout = getattr(self, "_rollout_record", (None, {}))
            values = {key: rollout.get(key) for key in _RL_LINE_ROLLOUT_KEYS}
            values.update({key: record.get(key) for key in _RL_LINE_UPDATE_KEYS})
            text = ", ".join(
                f"'{name}': {values[key]:.4g}" for key, name in _RL_LINE_NAMES if values.get(key) is not None
            )
            if rollout_step is not None and rollout_step != step:
                text += f", 'rollout_of_step': {rollout_step}"
            if text:
                logger.info_rank0("{" + text + "}")

    for callback in callbacks or []:
        if type(callback) is LogCallback:
            callback.__class__ = AgenticLogCallback
