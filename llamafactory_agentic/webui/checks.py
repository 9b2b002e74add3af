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
import re
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from ..hparams import AgenticArguments, agentic_default
from .fields import RL_STAGES, SFT_STAGES
from .locales import Text
from .rollouts import plural


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
    texts: dict[str, Text] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def show(self, part: Literal["subject", "message", "fix"], lang: str | None) -> str:
        r"""`subject`, `message` or `fix` in LLaMA-Board's language `lang` (the English text when it has no other)."""
        text = self.texts.get(part)
        return text.show(lang) if text is not None else getattr(self, part)


def said(
    level: Literal["error", "warning", "info"], subject: "str | Text", message: "str | Text", fix: "str | Text" = ""
) -> Finding:
    r"""A `Finding` whose parts may be `locales.Text` (shown in the page's language; English in the attributes)."""
    parts = {"subject": subject, "message": message, "fix": fix}
    texts = {part: value for part, value in parts.items() if isinstance(value, Text)}
    return Finding(level, str(subject), str(message), str(fix), texts)


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
        fix = Text("unknown_key_close", close=close[0]) if close else Text("unknown_key_remove")
        findings.append(said("error", f"`{key}`", Text("unknown_key"), fix))
    return findings


MAX_VALUE_ERRORS = 20  # value errors listed at once (each found by validating again with the previous reset)
_KEY_IN_MESSAGE = re.compile(r"`?\b((?:arpo|aepo|rl|agentic)_[a-z0-9_]+)\b`?")


def argument_errors(stage: str, args: dict[str, Any]) -> tuple[list[str], Any]:
    r"""Every value error of the plugin's keys, not only the first: `(messages, namespace)`.

    The parser's validator (`validation.validate_arguments`) stops at the first bad key. Here the key its message
    names is set back to its declared default and the validation runs again, until it passes (at most
    `MAX_VALUE_ERRORS` times), so `arpo_rollout_n: 0` no longer hides the next bad key. The namespace returned has
    those keys at their defaults (use it only when `messages` is empty).
    """
    from ..train.presets import agentic_namespace
    from ..validation import validate_arguments

    namespace = agentic_namespace(stage, args)
    defaults = {f.name: f.default for f in dataclasses.fields(AgenticArguments)}
    messages: list[str] = []
    while len(messages) < MAX_VALUE_ERRORS:
        try:
            validate_arguments(namespace, rl=stage in RL_STAGES)  # the parser's validator: same checks, messages
            return messages, namespace
        except ValueError as err:
            messages.append(str(err))
            named = [key for key in _KEY_IN_MESSAGE.findall(str(err)) if key in defaults and key != "agentic_stage"]
            reset = [key for key in named if getattr(namespace, key) != defaults[key]]
            if not reset:  # the message names no key that can be reset: nothing more can be found
                return messages, namespace
            setattr(namespace, reset[0], defaults[reset[0]])
    return messages, namespace


# the fix of each sampling key's error (`validation.check_rl_sampling` checks them in this order; texts in locales)
SAMPLING_FIXES = {key: f"sampling_fix_{key}" for key in ("temperature", "top_p", "top_k")}


def sampling_errors(sampling: dict[str, Any]) -> list[Finding]:
    r"""Each bad sampling key of an RL stage as its own finding with its own fix (`validation.check_rl_sampling`)."""
    from ..validation import check_rl_sampling

    sane = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
    findings = []
    for key, fix in SAMPLING_FIXES.items():
        alone = dict(sane)  # one key at a time: every bad key is reported, each with the fix that fits it
        alone.update({k: sampling[k] for k in (("do_sample", "temperature") if key == "temperature" else (key,))})
        try:
            check_rl_sampling(types.SimpleNamespace(**alone))
        except ValueError as err:
            findings.append(said("error", Text("subject_sampling"), str(err), Text(fix)))
    return findings


def check_values(stage: str, args: dict[str, Any], world_size: int = 1) -> list[Finding]:
    r"""The plugin's own argument validation, the batch geometry and the sampling of an RL stage, run now.

    Every value error is listed (`argument_errors`, `sampling_errors`), not only the first one.
    """
    from ..train.presets import resolve_presets

    findings = []
    messages, namespace = argument_errors(stage, args)
    for text in messages:
        findings.append(said("error", Text("subject_arguments"), text, Text("value_error_fix")))
    if not messages and stage in RL_STAGES:
        for warning in resolve_presets(namespace, verbose=False)["warnings"]:  # keys set with no effect
            findings.append(said("warning", Text("subject_arguments"), warning))

    if stage not in RL_STAGES:
        return findings
    if not messages:
        findings += check_preset_overrides(stage, args)

    from llamafactory.hparams import GeneratingArguments

    from ..train.arpo.config import derive_steps_per_generation

    if not messages:  # the batch geometry of values that passed
        try:
            steps = derive_steps_per_generation(
                namespace.arpo_rollout_batch_size,
                namespace.arpo_rollout_n,
                int(args.get("per_device_train_batch_size", 1)),
                int(args.get("gradient_accumulation_steps", 1)),
                max(int(world_size), 1),
            )
        except ValueError as err:
            findings.append(said("error", Text("subject_batch"), str(err), Text("batch_error_fix")))
        else:
            updates = steps // int(args.get("gradient_accumulation_steps", 1))
            findings.append(
                said(
                    "info",
                    Text("subject_batch"),
                    Text(
                        "batch_info",
                        prompts=namespace.arpo_rollout_batch_size,
                        group=namespace.arpo_rollout_n,
                        updates=plural(updates, "optimiser update"),
                        count=updates,
                    ),
                )
            )

    defaults = {f.name: f.default for f in dataclasses.fields(GeneratingArguments)}
    sampling = {key: args.get(key, defaults[key]) for key in ("do_sample", "temperature", "top_p", "top_k")}
    bad_sampling = sampling_errors(sampling)
    findings += bad_sampling
    if not bad_sampling and any(sampling[key] != value for key, value in RECIPE_SAMPLING.items()):
        shown = ", ".join(f"{key} {sampling[key]}" for key in RECIPE_SAMPLING)
        findings.append(said("info", Text("subject_sampling"), Text("sampling_info", shown=shown)))

    if not namespace.arpo_rollout_log_ratio:
        findings.append(said("info", "`arpo_rollout_log_ratio`", Text("log_ratio_zero"), Text("log_ratio_fix")))
    return findings


def check_preset_overrides(stage: str, args: dict[str, Any]) -> list[Finding]:
    r"""A note per set key whose value replaces a different value of the stage's preset.

    A value typed for `arpo` stays when the stage becomes `aepo`, and then wins over AEPO's preset; this says so.
    """
    from .fields import stage_preset

    preset = stage_preset(stage, args.get("aepo_variant"))
    findings = []
    for key, value in args.items():
        if key in preset and not callable(preset[key]) and preset[key] != value:
            findings.append(
                said(
                    "info",
                    f"`{key}`",
                    Text("preset_override", value=value, stage=stage, preset=preset[key]),
                    Text("preset_override_fix"),
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


def _fit_problem(stage: str, formatting: str, ranking: bool) -> Text:
    from ..data.converters import RL_FORMATTING, SFT_FORMATTING

    if ranking:
        return Text("dataset_ranking")
    if stage in RL_STAGES:
        return Text("dataset_not_rl", formatting=formatting, stage=stage, needed=RL_FORMATTING)
    return Text("dataset_not_sft", formatting=formatting, needed=SFT_FORMATTING)


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
            findings.append(said("error", Text("subject_dataset", name=name), str(err), Text("dataset_fix_choose")))
            continue

        if dataset_fit(stage, infos.get(name, {"formatting": attr.formatting})) == 2:
            better = [n for n, info in infos.items() if dataset_fit(stage, info) == 0][:3]
            names_text = ", ".join(f"`{n}`" for n in better)
            fix = Text("dataset_fix_fitting", names=names_text) if better else Text("dataset_fix_any")
            problem = _fit_problem(stage, attr.formatting, attr.ranking)
            findings.append(said("error", Text("subject_dataset", name=name), problem, fix))
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


_ROW_CACHE: dict[tuple, "RowReport"] = {}
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


@dataclass
class RowReport:
    r"""Row validation of one local dataset.

    Attributes:
        total: Rows read (after `max_samples`).
        bad: `[(0-based row, problem)]` of the malformed rows.
        looks_like: The format the rows look like (`describe_rows`), e.g. `arpo_sft`.
        columns: Column names of the file.
    """

    total: int
    bad: list[tuple[int, str]]
    looks_like: str
    columns: list[str]


def describe_rows(columns: Iterable[str], first: dict[str, Any] | None) -> str:
    r"""The dataset format that rows with these columns look like (for a wrong `formatting` in dataset_info.json).

    Args:
        columns: Column names of the file.
        first: The first row (None for an empty file).

    Returns:
        `arpo_rl` (verl layout: a chat `prompt` and a `reward_model` with the ground truth), `arpo_sft` (a
        conversation with ARPO's tool tags), `sharegpt` (a conversation without them), `alpaca`
        (instruction/output) or `unknown`.
    """
    columns = set(columns)
    first = first or {}
    if "reward_model" in columns or {"prompt", "data_source"} <= columns:
        return "arpo_rl"
    for key in ("conversations", "messages"):
        if key in columns:
            text = str(first.get(key, ""))
            return (
                "arpo_sft"
                if any(tag in text for tag in ("<search>", "<python>", "<result>", "<think>"))
                else ("sharegpt")
            )
    if {"instruction", "output"} <= columns:
        return "alpaca"
    return "unknown"


def _bad_rows(stage: str, dataset_dir: str, attr: Any, max_samples: int | None, sft_options: tuple) -> RowReport:
    r"""The `RowReport` of one local dataset, cached per file version."""
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
                except (TypeError, KeyError, AttributeError) as err:  # not a list of messages at all
                    bad.append((row, f"column `{attr.messages}` is not a conversation ({type(err).__name__})"))
        columns = list(raw.column_names or [])
        report = RowReport(len(raw), bad, describe_rows(columns, raw[0] if len(raw) else None), columns)
        _ROW_CACHE[key] = report
        return report


def check_rows(
    stage: str, dataset_dir: str, fitting: list[Any], args: dict[str, Any], skip_bad_rows: bool
) -> list[Finding]:
    r"""Malformed rows of the local datasets, named as the training process would name them, with the fix.

    RL stages: every `arpo_rl` row through `data.rl_loader.validate_rl_rows` (the first ARPO start on a row with an
    empty ground truth fails otherwise). Agentic SFT: every `arpo_sft` trajectory through
    `data.converters.rebuild_sft_messages` (tag balance, results after tool calls).
    """
    from ..data.converters import RL_FORMATTING, SFT_FORMATTING
    from ..data.rl_loader import format_bad_row, source_label

    findings = []
    max_samples = args.get("max_samples")
    mask_results = args.get("agentic_sft_mask_results", agentic_default("agentic_sft_mask_results"))
    for name, attr in fitting:
        if attr.load_from != "file":
            findings.append(
                said("info", Text("subject_dataset", name=name), Text("dataset_remote", source=attr.load_from))
            )
            continue
        if stage in SFT_STAGES and (
            attr.formatting != SFT_FORMATTING
            or args.get("agentic_tool_protocol", agentic_default("agentic_tool_protocol")) == "template"
        ):
            continue
        try:
            report = _bad_rows(stage, dataset_dir, attr, max_samples, (mask_results,))
        except Exception as err:  # missing file, unreadable file: LLaMA-Factory's loader message
            findings.append(
                said(
                    "error",
                    Text("subject_dataset", name=name),
                    Text("dataset_unreadable", error=str(err)),
                    Text("dataset_unreadable_fix"),
                )
            )
            continue
        bad = report.bad
        other_format = report.looks_like in (RL_FORMATTING, SFT_FORMATTING) and report.looks_like != attr.formatting
        if other_format or (bad and len(bad) == report.total):
            # nothing would be left, skipped or not (or the rows are the other stage's): the format is wrong
            findings.append(_wrong_format(name, attr, report))
            continue
        if not bad:
            continue

        label = source_label(attr)[0]
        rows = ", ".join(str(row) for row, _ in bad[:MAX_LISTED_ROWS]) + (
            ", ..." if len(bad) > MAX_LISTED_ROWS else ""
        )
        if skip_bad_rows:
            malformed = plural(len(bad), "malformed row")
            skipped = Text("rows_skipped", malformed=malformed, count=len(bad), rows=rows)
            findings.append(said("warning", Text("subject_dataset", name=name), skipped))
            continue
        row, problem = bad[0]
        if stage in RL_STAGES:
            first = format_bad_row(label, row, problem, sampled=attr.num_samples is not None)
            first = first.rsplit("; fix the row", 1)[0]
        else:
            first = f"{label} row {row}: {problem}"
        findings.append(
            said(
                "error",
                Text("subject_dataset", name=name),
                Text("rows_bad", malformed=plural(len(bad), "malformed row"), count=len(bad), rows=rows, first=first),
                Text("rows_bad_fix"),
            )
        )
    return findings


def _wrong_format(name: str, attr: Any, report: RowReport) -> Finding:
    r"""The error for a dataset whose rows are not of its registered `formatting` (all bad, or another plugin format)."""
    shown = ", ".join(report.columns[:8]) + (", ..." if len(report.columns) > 8 else "")
    unknown = report.looks_like == "unknown"
    looks = Text("format_looks_unknown") if unknown else Text("format_looks", looks=report.looks_like)
    if report.looks_like not in ("unknown", attr.formatting):
        fix = Text("format_fix_register", looks=report.looks_like, formatting=attr.formatting)
    else:
        fix = Text("format_fix_file")
    if len(report.bad) == report.total:
        first_row, problem = report.bad[0]
        found = Text("format_none_valid", total=report.total, formatting=attr.formatting)
        detail: str | Text = Text("format_none_detail", row=first_row, problem=problem)
    else:
        found, detail = Text("format_other", total=report.total, formatting=attr.formatting), ""
    problem_text = Text(
        "format_wrong", formatting=attr.formatting, found=found, looks=looks, columns=shown, detail=detail
    )
    return said("error", Text("subject_dataset", name=name), problem_text, fix)


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
    from llamafactory.extras.constants import CHECKPOINT_NAMES, TRAINING_ARGS

    from ..train.checkpoints import last_complete_checkpoint

    output_dir = args.get("output_dir")
    fix = Text("output_fix_suggest", suggestion=suggestion) if suggestion else Text("output_fix")
    subject = Text("subject_output_dir")
    starts = [args.get("model_name_or_path")] + str(args.get("adapter_name_or_path") or "").split(",")
    if any(_same_path(output_dir, start) for start in starts):
        return [said("error", subject, Text("output_is_model", path=output_dir), fix)]

    previous = os.path.join(str(output_dir), TRAINING_ARGS)
    if output_dir and os.path.isfile(previous):
        try:
            with open(previous, encoding="utf-8") as f:
                previous_stage = (yaml.safe_load(f) or {}).get("stage")
        except (OSError, yaml.YAMLError):
            previous_stage = None
        if previous_stage and previous_stage != stage:
            return [
                said(
                    "error",
                    subject,
                    Text("output_other_stage", path=output_dir, previous=previous_stage, stage=stage),
                    Text("output_other_stage_fix", base=fix, name=os.path.basename(str(output_dir))),
                )
            ]
    finished = finished_run(str(output_dir)) if output_dir else None
    last = last_complete_checkpoint(str(output_dir)) if output_dir and os.path.isdir(str(output_dir)) else None
    if last is None and output_dir and any(os.path.isfile(os.path.join(output_dir, n)) for n in CHECKPOINT_NAMES):
        # LLaMA-Factory's parser: a folder with a saved model and no checkpoint to resume is refused
        # ("Please set `overwrite_output_dir`"), e.g. after an Abort that stopped before the first save_steps
        saved: str | Text = Text("output_saved_step", step=finished[0]) if finished else ""
        return [
            said(
                "error",
                subject,
                Text("output_saved_model", path=output_dir, saved=saved),
                Text("output_saved_model_fix", base=fix, name=os.path.basename(str(output_dir))),
            )
        ]
    if finished is not None and last is not None and finished[1] and finished[0] < finished[1]:
        step, max_steps = finished
        return [
            said(
                "info",
                subject,
                Text(
                    "output_aborted",
                    path=output_dir,
                    step=step,
                    max_steps=max_steps,
                    checkpoint=os.path.basename(last),
                ),
                Text("output_aborted_fix", base=fix),
            )
        ]
    if finished is not None:
        step, max_steps = finished
        steps = (
            Text("output_steps_of", step=step, max_steps=max_steps) if max_steps else Text("output_steps", step=step)
        )
        return [
            said(
                "warning",
                subject,
                Text("output_finished", path=output_dir, steps=steps),
                Text("output_finished_fix", base=fix),
            )
        ]
    return []


def finished_run(output_dir: str) -> tuple[int, int | None] | None:
    r"""`(global step, max steps)` of a run that finished in `output_dir`, None when there is none.

    A run finished when the training process wrote its end-of-training files: `train_results.json`
    (`Trainer.save_metrics("train", ...)`) and `trainer_state.json` (`Trainer.save_state()`) in the output directory
    itself (checkpoints keep theirs in `checkpoint-<step>/`). `max_steps` is None when the state does not say.
    """
    import json

    from transformers.trainer import TRAINER_STATE_NAME

    state_path = os.path.join(output_dir, TRAINER_STATE_NAME)
    if not (os.path.isfile(os.path.join(output_dir, "train_results.json")) and os.path.isfile(state_path)):
        return None
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    return int(state.get("global_step") or 0), (int(state["max_steps"]) if state.get("max_steps") else None)


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
                said(
                    "error",
                    Text("subject_tool_config", path=config_path),
                    Text("tool_config_error", error=str(err)),
                    Text("tool_config_fix"),
                )
            ]
        return []

    if args.get("agentic_search_backend", agentic_default("agentic_search_backend")) != "local":
        return []
    location = args.get("agentic_search_index") or os.environ.get("AGENTIC_SEARCH_INDEX")
    location = location or os.path.join(os.path.expanduser("~"), ".cache", "llamafactory_agentic", "search_index")
    location = os.path.expanduser(str(location))
    corpus = BM25Index(location).corpus_path
    if not os.path.isfile(corpus):
        folder = location if corpus.name != os.path.basename(location) else os.path.dirname(location) or "."
        return [
            said(
                "error",
                Text("subject_search_index"),
                Text("search_no_corpus", corpus=corpus),
                Text("search_no_corpus_fix", corpus=corpus, folder=folder),
            )
        ]
    return []


def check_precision(args: dict[str, Any]) -> list[Finding]:
    r"""bf16 needs a device with bf16 support: transformers' `TrainingArguments` refuses it otherwise.

    The training process would stop with "Your setup doesn't support bf16/gpu" after it started (LLaMA-Board's
    Compute type `bf16` is its default, also on a CPU-only machine).
    """
    if not (args.get("bf16") or args.get("pure_bf16")) or args.get("use_cpu"):
        return []
    from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

    if is_torch_bf16_gpu_available() or is_torch_xla_available():
        return []
    key = "pure_bf16" if args.get("pure_bf16") else "bf16"
    return [said("error", f"`{key}`", Text("bf16_missing"), Text("bf16_fix"))]


def check_cold_start(args: dict[str, Any]) -> list[Finding]:
    r"""RL from a policy with no sign of a cold start on the tags usually has no learning signal (a warning)."""
    from ..guards.cold_start import COLD_START_MARKER, cold_start_warning

    text = cold_start_warning(args.get("model_name_or_path"), args.get("adapter_name_or_path"))
    if text is None:
        return []
    problem, _, fix = text.partition(" Fix: ")
    subject, _, problem = problem.partition(" shows ")
    finding = Finding("warning", f"`{subject}`", "shows " + problem, fix)  # the guard's English text, as in the log
    finding.texts = {"message": Text("cold_start", marker=COLD_START_MARKER), "fix": Text("cold_start_fix")}
    return [finding]


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
        findings.append(said("info", f"`{key}`", Text("extra_wins")))

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
    findings += check_rows(
        stage,
        dataset_dir,
        fitting,
        args,
        bool(args.get("agentic_skip_bad_rows", agentic_default("agentic_skip_bad_rows"))),
    )
    findings += check_output_dir(stage, args, suggested_output_dir)
    findings += check_precision(args)
    if stage in RL_STAGES:
        findings += check_tools(args)
        findings += check_cold_start(args)
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
        fix = f" — *{message('fix', lang)}:* {f.show('fix', lang)}" if f.fix else ""
        subject, text = f.show("subject", lang), f.show("message", lang)
        lines.append(f"- {icons[f.level]} **{message(f.level, lang)}** {subject} {text}{fix}")
    return "\n".join(lines)
