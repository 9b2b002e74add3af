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

r"""Load recipe: a `llamafactory-cli train` recipe YAML into LLaMA-Board's Train form (docs/llamaboard.md "Load recipe").

The picker lists the shipped recipes (`recipes/` of the repository and of the working directory, the package's
`resources/recipes/`, and the demo's `saves/demo/recipes/`). `recipe_form` splits a recipe into LLaMA-Board's own
fields (`BOARD_KEYS`: model path, stage, dataset, template, learning rate, batch sizes, ...), the agentic panel's
fields (`fields.panel_fields`) and the rest, which goes into LLaMA-Board's *Extra arguments* JSON (LLaMA-Board
applies it last, so the command runs the recipe's values). No gradio here (`webui.panel` wires the picker).
"""

import os
from pathlib import Path
from typing import Any

from .chat import allowed_roots, checked_yaml_path
from .fields import FALSE, TRUE, panel_fields


REPO_RECIPES = Path(__file__).resolve().parents[2] / "recipes"
PACKAGE_RECIPES = Path(__file__).resolve().parents[1] / "resources" / "recipes"
DEMO_RECIPES = Path("saves") / "demo" / "recipes"  # `llamafactory-agentic demo`'s, under the working directory
NOT_RECIPES = ("tools", "deepspeed")  # folders of recipes/ that hold tool configs and DeepSpeed files

# recipe key -> LLaMA-Board element (`top.*` / `train.*`), for the keys LLaMA-Board's Train tab builds its command from
BOARD_KEYS = {
    "model_name_or_path": "top.model_path",
    "finetuning_type": "top.finetuning_type",
    "template": "top.template",
    "stage": "train.training_stage",
    "dataset_dir": "train.dataset_dir",
    "dataset": "train.dataset",
    "learning_rate": "train.learning_rate",
    "num_train_epochs": "train.num_train_epochs",
    "max_grad_norm": "train.max_grad_norm",
    "max_samples": "train.max_samples",
    "cutoff_len": "train.cutoff_len",
    "per_device_train_batch_size": "train.batch_size",
    "gradient_accumulation_steps": "train.gradient_accumulation_steps",
    "lr_scheduler_type": "train.lr_scheduler_type",
    "logging_steps": "train.logging_steps",
    "save_steps": "train.save_steps",
    "warmup_steps": "train.warmup_steps",
    "report_to": "train.report_to",
    "output_dir": "train.output_dir",
}
TEXT_KEYS = ("learning_rate", "num_train_epochs", "max_grad_norm", "max_samples")  # Textboxes in LLaMA-Board
COMPUTE_TYPES = ("pure_bf16", "bf16", "fp16")  # recipe flags -> `train.compute_type` (fp32 when none is set)
# keys LLaMA-Board always sets itself (its command), left out of the extra arguments
BOARD_OWN = frozenset({"do_train", "plot_loss", "trust_remote_code", "ddp_timeout", "include_num_input_tokens_seen"})


def recipe_roots(cwd: str | os.PathLike | None = None) -> list[Path]:
    r"""The folders whose recipes the picker may read: the repository's `recipes/`, the package's and the cwd."""
    return [*allowed_roots(REPO_RECIPES, cwd), PACKAGE_RECIPES.resolve()]


def recipe_choices(cwd: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    r"""`(label, path)` of every recipe the picker offers (labels relative to their `recipes` folder), sorted."""
    here = Path(cwd or os.getcwd())
    folders = [(here / "recipes", "recipes"), (REPO_RECIPES, "recipes"), (PACKAGE_RECIPES, "package"),
               (here / DEMO_RECIPES, "demo")]  # fmt: skip
    choices, seen = [], set()
    for folder, tag in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.y*ml")):
            relative = path.relative_to(folder)
            if relative.parts[0] in NOT_RECIPES or path.resolve() in seen:
                continue
            seen.add(path.resolve())
            choices.append((f"{tag}: {relative.as_posix()}", str(path)))
    return choices


def read_recipe(value: str, cwd: str | os.PathLike | None = None) -> tuple[dict[str, Any], str]:
    r"""The recipe at `value` (a picked or typed path, checked before it is read) and its resolved path.

    Raises:
        ValueError: the path is outside `recipe_roots` or not a YAML file (refused unread), the file is missing, not
            YAML or not a mapping (the message names the file and the line, never its content).
    """
    import yaml

    path = checked_yaml_path(value, recipe_roots(cwd), "recipes", cwd)
    if not path:
        raise ValueError("choose a recipe first")
    try:
        with open(path, encoding="utf-8") as f:
            recipe = yaml.safe_load(f)
    except FileNotFoundError:
        raise ValueError(f"no recipe at {path}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{path} is not valid YAML{where}") from None
    if not isinstance(recipe, dict):
        raise ValueError(f"{path} is not a recipe (a YAML mapping of `llamafactory-cli train` keys)")
    return recipe, path


def _ui_value(field: Any, value: Any) -> Any:
    if field.kind == "bool" and (field.optional or not isinstance(value, bool)):
        return TRUE if value in (True, "true", "True") else FALSE if value in (False, "false", "False") else value
    if field.kind == "bool":
        return bool(value)
    if field.kind in ("choice", "text"):
        return str(value)
    return value


def recipe_form(recipe: dict[str, Any], stage_labels: dict[str, str]) -> dict[str, Any]:
    r"""Split a recipe into the Train form's values.

    Args:
        recipe: The recipe's keys (`read_recipe`).
        stage_labels: `{stage: LLaMA-Board's label}` (the inverse of LLaMA-Factory's `TRAINING_STAGES`).

    Returns:
        `{"board": {element id: value}, "panel": {element name: UI value}, "extra": {key: value}}`: LLaMA-Board's
        fields (`BOARD_KEYS`, `train.compute_type`; `output_dir` as its last folder name, LLaMA-Board keeps runs in
        `saves/<model>/<method>/<name>`), the agentic panel's fields, and every other key for *Extra arguments*.

    Raises:
        ValueError: the recipe's stage is not one of LLaMA-Board's (names the stage and the known ones).
    """
    by_key = {field.key: field for field in panel_fields()}
    board: dict[str, Any] = {}
    panel: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in recipe.items():
        if key == "stage":
            if value not in stage_labels:
                raise ValueError(f"stage `{value}` is not one of LLaMA-Board's stages ({', '.join(stage_labels)})")
            board[BOARD_KEYS[key]] = stage_labels[value]
        elif key == "dataset":
            board[BOARD_KEYS[key]] = [name.strip() for name in str(value).split(",") if name.strip()]
        elif key == "report_to":  # one choice in LLaMA-Board's drop-down; a list of several goes to extra
            values = value if isinstance(value, list) else [value]
            if len(values) == 1:
                board[BOARD_KEYS[key]] = str(values[0])
            else:
                extra[key] = value
        elif key == "output_dir":
            board[BOARD_KEYS[key]] = Path(str(value)).name
        elif key in TEXT_KEYS:
            board[BOARD_KEYS[key]] = str(value)
        elif key in BOARD_KEYS:
            board[BOARD_KEYS[key]] = value
        elif key in COMPUTE_TYPES:
            if value and "train.compute_type" not in board:
                board["train.compute_type"] = key
        elif key in by_key:
            panel[by_key[key].name] = _ui_value(by_key[key], value)
        elif key not in BOARD_OWN and value is not None:
            extra[key] = value
    if not any(recipe.get(key) for key in COMPUTE_TYPES):
        board["train.compute_type"] = "fp32"
    return {"board": board, "panel": panel, "extra": extra}
