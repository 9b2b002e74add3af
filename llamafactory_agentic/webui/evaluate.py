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

r"""The agentic Evaluate panel of LLaMA-Board's Evaluate & Predict tab, without gradio.

The panel runs the evaluation harness as its command line does, `llamafactory-agentic eval CONFIG.yaml key=value ...`
(evaluation/README.md), in a subprocess: the model of LLaMA-Board's top row (path, template, checkpoint) and the
panel's fields become `key=value` overrides of the chosen evaluation config. When the run ends, the panel shows its
`summary.md` and the path of its `report.html`.

Also here: the marks of the plugin's RL datasets in Evaluate's dataset list, and the check of the packages that
LLaMA-Factory's own Evaluate & Predict needs (it always generates, `predict_with_generate`, and then requires jieba,
nltk and rouge-chinese, which a README install of LLaMA-Factory does not have).
"""

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any


REPO_EXAMPLES = Path(__file__).resolve().parents[2] / "evaluation" / "examples"
PRESETS = ("paper", "train_val")
PREDICT_PACKAGES = (("jieba", "jieba"), ("nltk", "nltk"), ("rouge_chinese", "rouge-chinese"))  # (module, pip name)
LOG_NAME = "llamaboard_eval.log"


NO_CONFIG = "(no config)"  # the model's agentic_config.json, the preset and the panel's fields only
NO_CONFIG_LABEL = "(no config: the preset and the checkpoint's agentic_config.json)"


def eval_config_choices(cwd: str | os.PathLike | None = None) -> list[tuple[str, str]]:
    r"""`(label, value)` evaluation configs to offer: "(no config)" first, then the example YAML files.

    The examples are `evaluation/examples/*.yaml` of the working directory and of the plugin's repository.

    "(no config)" runs `llamafactory-agentic eval key=value ...` with the panel's keys only, so nothing of a config
    file (its tokens per call, its benchmarks) replaces what the preset takes from the checkpoint (`train_val`).
    """
    found, seen = [(NO_CONFIG_LABEL, NO_CONFIG)], set()
    for folder in (Path(cwd or os.getcwd()) / "evaluation" / "examples", REPO_EXAMPLES):
        if folder.is_dir():
            for path in sorted(folder.glob("*.y*ml")):
                if path.resolve() not in seen:
                    seen.add(path.resolve())
                    found.append((str(path), str(path)))
    return found


def checked_eval_config(value: str | None, cwd: str | os.PathLike | None = None) -> str:
    r"""The panel's evaluation config, checked before it is read: "" for "(no config)", else an allowed YAML file.

    Allowed: a YAML file under the plugin's `evaluation/` folder or the working directory
    (`webui.chat.checked_yaml_path`).

    Raises:
        ValueError: any other path (refused unread: the run's output, shown in the page, never quotes another file).
    """
    from .chat import allowed_roots, checked_yaml_path

    if not str(value or "").strip() or str(value).strip() in (NO_CONFIG, NO_CONFIG_LABEL):
        return ""
    return checked_yaml_path(str(value), allowed_roots(REPO_EXAMPLES.parent, cwd), "evaluation configs", cwd)


def model_overrides(
    model_path: str, template: str | None, finetuning_type: str, checkpoints: list[str] | str | None, save_dir: Any
) -> list[str]:
    r"""`key=value` overrides for the model of LLaMA-Board's top row, loaded as LLaMA-Board's Chat loads it.

    Args:
        model_path: `top.model_path`.
        template: `top.template` (None or "default": the config's).
        finetuning_type: `top.finetuning_type`; for LoRA-like methods the checkpoints are adapters.
        checkpoints: `top.checkpoint_path` (a list for adapters, a name for a full checkpoint, or empty).
        save_dir: `name -> path` of a checkpoint (LLaMA-Board's `get_save_dir` for the model and method).
    """
    from llamafactory.extras.constants import PEFT_METHODS

    out = [f"model_name_or_path={model_path}"]
    if template and template != "default":
        out.append(f"template={template}")
    names = [checkpoints] if isinstance(checkpoints, str) else list(checkpoints or [])
    names = [name for name in names if name]
    if names and finetuning_type in PEFT_METHODS:
        out.append("adapter_name_or_path=" + ",".join(str(save_dir(name)) for name in names))
        out.append(f"finetuning_type={finetuning_type}")
    elif names:
        out[0] = f"model_name_or_path={save_dir(names[0])}"
    return out


def panel_overrides(
    preset: str, benchmarks: str, runs: Any, max_new_tokens: Any, output_dir: str, extra: str
) -> list[str]:
    r"""`key=value` overrides from the panel's fields (an empty field leaves the config's value).

    Args:
        preset: `eval_preset` (`paper` or `train_val`).
        benchmarks: `eval_benchmarks` as comma-separated registry names (empty: the config's).
        runs: `eval_runs` as typed (empty: the config's).
        max_new_tokens: `eval_max_new_tokens` per generation call as typed (empty: the config's).
        output_dir: `eval_output_dir`.
        extra: More `key=value` pairs separated by spaces or new lines (the command line's syntax).

    Raises:
        ValueError: an unknown preset, a number field that is not a positive integer, or an extra word without `=`.
    """
    if preset not in PRESETS:
        raise ValueError(f"eval_preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    out = [f"eval_preset={preset}", f"eval_output_dir={output_dir}"]
    if benchmarks and benchmarks.strip():
        names = [name.strip() for name in benchmarks.split(",") if name.strip()]
        out.append("eval_benchmarks=[" + ",".join(names) + "]")
    for key, field, value in (("eval_runs", "Runs", runs), ("eval_max_new_tokens", "Tokens per call", max_new_tokens)):
        if value is None or not str(value).strip():
            continue
        try:
            number = float(str(value).strip())
            ok = number == int(number) and number >= 1
        except (ValueError, OverflowError):
            ok = False
        if not ok:
            raise ValueError(
                f"{field} ({key}) must be a whole number >= 1, got {str(value).strip()!r}: type one, or leave the "
                "field empty for the config's value"
            )
        out.append(f"{key}={int(number)}")
    for word in (extra or "").split():
        if "=" not in word:
            raise ValueError(f"extra keys: {word!r} is not key=value (e.g. eval_batch_size=8)")
        out.append(word)
    return out


def eval_command(config: str, overrides: list[str]) -> list[str]:
    r"""The command line: `llamafactory-agentic eval [CONFIG] key=value ...` (the console script of this interpreter).

    `config` "" (`checked_eval_config` of `NO_CONFIG`) leaves the file out: the keys alone describe the run.
    """
    script = Path(sys.executable).parent / "llamafactory-agentic"
    if script.is_file():
        head = [str(script)]
    elif shutil.which("llamafactory-agentic"):
        head = [shutil.which("llamafactory-agentic")]
    else:
        head = [sys.executable, "-m", "llamafactory_agentic.cli"]
    return [*head, "eval", *([config] if config else []), *overrides]


def read_result(output_dir: str | os.PathLike) -> tuple[str | None, str | None]:
    r"""`(summary.md text, report.html path)` of a finished run in `output_dir` (None for what is not there)."""
    out = Path(output_dir)
    summary = out / "summary.md"
    report = out / "report.html"
    return (
        summary.read_text(encoding="utf-8") if summary.is_file() else None,
        str(report) if report.is_file() else None,
    )


def missing_predict_packages() -> list[str]:
    r"""The packages (pip names) that LLaMA-Factory's predict needs, jieba, nltk and rouge-chinese, not installed."""
    return [pip for module, pip in PREDICT_PACKAGES if importlib.util.find_spec(module) is None]


def predict_hint(missing: list[str]) -> str:
    r"""The refusal of LLaMA-Board's Evaluate & Predict when `missing` packages are absent, with the install command."""
    return (
        "LLaMA-Factory's Evaluate & Predict generates and scores with BLEU/ROUGE, which needs "
        f"{', '.join(missing)} (not installed). Install them: pip install {' '.join(missing)} "
        "(or LLaMA-Factory's metrics extra: pip install -r requirements/metrics.txt of its repository). "
        "For agentic tasks with tools use the Agentic evaluation panel below instead."
    )


def mark_rl_datasets(choices: list[Any], dataset_info: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    r"""Evaluate's dataset choices with the plugin's RL datasets marked (they hold prompts and ground truths only).

    Args:
        choices: LLaMA-Board's choices (names, or `(label, name)` pairs).
        dataset_info: The `dataset_info.json` entries.

    Returns:
        `(label, name)` pairs; an `arpo_rl` dataset is labelled "NAME (arpo_rl: RL prompts, use Agentic evaluation)".
    """
    from ..data.converters import RL_FORMATTING

    out = []
    for choice in choices:
        label, name = choice if isinstance(choice, (tuple, list)) else (choice, choice)
        if (dataset_info.get(name) or {}).get("formatting") == RL_FORMATTING:
            label = f"{name} ({RL_FORMATTING}: RL prompts, use Agentic evaluation)"
        out.append((label, name))
    return out
