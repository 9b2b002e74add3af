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

r"""Reward-gaming monitor: warnings from the metrics the `arpo`/`aepo` trainer already logs (docs/plan.md §2).

Every rule compares the run's first `window` rollout records (the baseline, right after the cold start) with its
latest `window` records, and asks for a rise that is both large and clear of the step-to-step noise: Welch's t of the
two windows at least `min_t` (2.0: one-sided p < 0.05 at ten steps per window). Patterns:

* `tool_calls_per_correct`: `rollout/tool_calls_per_traj` up by at least 15% (t >= min_t) and tool calls per correct
  answer (calls / `reward/accuracy` over the window) up by at least 15%, while `reward/accuracy` did not rise
  (t < min_t). The policy is paid for calls, not answers: the built-in rewards' +0.1 for using both tools
  (`agentic_reward_tool_bonus`, docs/algorithms.md §6.4) is the known cause.
* `length_flat_reward`: `rollout/response_length` up by at least 15% (t >= min_t) while `reward/mean` did not rise.
* `format_only_reward`: over the latest window the format gate passes (`reward/format_ok_rate` >= 0.8) and the reward
  is positive (`reward/mean` >= 0.05) while almost no answer is right (`reward/accuracy` <= 0.05).
* `identical_groups_rising`: `reward/identical_groups` up by at least 0.15 (t >= min_t): more groups carry no gradient.
* `repeated_tool_calls`: `rollout/repeated_tool_calls_rate` (calls that repeat an earlier call of the same trajectory)
  at least 0.1 over the latest window and up from the baseline (t >= min_t).

One more pattern is not gaming but its opposite, and needs no windows: `no_learning_signal` fires when the first
`NO_SIGNAL_RECORDS` (2) rollout records all have every group's rewards identical (`reward/identical_groups` = 1; with
dynamic sampling also `dynamic_sampling/identical_groups_in_update` = 1), or the first 2 optimiser steps all have
`grad_norm` 0. Every advantage is then 0 and the run trains nothing; the usual cause is RL from a policy that was never
cold-started on the tool tags (every answer fails the format gate: reward -1 everywhere).

A pattern warns once per run (at the first record where it holds); `GamingMonitor.update` returns the new warnings,
`scan_records` runs the monitor over a finished run's `trainer_log.jsonl` records, and `GamingMonitorCallback` puts
the warnings into the live run's log line, its `trainer_log.jsonl` record (`warnings`: list of messages) and the
Python log.
"""

import json
import math
import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from transformers.trainer_callback import TrainerCallback


WINDOW = 10
MIN_T = 2.0
MIN_RISE = 0.15
NO_SIGNAL_RECORDS = 2  # rollout records (and optimiser steps) without any learning signal before the warning
NO_SIGNAL = "no_learning_signal"


@dataclass(frozen=True)
class GamingWarning:
    r"""One raised pattern: what, on which metric and window, the evidence, the likely cause and the key to change."""

    pattern: str
    metric: str
    window: str  # e.g. "rollout steps 1-10 vs 21-30"
    evidence: str
    cause: str
    key: str
    step: int  # the record (global step) at which it was raised
    # the numbers of `window` and `evidence` by name, so a page in another language can say the same
    # (`webui.locales`, `gaming_<pattern>`); JSON values only
    params: dict[str, Any] = field(default_factory=dict, compare=False)

    def detail(self) -> dict[str, Any]:
        r"""`{"pattern", "step", "params"}`: what `trainer_log.jsonl` keeps beside the message (`warning_details`)."""
        return {"pattern": self.pattern, "step": self.step, "params": dict(self.params)}

    def message(self) -> str:
        r"""One line for the log and `trainer_log.jsonl`."""
        if self.pattern == NO_SIGNAL:
            return (
                f"no learning signal [{self.pattern}] {self.metric}, {self.window}: {self.evidence}. "
                f"Likely cause: {self.cause} Fix: {self.key}."
            )
        return (
            f"reward gaming? [{self.pattern}] {self.metric}, {self.window}: {self.evidence}. "
            f"Likely cause: {self.cause} Key: {self.key}."
        )


def welch_t(before: list[float], after: list[float]) -> float:
    r"""Welch's t of `mean(after) - mean(before)` (inf for a rise between two constant windows, 0 for none)."""
    diff = statistics.fmean(after) - statistics.fmean(before)
    se = math.sqrt(statistics.variance(before) / len(before) + statistics.variance(after) / len(after))
    if se == 0:
        return math.inf if diff > 0 else (-math.inf if diff < 0 else 0.0)
    return diff / se


class GamingMonitor:
    r"""Collects the rollout records of a run and checks the patterns after each one (see the module docstring).

    Args:
        window: Rollout records per window (baseline: the first `window`; recent: the latest `window`).
        min_t: Welch's t a rise needs.
        tool_bonus: The run's `agentic_reward_tool_bonus` (None: unknown), named in the tool-call warning.
    """

    def __init__(self, window: int = WINDOW, min_t: float = MIN_T, tool_bonus: float | None = None) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        if window < 2:
            raise ValueError(f"window must be at least 2 rollout records, got {window}")
        self.window, self.min_t, self.tool_bonus = window, min_t, tool_bonus
        self.series: dict[str, list[float]] = {}
        self.steps: list[int] = []
        self.grad_norms: list[tuple[int, float]] = []  # (step, grad_norm) of the optimiser steps, in log order
        self.raised: dict[str, GamingWarning] = {}
        self.last_step = 0

    def update(self, step: int, record: dict[str, Any]) -> list[GamingWarning]:
        r"""Add one logged record; return the warnings it newly raised ([] for a record without rollout metrics)."""
        self.last_step = int(step)
        grad_norm = record.get("grad_norm")
        if isinstance(grad_norm, (int, float)) and not isinstance(grad_norm, bool) and "reward/accuracy" not in record:
            self.grad_norms.append((int(step), float(grad_norm)))  # an update without a rollout
            warning = self._no_signal()
            return self._raise([warning] if warning is not None else [])
        if isinstance(grad_norm, (int, float)) and not isinstance(grad_norm, bool):
            self.grad_norms.append((int(step), float(grad_norm)))
        if "reward/accuracy" not in record:
            return []  # an eval record, or a record of another kind
        self.steps.append(int(step))
        for key in _KEYS:
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.series.setdefault(key, []).append(float(value))
        checks = (self._no_signal, self._tool_calls, self._length, self._format_only, self._identical, self._repeats)
        return self._raise([check() for check in checks])

    def _raise(self, warnings: list[GamingWarning | None]) -> list[GamingWarning]:
        new = []
        for warning in warnings:
            if warning is not None and warning.pattern not in self.raised:
                self.raised[warning.pattern] = warning
                new.append(warning)
        return new

    # ---------------------------------------------------------------------------------------------- helpers
    def _windows(self, key: str) -> tuple[list[float], list[float]] | None:
        values = self.series.get(key, [])
        if len(values) < 2 * self.window:
            return None
        return values[: self.window], values[-self.window :]

    def _window_params(self) -> dict[str, int]:
        n, w = len(self.steps), self.window
        return {"w": w, "first": self.steps[0], "wth": self.steps[w - 1], "start": n - w + 1, "n": n,
                "recent": self.steps[n - w], "last": self.steps[-1]}  # fmt: skip

    def _window_text(self) -> str:
        n, w = len(self.steps), self.window
        return (
            f"rollout records 1-{w} (steps {self.steps[0]}-{self.steps[w - 1]}) vs {n - w + 1}-{n} "
            f"(steps {self.steps[n - w]}-{self.steps[-1]})"
        )

    def _rises(self, key: str, relative: float | None = None, absolute: float | None = None) -> tuple | None:
        pair = self._windows(key)
        if pair is None:
            return None
        before, after = pair
        t = welch_t(before, after)
        b, a = statistics.fmean(before), statistics.fmean(after)
        big = (relative is not None and b > 0 and a / b - 1 >= relative) or (
            absolute is not None and a - b >= absolute
        )
        return (t >= self.min_t and big), b, a, t

    def _flat(self, key: str) -> tuple[bool, float, float] | None:
        pair = self._windows(key)
        if pair is None:
            return None
        before, after = pair
        return welch_t(before, after) < self.min_t, statistics.fmean(before), statistics.fmean(after)

    def _warn(self, pattern, metric, evidence, cause, key, **params) -> GamingWarning:
        params = {**self._window_params(), **params}
        return GamingWarning(pattern, metric, self._window_text(), evidence, cause, key, self.steps[-1], params)

    # ---------------------------------------------------------------------------------------------- patterns
    def _no_signal(self) -> GamingWarning | None:
        r"""Every group identical in the first `NO_SIGNAL_RECORDS` rollouts, or a zero gradient in the first steps."""
        if NO_SIGNAL in self.raised:
            return None
        n = NO_SIGNAL_RECORDS
        evidence = None
        identical = self.series.get("reward/identical_groups", [])
        in_update = self.series.get("dynamic_sampling/identical_groups_in_update")
        if len(identical) >= n and min(identical[:n]) >= 1.0 and (in_update is None or min(in_update[:n]) >= 1.0):
            reward = self.series.get("reward/mean", [])[:n]
            same = f" (reward mean {', '.join(f'{r:g}' for r in reward)})" if reward else ""
            evidence = f"every group's rewards were identical in each of the first {n} rollouts{same}"
            window = f"rollout records 1-{n} (steps {self.steps[0]}-{self.steps[n - 1]})"
            params = {"kind": "identical", "n": n, "first": self.steps[0], "last": self.steps[n - 1]}
            params["rewards"] = ", ".join(f"{r:g}" for r in reward)
        elif len(self.grad_norms) >= n and all(g == 0.0 for _, g in self.grad_norms[:n]):
            evidence = f"grad_norm was 0 at each of the first {n} optimiser steps"
            window = f"optimiser steps {self.grad_norms[0][0]}-{self.grad_norms[n - 1][0]}"
            params = {"kind": "grad_norm", "n": n, "first": self.grad_norms[0][0], "last": self.grad_norms[n - 1][0]}
        if evidence is None:
            return None
        return GamingWarning(
            NO_SIGNAL,
            "reward/identical_groups, grad_norm",
            window,
            evidence,
            "every advantage is 0, so the policy gradient is 0 and the run trains nothing. Usually the policy was "
            "never cold-started on the tool tags (every answer fails the format gate: reward -1 everywhere); or the "
            "reward cannot tell trajectories apart (all right, or a reward that returns a constant).",
            "cold-start the model with `stage: agentic_sft` on tool trajectories first (docs/tutorial.md); read a few "
            "trajectories (arpo_rollout_log_ratio > 0, rollouts.jsonl) to see why they score alike; "
            "rl_dynamic_sampling: true keeps only groups whose rewards differ",
            self.last_step,
            params,
        )

    def _tool_calls(self) -> GamingWarning | None:
        calls = self._rises("rollout/tool_calls_per_traj", relative=MIN_RISE)
        acc = self._flat("reward/accuracy")
        if not calls or not acc or not calls[0] or not acc[0]:
            return None
        before, after = self._windows("rollout/tool_calls_per_traj")
        acc_before, acc_after = self._windows("reward/accuracy")
        if sum(acc_before) <= 0 or sum(acc_after) <= 0:
            return None
        per_correct_before = sum(before) / sum(acc_before)
        per_correct_after = sum(after) / sum(acc_after)
        if per_correct_after / per_correct_before - 1 < MIN_RISE:
            return None
        bonus = (
            f"agentic_reward_tool_bonus is {self.tool_bonus:g} in this run; 0 turns the +bonus for using both tools off"
            if self.tool_bonus
            else "agentic_reward_tool_bonus (0 turns the built-in rewards' bonus for using both tools off), or a "
            "custom reward that pays per call"
        )
        return self._warn(
            "tool_calls_per_correct",
            "rollout/tool_calls_per_traj / reward/accuracy",
            f"tool calls per trajectory {calls[1]:.2f} -> {calls[2]:.2f} (t = {calls[3]:.1f}), per correct answer "
            f"{per_correct_before:.2f} -> {per_correct_after:.2f}, accuracy {acc[1]:.2f} -> {acc[2]:.2f} (flat)",
            "the reward pays for tool use that the answers do not need (e.g. a search before python that finds "
            "nothing, docs/algorithms.md §6.4).",
            bonus,
            calls_before=calls[1], calls_after=calls[2], t=calls[3], per_correct_before=per_correct_before,
            per_correct_after=per_correct_after, acc_before=acc[1], acc_after=acc[2], tool_bonus=self.tool_bonus,
        )  # fmt: skip

    def _length(self) -> GamingWarning | None:
        length = self._rises("rollout/response_length", relative=MIN_RISE)
        reward = self._flat("reward/mean")
        if not length or not reward or not length[0] or not reward[0]:
            return None
        return self._warn(
            "length_flat_reward",
            "rollout/response_length",
            f"response length {length[1]:.0f} -> {length[2]:.0f} tokens (t = {length[3]:.1f}), reward "
            f"{reward[1]:.3f} -> {reward[2]:.3f} (flat)",
            "responses grow without earning reward: longer reasoning or more tool output that the answers do not "
            "use, or a length-biased loss.",
            "arpo_max_response_length (a tighter budget), agentic_max_tool_calls",
            length_before=length[1], length_after=length[2], t=length[3], reward_before=reward[1],
            reward_after=reward[2],
        )  # fmt: skip

    def _format_only(self) -> GamingWarning | None:
        pairs = [self._windows(k) for k in ("reward/format_ok_rate", "reward/mean", "reward/accuracy")]
        if any(p is None for p in pairs):
            return None
        fmt, reward, acc = (statistics.fmean(p[1]) for p in pairs)
        if not (fmt >= 0.8 and reward >= 0.05 and acc <= 0.05):
            return None
        return self._warn(
            "format_only_reward",
            "reward/format_ok_rate, reward/mean, reward/accuracy",
            f"format passes {fmt:.0%} of trajectories and the reward is {reward:.3f} while {acc:.1%} of answers are "
            "right (latest window)",
            "the reward pays for well-formed answers that are wrong (partial-credit F1 on wrong answers, a format "
            "term, or a tool bonus on wrong answers).",
            "agentic_reward (em instead of f1) or the custom reward function",
            format_ok=fmt, reward=reward, accuracy=acc,
        )  # fmt: skip

    def _identical(self) -> GamingWarning | None:
        rise = self._rises("reward/identical_groups", absolute=MIN_RISE)
        if not rise or not rise[0]:
            return None
        return self._warn(
            "identical_groups_rising",
            "reward/identical_groups",
            f"groups whose rewards are all equal {rise[1]:.0%} -> {rise[2]:.0%} (t = {rise[3]:.1f})",
            "more groups are solved (or failed) by every trajectory, and carry no gradient; a reward that saturates "
            "(all right, or all paid the same bonus) does this.",
            "rl_dynamic_sampling: true (replaces equal-reward groups), harder data, or arpo_rollout_n",
            before=rise[1], after=rise[2], t=rise[3],
        )  # fmt: skip

    def _repeats(self) -> GamingWarning | None:
        rise = self._rises("rollout/repeated_tool_calls_rate", absolute=0.0)
        if not rise or not rise[0] or rise[2] < 0.1:
            return None
        return self._warn(
            "repeated_tool_calls",
            "rollout/repeated_tool_calls_rate",
            f"calls that repeat an earlier call of the same trajectory {rise[1]:.0%} -> {rise[2]:.0%} "
            f"(t = {rise[3]:.1f})",
            "repeated identical queries add calls (and search-API cost) without new information: a reward paid per "
            "call, or a policy stuck in a loop.",
            "agentic_reward_tool_bonus, agentic_max_tool_calls",
            before=rise[1], after=rise[2], t=rise[3],
        )  # fmt: skip


_KEYS = (
    "reward/accuracy",
    "reward/mean",
    "reward/format_ok_rate",
    "reward/identical_groups",
    "dynamic_sampling/identical_groups_in_update",
    "rollout/tool_calls_per_traj",
    "rollout/response_length",
    "rollout/repeated_tool_calls_rate",
)


def scan_records(records: Iterable[dict[str, Any]], window: int = WINDOW, min_t: float = MIN_T,
                 tool_bonus: float | None = None) -> list[GamingWarning]:  # fmt: skip
    r"""Run the monitor over a finished run's log records in order (each with `current_steps` or `step`)."""
    monitor = GamingMonitor(window, min_t, tool_bonus)
    out = []
    for i, record in enumerate(records):
        step = record.get("current_steps", record.get("step", i + 1))
        out += monitor.update(int(step), record)
    return out


def scan_log(path: str | os.PathLike, **kwargs: Any) -> list[GamingWarning]:
    r"""`scan_records` over a `trainer_log.jsonl`.

    Raises:
        ValueError: a line that is not JSON (names the file and line).
    """
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{n}: not a JSON line ({err})") from err
    return scan_records(records, **kwargs)


class GamingMonitorCallback(TrainerCallback):
    r"""The monitor in a live run: adds `warnings` to the record LLaMA-Factory's LogCallback writes, and logs them.

    Must come before LogCallback in the callback list (the workflow puts it first): the record is
    `state.log_history[-1]`, which LogCallback reads when it writes `trainer_log.jsonl`.
    """

    def __init__(self, window: int = WINDOW, min_t: float = MIN_T, tool_bonus: float | None = None) -> None:
        r"""Create the object (the arguments are described in `GamingMonitor`)."""
        self.monitor = GamingMonitor(window, min_t, tool_bonus)

    def on_log(self, args, state, control, logs=None, **kwargs):
        r"""Feed the step's record to the monitor; attach and log the warnings it raised."""
        record = state.log_history[-1] if state.log_history else (logs or {})
        new = self.monitor.update(state.global_step, record)
        if new:
            from ..common.log import get_logger

            messages = [w.message() for w in new]
            record["warnings"] = record.get("warnings", []) + messages  # reporters get `logs`, numbers only
            record["warning_details"] = record.get("warning_details", []) + [w.detail() for w in new]
            logger = get_logger(__name__)
            for message in messages:
                logger.warning(message)
        return control


def add_subcommand(subparsers) -> None:
    r"""Register `llamafactory-agentic gaming-scan TRAINER_LOG...` (the monitor over finished runs)."""
    p = subparsers.add_parser(
        "gaming-scan",
        help="scan finished runs' trainer_log.jsonl for reward-gaming patterns (what the live monitor warns about)",
    )
    p.add_argument("logs", nargs="+", metavar="trainer_log.jsonl")
    p.add_argument("--window", type=int, default=WINDOW, help="rollout records per window")
    p.add_argument("--min-t", type=float, default=MIN_T, help="Welch's t a rise needs")
    p.set_defaults(func=run_cli)


def run_cli(args) -> int:
    r"""Print each log's warnings; 1 when any was raised, 2 for an unreadable log."""
    rc = 0
    for path in args.logs:
        try:
            warnings = scan_log(path, window=args.window, min_t=args.min_t)
        except (OSError, ValueError) as err:
            print(f"gaming-scan: {err}")
            rc = 2
            continue
        print(f"{path}: {len(warnings)} warning(s)")
        for w in warnings:
            print(f"  step {w.step}: {w.message()}")
        rc = max(rc, 1 if warnings else 0)
    return rc
