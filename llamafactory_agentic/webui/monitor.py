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

"""Live RL monitoring for LLaMA-Board: the metric figure from `trainer_log.jsonl` and the rollout progress line.

The figure has one panel per metric, drawn like LLaMA-Board's loss plot (the values, and LLaMA-Factory's `smooth` EMA
once there are enough points) but zeros are kept: a clip fraction, KL or accuracy of 0 is a value, not a gap.
Rollout metrics exist on the steps whose first micro-step ran a rollout (one rollout feeds `steps_per_generation`
updates), so their panels show points at those steps; optimiser metrics (entropy, KL, clip fraction) exist every step.
The share of groups whose rewards are all equal (`reward/identical_groups`, no learning signal) has its panel, and
with dynamic sampling so has the share left in the update (`dynamic_sampling/identical_groups_in_update`).
"""

import json
import math
import os
import time
from typing import Any

from ..train.presets import AGENTIC_CONFIG_NAME
from .locales import message


# (panel title, training keys tried in order, validation key)
RL_PANELS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("reward (mean)", ("reward/mean", "reward"), "eval_reward"),
    ("accuracy", ("reward/accuracy",), "eval_reward/accuracy"),
    ("identical-reward groups (share, rolled out)", ("reward/identical_groups",), None),
    ("identical-reward groups (share, in the update)", ("dynamic_sampling/identical_groups_in_update",), None),
    ("tool calls / trajectory", ("rollout/tool_calls_per_traj",), "eval_rollout/tool_calls_per_traj"),
    ("branches / rollout", ("rollout/branches",), None),
    ("entropy (trained tokens)", ("loss/entropy",), None),
    ("response length (tokens)", ("rollout/response_length",), "eval_rollout/response_tokens"),
    ("KL", ("loss/kl", "loss/approx_kl"), None),
    ("clip fraction", ("loss/clip_frac",), None),
)
AEPO_PANELS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("AEPO: gradient-preserved clip fraction", ("aepo/grad_preserved_frac",), None),
    ("AEPO: penalised branch decisions", ("aepo/penalised_branch_decisions",), None),
    ("AEPO: branch samples / group", ("aepo/branch_samples_per_group",), None),
)


def read_jsonl(path: str) -> list[dict[str, Any]]:
    r"""Records of a JSON-lines file that is being appended to (a half-written last line is ignored)."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    return records


def _series(records: list[dict[str, Any]], keys: tuple[str, ...]) -> tuple[str | None, list[int], list[float]]:
    r"""`(key used, steps, values)` of the first of `keys` present in training records; zeros kept."""
    for key in keys:
        steps, values = [], []
        for record in records:
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                steps.append(int(record.get("current_steps", len(steps) + 1)))
                values.append(float(value))
        if values:
            return key, steps, values
    return None, [], []


def rl_panels(records: list[dict[str, Any]], aepo: bool = False) -> list[dict[str, Any]]:
    r"""The data of each panel that has values: `{"title", "key", "steps", "values", "eval_steps", "eval_values"}`."""
    panels = []
    for title, keys, eval_key in RL_PANELS + (AEPO_PANELS if aepo else ()):
        key, steps, values = _series(records, keys)
        if key is None:
            continue
        eval_steps, eval_values = _series(records, (eval_key,))[1:] if eval_key else ([], [])
        if key == "loss/approx_kl":
            title = "KL (approx., rl_kl_coef = 0)"
        panels.append(
            {
                "title": title,
                "key": key,
                "steps": steps,
                "values": values,
                "eval_steps": eval_steps,
                "eval_values": eval_values,
            }
        )
    return panels


RL_COLUMNS = 3  # the RL plot's grid: three panels a row across the page's width (nine RL panels: three rows)


def rl_figure(records: list[dict[str, Any]], aepo: bool = False) -> Any:
    r"""A matplotlib figure with one panel per RL metric in a grid of `RL_COLUMNS` (None when the log has none yet)."""
    panels = rl_panels(records, aepo)
    return _figure(panels, width=12.0, panel_height=2.3, columns=RL_COLUMNS) if panels else None


def loss_figure(records: list[dict[str, Any]]) -> Any:
    r"""LLaMA-Board's loss plot for the plugin's RL logs, zero losses kept (its own plot drops them)."""
    key, steps, values = _series(records, ("loss",))
    panel = {"title": "loss", "key": key, "steps": steps, "values": values, "eval_steps": [], "eval_values": []}
    return _figure([panel], width=6.4, panel_height=4.4, ylabel="loss")


def _figure(
    panels: list[dict[str, Any]], width: float, panel_height: float, ylabel: str | None = None, columns: int = 1
) -> Any:
    r"""Panels drawn like LLaMA-Board's loss plot: the values and, from 5 points on, LLaMA-Factory's `smooth` EMA.

    The panels fill a grid of `columns` (at most as many as there are panels) row by row; `panel_height` is one
    row's height in inches; unused cells of the last row are hidden.

    Built on `matplotlib.figure.Figure` (no pyplot state, safe in gradio's worker threads).
    """
    from llamafactory.extras.ploting import smooth
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    columns = max(1, min(columns, len(panels)))
    rows = -(-len(panels) // columns)
    fig = Figure(figsize=(width, panel_height * rows + 0.4), layout="constrained")
    grid = fig.subplots(rows, columns, sharex=True, squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    axes = axes[: len(panels)]
    steps = sorted({step for panel in panels for step in panel["steps"] + panel["eval_steps"]})
    legend = True
    for ax, panel in zip(axes, panels):
        ax.plot(panel["steps"], panel["values"], "o-", color="#1f77b4", alpha=0.4, markersize=3, label="original")
        if len(panel["values"]) >= 5:
            ax.plot(panel["steps"], smooth(panel["values"]), color="#1f77b4", label="smoothed")
        if panel["eval_values"]:
            ax.plot(panel["eval_steps"], panel["eval_values"], "s", color="#ff7f0e", markersize=4, label="eval")
        if legend and (panel["eval_values"] or len(panel["values"]) >= 5):
            ax.legend(fontsize=6, loc="best")
            legend = False
        ax.set_title(panel["title"], fontsize=8)
        if ylabel:
            ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.yaxis.get_offset_text().set_fontsize(6)
        if len(steps) <= 10:
            ax.set_xticks(steps)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes[-columns:]:  # the bottom panel of each column
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_tick_params(labelbottom=True)
    return fig


def gaming_warnings(records: list[dict[str, Any]], lang: str | None = "en") -> str:
    r"""Markdown of the reward-gaming monitor's warnings in a run's trainer log ("" when there are none).

    The live monitor (`guards.gaming.GamingMonitorCallback`) adds a `warnings` list of messages to the record of the
    step that raised them (and `warning_details`, their numbers); each is listed with that step, in log order, in
    English as logged or said again in `lang` from its numbers (`locales.GAMING_MESSAGES`).

    Args:
        records: Records of `trainer_log.jsonl` (`read_jsonl`).
        lang: LLaMA-Board's language.
    """
    found = []
    for record in records:
        texts = record.get("warnings")
        if not isinstance(texts, list):
            continue
        details = record.get("warning_details")
        details = details if isinstance(details, list) and len(details) == len(texts) else [None] * len(texts)
        found += [
            (record.get("current_steps", "?"), _warning_text(str(text), detail, lang))
            for text, detail in zip(texts, details)
        ]
    if not found:
        return ""
    lines = [message("gaming_warnings", lang, count=len(found)), ""]
    lines += ["- " + message("gaming_warning", lang, step=step, text=text) for step, text in found]
    return "\n".join(lines)


def _warning_text(english: str, detail: Any, lang: str | None) -> str:
    r"""One logged warning in `lang`: said again from its `warning_details` entry, else the logged English text."""
    if lang in (None, "en") or not isinstance(detail, dict) or not isinstance(detail.get("params"), dict):
        return english
    params = detail["params"]
    key = f"gaming_{detail.get('pattern')}" + (f"_{params.get('kind')}" if "kind" in params else "")
    try:
        return message(key, lang, english=english, **params)
    except (KeyError, ValueError, TypeError, IndexError):  # a log of another version: its own text
        return english


def is_aepo_run(output_path: str) -> bool:
    r"""Whether the run in `output_path` uses an AEPO preset (from its `agentic_config.json`)."""
    try:
        with open(os.path.join(output_path, AGENTIC_CONFIG_NAME), encoding="utf-8") as f:
            return str(json.load(f).get("preset", "")).startswith("aepo")
    except (OSError, ValueError):
        return False


def log_signature(output_path: str) -> tuple:
    r"""What changes when the run writes: sizes and times of the trainer log and the rollout progress file."""
    from llamafactory.extras.constants import TRAINER_LOG

    from ..rollout.progress import ROLLOUT_PROGRESS_NAME

    signature = []
    for name in (TRAINER_LOG, ROLLOUT_PROGRESS_NAME):
        try:
            stat = os.stat(os.path.join(output_path, name))
            signature.append((stat.st_size, stat.st_mtime_ns))
        except OSError:
            signature.append(None)
    return tuple(signature)


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_line(
    output_path: str, lang: str | None = "en", now: float | None = None, since: float | None = None
) -> str:
    r"""One line on the current (or last) rollout from `rollout_progress.json` ("" when there is none).

    The rollout is named by the training step it feeds, as in the rollout viewer: "Rollout of step 3" (the
    trainer's `global_step` + 1) or "Validation rollout after step 2".

    Args:
        output_path: The run's output directory.
        lang: LLaMA-Board's language.
        now: Current Unix time (for the elapsed time of a running rollout).
        since: Unix time the current run started: a status last written before it belongs to a previous run in the
            same directory and gives "".
    """
    from ..rollout.progress import ROLLOUT_PROGRESS_NAME

    try:
        with open(os.path.join(output_path, ROLLOUT_PROGRESS_NAME), encoding="utf-8") as f:
            status = json.load(f)
    except (OSError, ValueError):
        return ""
    if since is not None and float(status.get("updated", 0)) < since:
        return ""
    now = time.time() if now is None else now
    done = bool(status.get("done"))
    elapsed = (status.get("updated", now) if done else now) - status.get("started", now)
    step = int(status.get("global_step", 0))
    if status.get("phase") == "validation":
        name = message("rollout_validation", lang, step=step)
    else:
        name = message("rollout_training", lang, step=step + 1)
    fields = {
        "rollout": name,
        "round": status.get("round", 0),
        "active": status.get("active", 0),
        "new_tokens": f"{status.get('new_tokens', 0):,}",
        "total_tokens": f"{status.get('total_tokens', 0):,}",
        "elapsed": _duration(elapsed),
    }
    return ("↻ " if not done else "") + message("rollout_done" if done else "rollout_running", lang, **fields)
