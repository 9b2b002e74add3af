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

r"""Resuming from checkpoints: skip the ones an interrupted save left incomplete, and keep the logs free of repeats.

Transformers' `Trainer._save_checkpoint` writes a checkpoint folder in this order: the model (`save_model`), the
optimizer and scheduler, the RNG states (the `arpo`/`aepo` trainer adds `rollout_rng_state_<rank>.json` there) and
last `trainer_state.json` (transformers 5.6, `trainer.py` `_save_checkpoint`). A folder without a readable
`trainer_state.json` is therefore a save that was killed; Transformers' `get_last_checkpoint` still picks it (it looks
at folder names only), and the resume then fails after the model loaded with `FileNotFoundError`.
`last_complete_checkpoint` replaces it in LLaMA-Factory's parser (`integration.patches.patch_parser`), so
auto-resume skips such a folder with a warning naming it.

A resumed run repeats the steps after its checkpoint, and LLaMA-Factory's `LogCallback` appends to
`trainer_log.jsonl`, so those steps would be logged twice. `drop_records_after` removes the records of the steps that
are about to be repeated (called when training begins, `train.log_callback`).
"""

import json
import os
import re
from typing import Any

from ..common.log import get_logger


TRAINER_STATE_NAME = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME
TRAINER_LOG_NAME = "trainer_log.jsonl"  # llamafactory.extras.constants.TRAINER_LOG
ROLLOUT_LOG_NAME = "rollouts.jsonl"  # train.arpo.metrics.ROLLOUT_LOG_NAME
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR + "-<step>"

logger = get_logger(__name__)


def checkpoint_problem(path: str) -> str | None:
    r"""Why the checkpoint folder `path` cannot be resumed from, or None when it is complete.

    Complete means `trainer_state.json`, the file Transformers writes last, exists and holds a JSON object with a
    `global_step`.
    """
    state_path = os.path.join(path, TRAINER_STATE_NAME)
    if not os.path.isdir(path):
        return "it is not a folder"
    if not os.path.isfile(state_path):
        return f"it has no {TRAINER_STATE_NAME}, the file Transformers writes last: the save was interrupted"
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError) as err:
        return f"its {TRAINER_STATE_NAME} cannot be read ({err}): the save was interrupted"
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return f"its {TRAINER_STATE_NAME} has no global_step"
    return None


def checkpoint_step(path: str) -> int:
    r"""`global_step` of the complete checkpoint `path` (from its `trainer_state.json`).

    Raises:
        ValueError: the checkpoint is incomplete (see `checkpoint_problem`).
    """
    problem = checkpoint_problem(path)
    if problem is not None:
        raise ValueError(f"checkpoint {path} cannot be resumed from: {problem}.")
    with open(os.path.join(path, TRAINER_STATE_NAME), encoding="utf-8") as f:
        return json.load(f)["global_step"]


def last_complete_checkpoint(folder: str) -> str | None:
    r"""The `checkpoint-<step>` folder of `folder` with the highest step that is complete, or None.

    Drop-in replacement of `transformers.trainer_utils.get_last_checkpoint` (which LLaMA-Factory's parser calls to
    auto-resume): incomplete folders (see `checkpoint_problem`) are skipped with a warning naming each one.
    """
    steps = []
    for name in os.listdir(folder):
        match = _CHECKPOINT_RE.match(name)
        if match and os.path.isdir(os.path.join(folder, name)):
            steps.append((int(match.group(1)), name))
    for _, name in sorted(steps, reverse=True):
        path = os.path.join(folder, name)
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        logger.warning(
            f"Skipping checkpoint {path} for auto-resume: {problem}. Delete that folder (the run will save it again)."
        )
    return None


def resolve_resume_checkpoint(resume_from_checkpoint: Any, output_dir: str) -> str | None:
    r"""The checkpoint a run resumes from; refuses one that an interrupted save left incomplete (before the model loads).

    Args:
        resume_from_checkpoint: `TrainingArguments.resume_from_checkpoint`: a folder, True ("the last checkpoint of
            `output_dir`"; Transformers' `Trainer.train` would take the last folder by name, complete or not) or None.
        output_dir: The run's output directory.

    Returns:
        The folder (True becomes `last_complete_checkpoint(output_dir)`), or None.

    Raises:
        ValueError: naming the folder, what is missing and the complete checkpoint to use instead, if any.
    """
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is True:
        last = last_complete_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None:
            raise ValueError(f"resume_from_checkpoint: true, but {output_dir} holds no complete checkpoint.")
        return last
    path = str(resume_from_checkpoint)
    problem = checkpoint_problem(path)
    if problem is None:
        return path
    parent = os.path.dirname(os.path.normpath(path))
    other = last_complete_checkpoint(parent) if os.path.isdir(parent) else None
    instead = f"use resume_from_checkpoint: {other}" if other else "remove resume_from_checkpoint to start afresh"
    raise ValueError(f"resume_from_checkpoint {path} cannot be resumed from: {problem}. Delete it and {instead}.")


def rl_checkpoint_problem(path: str, stage: str) -> str | None:
    r"""Why the complete checkpoint `path` cannot be resumed by an `arpo`/`aepo` run, or None when it can.

    Resuming loads the checkpoint's optimiser, scheduler and step: a checkpoint of another stage (an SFT run, whose
    linear schedule ends at learning rate 0) would make the RL run train at that stage's learning rate, silently. An
    RL checkpoint is recognised by the rollout's RNG file (`rollout_rng_state_<rank>.json`, written by the
    `arpo`/`aepo` trainer) or, for a checkpoint of a version without that file, by the rollout metrics
    (`rollout/...`) in its `trainer_state.json` log history. A checkpoint with a log history and neither is another
    stage's; one with no log history at all cannot be told apart and passes.

    Args:
        path: A complete checkpoint folder (see `checkpoint_problem`).
        stage: The run's stage (`arpo` or `aepo`), for the message.

    Returns:
        The reason with the fix (start from its weights with a new output directory), or None.
    """
    if not os.path.isdir(path):
        return None
    if any(name.startswith("rollout_rng_state_") for name in os.listdir(path)):
        return None
    try:
        with open(os.path.join(path, TRAINER_STATE_NAME), encoding="utf-8") as f:
            history = json.load(f).get("log_history") or []
    except (OSError, ValueError, AttributeError):
        return None
    if not history or any(isinstance(r, dict) and any(str(k).startswith("rollout/") for k in r) for r in history):
        return None
    return (
        f"checkpoint {path} is not an arpo/aepo checkpoint (no rollout_rng_state_<rank>.json and no rollout metrics "
        f"in its {TRAINER_STATE_NAME}: another stage, such as sft, saved it). A `{stage}` run resumed from it would "
        "load that stage's optimiser, scheduler and step (an SFT schedule ends at learning rate 0). Start from its "
        f"weights instead: model_name_or_path: {path} (full) or adapter_name_or_path: {path} (LoRA), with a new "
        "output_dir (or remove resume_from_checkpoint)"
    )


def check_rl_resume(checkpoint: str | None, stage: str) -> None:
    r"""Refuse resuming an `arpo`/`aepo` run from another stage's checkpoint (`rl_checkpoint_problem`).

    Refused rather than started afresh from its weights: the output directory holds the other stage's checkpoints,
    so a fresh start there would mix two runs' logs and the next auto-resume would pick that checkpoint again; the
    error costs nothing (no model is loaded yet) and names the keys that start from its weights.

    Raises:
        ValueError: naming the checkpoint, why, and the fix.
    """
    problem = rl_checkpoint_problem(checkpoint, stage) if checkpoint else None
    if problem is not None:
        raise ValueError(problem + ".")


def _rewrite_jsonl(path: str, keep: Any) -> int:
    r"""Keep the lines of the JSON-lines file `path` for which `keep(record)` is true; returns how many were dropped.

    An unparsable line (a write cut by the kill) is dropped. The file is replaced atomically.
    """
    if not os.path.isfile(path):
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                dropped += 1
                continue
            if keep(record):
                kept.append(line if line.endswith("\n") else line + "\n")
            else:
                dropped += 1
    if dropped:
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(tmp, path)
    return dropped


def drop_records_after(output_dir: str, step: int) -> None:
    r"""Remove the log records of the steps after `step`, which the run starting at `step` will log again.

    `trainer_log.jsonl` keeps the records with `current_steps <= step` (LLaMA-Factory's `LogCallback` writes the step
    each record was logged at; a resumed run continues with step + 1); `rollouts.jsonl` keeps the groups with
    `global_step < step` (a rollout at global step s feeds the updates after s, so the one at `step` runs again).
    A fresh run (`step` 0) in a folder whose earlier run stopped before its first checkpoint starts both files anew.
    """
    trainer_log = os.path.join(output_dir, TRAINER_LOG_NAME)
    dropped = _rewrite_jsonl(trainer_log, lambda r: not isinstance(r, dict) or r.get("current_steps", 0) <= step)
    rollout_log = os.path.join(output_dir, ROLLOUT_LOG_NAME)
    dropped_groups = _rewrite_jsonl(rollout_log, lambda r: not isinstance(r, dict) or r.get("global_step", 0) < step)
    if dropped or dropped_groups:
        logger.info(
            f"Training starts at step {step}: removed {dropped} record(s) of later steps from {trainer_log} and "
            f"{dropped_groups} group(s) from {rollout_log}; those steps are logged again."
        )
