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

"""Checks before Start: what would make a plugin stage fail (or mislead) after the training process started.

`run_checks` takes the arguments LLaMA-Board would pass to `llamafactory-cli train` and returns `Finding`s, each with
the fix. The checks reuse the code the training process runs: LLaMA-Factory's parser classes (known keys) and dataset
loader, the plugin's argument validation (`integration.patches`), batch geometry and sampling checks
(`train.arpo.config`), RL row validation (`data.rl_loader`), SFT trajectory validation (`data.converters`), tool
config loading (`tools.registry`) and reward lookup (`rewards.registry`).

Row validation reads local files only (a hub dataset is validated when the run loads it) and is cached per file
version, so pressing Preview and then Start validates a large file once.
"""

import copy
import dataclasses
import difflib
import os
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from ..hparams import AgenticArguments
from .fields import RL_STAGES, SFT_STAGES


LEVELS = ("error", "warning", "info")
# the recipes' rollout sampling (docs/algorithms.md §10)
RECIPE_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
MAX_LISTED_ROWS = 5


@dataclass
class Finding:
    r"""One result of the checks.

    Attributes:
        level: `error` (Start is refused), `warning` (the run starts but something looks wrong) or `info`.
        subject: What it is about (a key, a dataset, the output directory, ...).
        message: What is wrong.
        fix: How to fix it ("" when there is nothing to do).
    """

    level: Literal["error", "warning", "info"]
    subject: str
    message: str
    fix: str = ""


# ---------------------------------------------------------------------------------------------- keys and values
def known_keys() -> set[str]:
    r"""Every key `llamafactory-cli train` accepts.

    That is the fields of LLaMA-Factory's training argument classes (with the plugin's fields when the parser is
    patched) plus the plugin's fields.
    """
    from llamafactory.hparams.parser import _TRAIN_ARGS

    keys = {f.name for cls in _TRAIN_ARGS for f in dataclasses.fields(cls)}
    return keys | {f.name for f in dataclasses.fields(AgenticArguments)}


def check_unknown_keys(args: dict[str, Any]) -> list[Finding]:
    r"""An error per key that the parser would refuse, with the closest known key as the fix."""
    known = known_keys()
    findings = []
    for key in args:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.7)
        fix = f"did you mean `{close[0]}`?" if close else "remove it from Extra arguments"
        findings.append(Finding("error", f"`{key}`", "is not a key of llamafactory-cli train", fix))
    return findings


def _agentic_namespace(stage: str, args: dict[str, Any]) -> types.SimpleNamespace:
    namespace = types.SimpleNamespace(**{f.name: f.default for f in dataclasses.fields(AgenticArguments)})
    for key, value in args.items():
        if hasattr(namespace, key):
            setattr(namespace, key, value)
    namespace.stage = namespace.agentic_stage = stage
    namespace.finetuning_type = args.get("finetuning_type", "lora")
    return namespace


def check_values(stage: str, args: dict[str, Any], world_size: int = 1) -> list[Finding]:
    r"""The plugin's own argument validation, the batch geometry and the sampling of an RL stage, run now."""
    from ..integration.patches import _validate_literal_fields, _validate_reward, _validate_rl_arguments
    from ..train.presets import resolve_presets

    findings = []
    namespace = _agentic_namespace(stage, args)
    try:
        _validate_literal_fields(namespace)
        if stage in RL_STAGES:
            _validate_rl_arguments(namespace)
            _validate_reward(namespace)  # name, import, signature, tool bonus: what the parser checks
            for warning in resolve_presets(namespace, verbose=False)["warnings"]:  # keys set with no effect
                findings.append(Finding("warning", "arguments", warning))
    except ValueError as err:
        return [Finding("error", "arguments", str(err), "change the value in the agentic panel or Extra arguments")]

    if stage not in RL_STAGES:
        return findings

    from llamafactory.hparams import GeneratingArguments

    from ..train.arpo.config import check_rl_sampling, derive_steps_per_generation

    try:
        steps = derive_steps_per_generation(
            namespace.arpo_rollout_batch_size,
            namespace.arpo_rollout_n,
            int(args.get("per_device_train_batch_size", 1)),
            int(args.get("gradient_accumulation_steps", 1)),
            max(int(world_size), 1),
        )
    except ValueError as err:
        findings.append(
            Finding("error", "batch sizes", str(err), "change Prompts per rollout, Group size M or the batch sizes")
        )
    else:
        updates = steps // int(args.get("gradient_accumulation_steps", 1))
        findings.append(
            Finding(
                "info",
                "batch sizes",
                f"each rollout gives {namespace.arpo_rollout_batch_size} x {namespace.arpo_rollout_n} trajectories "
                f"for {updates} optimiser update(s); one training step is one update",
            )
        )

    defaults = {f.name: f.default for f in dataclasses.fields(GeneratingArguments)}
    sampling = {key: args.get(key, defaults[key]) for key in ("do_sample", "temperature", "top_p", "top_k")}
    try:
        check_rl_sampling(types.SimpleNamespace(**sampling))
    except ValueError as err:
        findings.append(Finding("error", "sampling", str(err), "set Sampling temperature above 0"))
    else:
        if any(sampling[key] != value for key, value in RECIPE_SAMPLING.items()):
            shown = ", ".join(f"{key} {sampling[key]}" for key in RECIPE_SAMPLING)
            findings.append(
                Finding(
                    "info",
                    "sampling",
                    f"the rollout samples with {shown}; the recipes use temperature 1.0, top_p 1.0, top_k 0",
                )
            )

    if not namespace.arpo_rollout_log_ratio:
        findings.append(
            Finding(
                "info",
                "`arpo_rollout_log_ratio`",
                "is 0: no rollouts.jsonl is written, so the rollout viewer will stay empty",
                "set Groups written to rollouts.jsonl above 0 (e.g. 0.1)",
            )
        )
    return findings


# ---------------------------------------------------------------------------------------------- datasets
def dataset_fit(stage: str, info: dict[str, Any]) -> int:
    r"""How well a `dataset_info.json` entry fits `stage`: 0 the plugin's format, 1 usable, 2 does not fit."""
    from ..data.converters import RL_FORMATTING, SFT_FORMATTING

    formatting = info.get("formatting", "alpaca")
    if stage in RL_STAGES:
        return 0 if formatting == RL_FORMATTING and not info.get("ranking") else 2
    if stage in SFT_STAGES:
        if info.get("ranking") or formatting == RL_FORMATTING:
            return 2
        return 0 if formatting == SFT_FORMATTING else 1
    return 1


def _fit_problem(stage: str, formatting: str, ranking: bool) -> str:
    from ..data.converters import RL_FORMATTING, SFT_FORMATTING

    if ranking:
        return "is a ranking (preference) dataset"
    if stage in RL_STAGES:
        return (
            f"has `formatting: {formatting}`; stage `{stage}` needs `formatting: {RL_FORMATTING}` "
            "(prompts with a ground truth: prompt, reward_model.ground_truth, data_source, ability)"
        )
    return (
        f"has `formatting: {formatting}`: prompts with a ground truth and no trajectory; agentic SFT trains on "
        f"tool trajectories (`formatting: {SFT_FORMATTING}`, or sharegpt)"
    )


def check_datasets(stage: str, dataset_dir: str, names: Iterable[str]) -> tuple[list[Finding], list[Any]]:
    r"""Findings for datasets missing from `dataset_info.json` or whose formatting does not fit `stage`.

    Returns:
        `(findings, [(name, DatasetAttr)] of the datasets that fit)`.
    """
    from llamafactory.data.parser import get_dataset_list

    findings, fitting = [], []
    infos = _dataset_infos(dataset_dir)
    for name in names:
        try:
            attr = get_dataset_list([name], dataset_dir)[0]
        except Exception as err:  # LLaMA-Factory's own message (undefined dataset, missing dataset_info.json)
            findings.append(Finding("error", f"dataset `{name}`", str(err), "choose a dataset of the Data dir"))
            continue

        if dataset_fit(stage, infos.get(name, {"formatting": attr.formatting})) == 2:
            better = [n for n, info in infos.items() if dataset_fit(stage, info) == 0][:3]
            fix = "choose " + ", ".join(f"`{n}`" for n in better) if better else "choose a dataset that fits"
            findings.append(
                Finding("error", f"dataset `{name}`", _fit_problem(stage, attr.formatting, attr.ranking), fix)
            )
            continue
        fitting.append((name, attr))
    return findings, fitting


def _dataset_infos(dataset_dir: str) -> dict[str, dict[str, Any]]:
    import json

    from llamafactory.extras.constants import DATA_CONFIG

    try:
        with open(os.path.join(dataset_dir, DATA_CONFIG), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


_ROW_CACHE: dict[tuple, list[tuple[int, str]]] = {}
_ROW_LOCK = threading.Lock()


def _file_versions(dataset_dir: str, attr: Any) -> tuple | None:
    path = os.path.join(dataset_dir, attr.dataset_name)
    if os.path.isfile(path):
        files = [path]
    elif os.path.isdir(path):
        files = sorted(os.path.join(path, name) for name in os.listdir(path))
    else:
        return None
    return tuple((f, os.stat(f).st_mtime_ns, os.stat(f).st_size) for f in files)


def _load_raw_rows(dataset_dir: str, attr: Any, max_samples: int | None) -> Any:
    r"""Raw rows of a local dataset through LLaMA-Factory's loader (sampling and `max_samples` as in the run)."""
    from llamafactory.data.loader import _load_single_dataset

    from ..data.converters import RAW_FORMATTING

    raw_attr = copy.copy(attr)
    raw_attr.formatting = RAW_FORMATTING
    model_args = types.SimpleNamespace(cache_dir=None, hf_hub_token=None)
    data_args = types.SimpleNamespace(
        dataset_dir=dataset_dir,
        media_dir=dataset_dir,
        streaming=False,
        preprocessing_num_workers=None,
        max_samples=max_samples,
        overwrite_cache=False,
    )
    training_args = types.SimpleNamespace(local_process_index=0, dataloader_num_workers=0)
    return _load_single_dataset(raw_attr, model_args, data_args, training_args)


def _bad_rows(stage: str, dataset_dir: str, attr: Any, max_samples: int | None, sft_options: tuple) -> list:
    r"""`[(row, problem)]` of one local dataset, cached per file version."""
    versions = _file_versions(dataset_dir, attr)
    key = (stage in RL_STAGES, dataset_dir, repr(attr), versions, max_samples, sft_options)
    with _ROW_LOCK:
        if versions is not None and key in _ROW_CACHE:
            return _ROW_CACHE[key]

        raw = _load_raw_rows(dataset_dir, attr, max_samples)
        if stage in RL_STAGES:
            from ..data.converters import rl_prompt_column
            from ..data.rl_loader import validate_rl_rows

            stats = validate_rl_rows(raw, attr.dataset_name, prompt_column=rl_prompt_column(attr))
            bad = [(row, str(err)) for row, err in stats.bad_rows]
        else:
            from ..data.converters import rebuild_sft_messages
            from ..data.tags import TrajectoryFormatError

            bad = []
            for row, example in enumerate(raw):
                try:
                    rebuild_sft_messages(example.get(attr.messages) or [], attr, mask_results=sft_options[0])
                except TrajectoryFormatError as err:
                    bad.append((row, f"tag {err.tag}: {err.problem}" if err.tag else err.problem))
        _ROW_CACHE[key] = bad
        return bad


def check_rows(
    stage: str, dataset_dir: str, fitting: list[Any], args: dict[str, Any], skip_bad_rows: bool
) -> list[Finding]:
    r"""Malformed rows of the local datasets, named as the training process would name them, with the fix.

    RL stages: every `arpo_rl` row through `data.rl_loader.validate_rl_rows` (the first ARPO start on a row with an
    empty ground truth fails otherwise). Agentic SFT: every `arpo_sft` trajectory through
    `data.converters.rebuild_sft_messages` (tag balance, results after tool calls).
    """
    from ..data.converters import SFT_FORMATTING
    from ..data.rl_loader import format_bad_row, source_label

    findings = []
    max_samples = args.get("max_samples")
    mask_results = args.get("agentic_sft_mask_results", True)
    for name, attr in fitting:
        if attr.load_from != "file":
            findings.append(Finding("info", f"dataset `{name}`", f"comes from {attr.load_from}; its rows are checked "
                                    "when the run loads them"))  # fmt: skip
            continue
        if stage in SFT_STAGES and (
            attr.formatting != SFT_FORMATTING or args.get("agentic_tool_protocol", "inline_tags") == "template"
        ):
            continue
        try:
            bad = _bad_rows(stage, dataset_dir, attr, max_samples, (mask_results,))
        except Exception as err:  # missing file, unreadable file: LLaMA-Factory's loader message
            findings.append(Finding("error", f"dataset `{name}`", f"cannot be read: {err}", "fix dataset_info.json"))
            continue
        if not bad:
            continue

        label = source_label(attr)[0]
        rows = ", ".join(str(row) for row, _ in bad[:MAX_LISTED_ROWS]) + (
            ", ..." if len(bad) > MAX_LISTED_ROWS else ""
        )
        if skip_bad_rows:
            findings.append(
                Finding("warning", f"dataset `{name}`", f"{len(bad)} malformed rows ({rows}) will be skipped")
            )
            continue
        row, problem = bad[0]
        if stage in RL_STAGES:
            first = format_bad_row(label, row, problem, sampled=attr.num_samples is not None)
            first = first.rsplit("; fix the row", 1)[0]
        else:
            first = f"{label} row {row}: {problem}"
        findings.append(
            Finding(
                "error",
                f"dataset `{name}`",
                f"{len(bad)} malformed row(s) ({rows}); first: {first}",
                "fix the rows in the file, or tick *Skip bad rows* (agentic_skip_bad_rows) to drop them",
            )
        )
    return findings


# ---------------------------------------------------------------------------------------------- output, tools, reward
def _same_path(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def check_output_dir(stage: str, args: dict[str, Any], suggestion: str | None = None) -> list[Finding]:
    r"""The output directory must not be the model (or adapter) the run starts from, nor hold another stage's run.

    LLaMA-Factory resumes from the last checkpoint it finds in the output directory, so an ARPO run whose output
    directory is the SFT folder would resume SFT's trainer state; an output directory equal to the model path would
    overwrite the starting model.
    """
    import yaml
    from llamafactory.extras.constants import TRAINING_ARGS

    output_dir = args.get("output_dir")
    fix = f"choose a new output directory, e.g. `{suggestion}`" if suggestion else "choose a new output directory"
    starts = [args.get("model_name_or_path")] + str(args.get("adapter_name_or_path") or "").split(",")
    if any(_same_path(output_dir, start) for start in starts):
        return [
            Finding(
                "error",
                "output directory",
                f"`{output_dir}` is the model the run starts from; training would overwrite it",
                fix,
            )
        ]

    previous = os.path.join(str(output_dir), TRAINING_ARGS)
    if output_dir and os.path.isfile(previous):
        try:
            with open(previous, encoding="utf-8") as f:
                previous_stage = (yaml.safe_load(f) or {}).get("stage")
        except (OSError, yaml.YAMLError):
            previous_stage = None
        if previous_stage and previous_stage != stage:
            return [
                Finding(
                    "error",
                    "output directory",
                    f"`{output_dir}` holds a `{previous_stage}` run; a `{stage}` run there would resume its "
                    "checkpoints",
                    fix + f" (start from it with Checkpoint path `{os.path.basename(str(output_dir))}`)",
                )
            ]
    return []


def check_tools(args: dict[str, Any]) -> list[Finding]:
    r"""The tool config loads and names known tools; the local search backend has a corpus."""
    from ..tools.index import BM25Index
    from ..tools.registry import load_tool_config, resolve_tool_class

    config_path = args.get("agentic_tool_config")
    if config_path:
        try:
            config = load_tool_config(os.path.expanduser(str(config_path)))
            for spec in config.tools:
                resolve_tool_class(spec.name)
        except (OSError, ValueError, KeyError, TypeError, ImportError) as err:
            return [
                Finding(
                    "error",
                    f"tool config `{config_path}`",
                    f"does not load: {err}",
                    "fix the file (see recipes/tools/ for examples) or clear Tool config file",
                )
            ]
        return []

    if args.get("agentic_search_backend", "local") != "local":
        return []
    location = args.get("agentic_search_index") or os.environ.get("AGENTIC_SEARCH_INDEX")
    location = location or os.path.join(os.path.expanduser("~"), ".cache", "llamafactory_agentic", "search_index")
    corpus = BM25Index(os.path.expanduser(str(location))).corpus_path
    if not os.path.isfile(corpus):
        return [
            Finding(
                "warning",
                "local search index",
                f"no corpus at `{corpus}`: every search call will return an error observation",
                "build it with `llamafactory-agentic index build --cache-json data/arpo/search_cache.json --output "
                f"{location}` or set Local search index",
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------- all
def run_checks(
    stage: str,
    args: dict[str, Any],
    world_size: int = 1,
    suggested_output_dir: str | None = None,
    overridden: Iterable[str] = (),
) -> list[Finding]:
    r"""Every check for a plugin stage, errors first.

    Args:
        stage: Stage name (`agentic_sft`, `arpo`, `aepo`).
        args: The `llamafactory-cli train` arguments LLaMA-Board built (panel and Extra arguments included).
        world_size: Processes the run will use (LLaMA-Board's device count).
        suggested_output_dir: Output directory to propose when the current one is refused.
        overridden: Panel keys that Extra arguments also sets (Extra arguments wins).

    Returns:
        The findings, ordered error, warning, info.
    """
    findings = check_unknown_keys(args)
    findings += check_values(stage, args, world_size)
    for key in overridden:
        findings.append(
            Finding("info", f"`{key}`", "is set in the panel and in Extra arguments; Extra arguments wins")
        )

    dataset_dir = args.get("dataset_dir") or "data"
    names = [
        name.strip()
        for key in ("dataset", "eval_dataset")  # an eval_dataset typed in Extra arguments is read the same way
        for name in str(args.get(key) or "").split(",")
        if name.strip()
    ]
    names = list(dict.fromkeys(names))
    dataset_findings, fitting = check_datasets(stage, dataset_dir, names)
    findings += dataset_findings
    findings += check_rows(stage, dataset_dir, fitting, args, bool(args.get("agentic_skip_bad_rows", False)))
    findings += check_output_dir(stage, args, suggested_output_dir)
    if stage in RL_STAGES:
        findings += check_tools(args)
    return sorted(findings, key=lambda finding: LEVELS.index(finding.level))


def format_findings(findings: list[Finding], lang: str | None = "en", checked_at: str | None = None) -> str:
    r"""Markdown of the findings for the checks box (title and time, one line per finding with its fix)."""
    from .locales import message

    icons = {"error": "✖", "warning": "⚠", "info": "ℹ"}  # in every common font (no emoji font needed)
    when = f" · {checked_at}" if checked_at else ""
    lines = [f"**{message('checks_title', lang)}**{when}", ""]
    if not any(f.level in ("error", "warning") for f in findings):
        lines.append(f"✔ {message('checks_ok', lang)}")
        lines.append("")
    for f in findings:
        fix = f" — *{message('fix', lang)}:* {f.fix}" if f.fix else ""
        lines.append(f"- {icons[f.level]} **{message(f.level, lang)}** {f.subject} {f.message}{fix}")
    return "\n".join(lines)
