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

r"""Loading RL prompt datasets for the `arpo`/`aepo` stages through LLaMA-Factory's own dataset machinery.

`load_rl_dataset` resolves `dataset` / `eval_dataset` with LLaMA-Factory's `dataset_info.json` parsing
(`get_dataset_list`) and loader (`_load_single_dataset`: local files, hub, `num_samples`, `max_samples`), validates every
row before conversion (docs/algorithms.md §8.1), repairs `\x08oxed` (§2.8), converts with the `arpo_rl` converter and
splits off `val_size` like LLaMA-Factory. `encode_rl_prompts` renders the prompts with the LLaMA-Factory template.
"""

import copy
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..common.log import get_logger
from ..hparams import agentic_value
from .rl_schema import RLRowError, parse_rl_row
from .tags import count_control_chars


if TYPE_CHECKING:
    from datasets import Dataset
    from llamafactory.data.template import Template
    from llamafactory.hparams import DataArguments, ModelArguments
    from transformers import PreTrainedTokenizer, Seq2SeqTrainingArguments


logger = get_logger(__name__)

LOG_PREFIX = "[agentic-data]"


class RLDataError(ValueError):
    r"""A malformed RL row; the message names the file, the row, the field and the fix."""


@dataclass
class RLDataStats:
    r"""What validation found in one RL dataset.

    Attributes:
        name: Short name of the source (file stem, or hub id).
        rows: Rows read (after LLaMA-Factory's `num_samples` / `max_samples`).
        bad_rows: `(row, error)` for every malformed row.
        boxed_repairs: `\x08oxed` occurrences in the valid rows.
        boxed_rows: Valid rows with at least one.
        control_chars: Other C0 control characters (not `\n`, `\t`) in the valid rows' messages, by character.
        control_rows: Valid rows with at least one of them.
    """

    name: str
    rows: int = 0
    bad_rows: list[tuple[int, RLRowError]] = field(default_factory=list)
    boxed_repairs: int = 0
    boxed_rows: int = 0
    control_chars: Counter = field(default_factory=Counter)
    control_rows: int = 0


def source_label(dataset_attr: Any) -> tuple[str, str]:
    r"""`(label, short name)` of a dataset entry for messages: a file's base name and stem, or the hub id."""
    if dataset_attr.load_from == "file":
        label = os.path.basename(os.path.normpath(dataset_attr.dataset_name))
        return label, os.path.splitext(label)[0]

    label = dataset_attr.dataset_name
    if dataset_attr.split and dataset_attr.split != "train":
        label = f"{label}:{dataset_attr.split}"

    return label, label


def validate_rl_rows(dataset: "Dataset", name: str, prompt_column: str = "prompt") -> RLDataStats:
    r"""Validate every raw row of an RL dataset and count repairs and control characters.

    Args:
        dataset: Raw rows (verl layout, before conversion).
        name: Short name for the statistics.
        prompt_column: Chat-messages column.

    Returns:
        `RLDataStats` (`bad_rows` lists every malformed row with its 0-based index).
    """
    stats = RLDataStats(name=name)
    row_idx = 0
    for batch in dataset.iter(batch_size=1000):
        columns = list(batch.keys())
        for values in zip(*(batch[column] for column in columns)):
            row = dict(zip(columns, values))
            try:
                parsed = parse_rl_row(row, prompt_column=prompt_column, repair=False)
            except RLRowError as err:
                stats.bad_rows.append((row_idx, err))
                row_idx += 1
                continue

            if parsed.boxed_repairs:
                stats.boxed_repairs += parsed.boxed_repairs
                stats.boxed_rows += 1

            controls: Counter = Counter()
            for text in [parsed.system] + [message["content"] for message in parsed.messages]:
                controls.update(count_control_chars(text))

            if controls:
                stats.control_chars.update(controls)
                stats.control_rows += 1

            row_idx += 1

    stats.rows = row_idx
    return stats


def format_bad_row(label: str, row: int, err: RLRowError, sampled: bool = False) -> str:
    r"""`"hard_search_1k.parquet row 17: field reward_model.ground_truth is empty; fix the row or set ..."`."""
    where = f"row {row} of the sampled rows" if sampled else f"row {row}"
    return f"{label} {where}: {err}; fix the row or set agentic_skip_bad_rows: true"


def log_rl_stats(stats: RLDataStats, repair: bool, skipped: int) -> None:
    r"""One line for the `\x08oxed` repair (always) and warnings for skipped rows and other control characters."""
    valid = stats.rows - len(stats.bad_rows)
    if repair:
        logger.info(
            f"{LOG_PREFIX} {stats.name}: repaired {stats.boxed_repairs} '\\x08oxed' -> '\\boxed' in "
            f"{stats.boxed_rows}/{valid} rows"
        )
    elif stats.boxed_repairs:
        logger.warning(
            f"{LOG_PREFIX} {stats.name}: {stats.boxed_repairs} '\\x08oxed' in {stats.boxed_rows}/{valid} rows left "
            "unrepaired (agentic_repair_boxed: false); the prompts show a backspace where \\boxed was meant"
        )

    if skipped:
        logger.warning(
            f"{LOG_PREFIX} {stats.name}: skipped {skipped}/{stats.rows} malformed rows (agentic_skip_bad_rows)"
        )

    if stats.control_chars:
        detail = ", ".join(f"U+{ord(char):04X} x{count}" for char, count in sorted(stats.control_chars.items()))
        logger.warning(
            f"{LOG_PREFIX} {stats.name}: {sum(stats.control_chars.values())} other control characters ({detail}) in "
            f"{stats.control_rows}/{valid} rows, left unchanged"
        )


def empty_local_files(dataset_attr: Any, dataset_dir: str) -> list[str]:
    r"""The local files of `dataset_attr` (a `file_name` in `dataset_dir`: a file or a folder of files) with no data.

    A file is empty when it has no bytes or only white space (an empty JSON-lines file), or is a parquet file whose
    metadata counts 0 rows; hub and cloud datasets are not looked at (`[]`).
    """
    if getattr(dataset_attr, "load_from", None) != "file":
        return []
    path = os.path.join(dataset_dir, str(dataset_attr.dataset_name))
    files = [os.path.join(path, name) for name in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
    empty = []
    for file in files:
        try:
            if file.endswith(".parquet"):  # a parquet file with a schema and no rows
                import pyarrow.parquet as pq

                if pq.ParquetFile(file).metadata.num_rows == 0:
                    empty.append(file)
                continue
            size = os.path.getsize(file)
            if size > 4096:
                continue
            with open(file, "rb") as f:
                if not f.read().strip():
                    empty.append(file)
        except Exception:  # unreadable here: left to the loader's own error
            continue
    return empty


def _load_one_rl_dataset(
    dataset_attr: Any,
    model_args: "ModelArguments",
    data_args: "DataArguments",
    training_args: "Seq2SeqTrainingArguments",
    skip_bad_rows: bool,
    repair: bool,
) -> "Dataset":
    from llamafactory.data.converter import align_dataset
    from llamafactory.data.loader import _load_single_dataset

    from .converters import RAW_FORMATTING, RL_FORMATTING, ROW_NUMBER_COLUMN, rl_prompt_column

    if dataset_attr.formatting != RL_FORMATTING:
        raise RLDataError(
            f"dataset {dataset_attr} has `formatting: {dataset_attr.formatting}`; the RL stages need "
            f"`formatting: {RL_FORMATTING}` (verl layout: prompt, reward_model.ground_truth, data_source, ability)"
        )

    if dataset_attr.ranking:
        raise RLDataError(f"dataset {dataset_attr} is a ranking dataset; the RL stages need prompts (arpo_rl)")

    label, name = source_label(dataset_attr)
    raw_attr = copy.copy(dataset_attr)
    raw_attr.formatting = RAW_FORMATTING
    try:
        raw = _load_single_dataset(raw_attr, model_args, data_args, training_args)
    except Exception as err:  # datasets' DatasetGenerationError (from pyarrow) names no file for an empty one
        empty = empty_local_files(dataset_attr, data_args.dataset_dir)
        if not empty:
            raise
        raise RLDataError(
            f"{label}: {', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty (0 rows): write the `arpo_rl` "
            "rows into it (prompt, reward_model.ground_truth, ...) or remove the dataset from `dataset`"
        ) from err
    if len(raw) == 0:  # a file with a header or schema and no rows
        raise RLDataError(f"{label}: the file has 0 rows: write the `arpo_rl` rows into it or remove the dataset")
    stats = validate_rl_rows(raw, name, prompt_column=rl_prompt_column(dataset_attr))
    if stats.bad_rows and not skip_bad_rows:
        row, err = stats.bad_rows[0]
        message = format_bad_row(label, row, err, sampled=dataset_attr.num_samples is not None)
        if len(stats.bad_rows) > 1:
            others = ", ".join(str(idx) for idx, _ in stats.bad_rows[1:6])
            more = "" if len(stats.bad_rows) <= 6 else ", ..."
            message += f" ({len(stats.bad_rows) - 1} more malformed rows: {others}{more})"

        raise RLDataError(message)

    raw = raw.add_column(ROW_NUMBER_COLUMN, list(range(len(raw))))  # row numbers survive skipping and merging
    if stats.bad_rows:
        bad = {idx for idx, _ in stats.bad_rows}
        raw = raw.select([idx for idx in range(len(raw)) if idx not in bad])

    log_rl_stats(stats, repair=repair, skipped=len(stats.bad_rows))
    if len(raw) == 0:
        raise RLDataError(f"{label}: no valid rows left")

    return align_dataset(raw, dataset_attr, data_args, training_args)


def _load_rl_datasets(
    dataset_names: list[str] | None,
    model_args: "ModelArguments",
    data_args: "DataArguments",
    training_args: "Seq2SeqTrainingArguments",
    skip_bad_rows: bool,
    repair: bool,
    return_dict: bool = False,
) -> "Dataset | dict[str, Dataset] | None":
    from llamafactory.data.data_utils import merge_dataset
    from llamafactory.data.parser import get_dataset_list

    if dataset_names is None:
        return None

    datasets = {}
    for dataset_name, dataset_attr in zip(dataset_names, get_dataset_list(dataset_names, data_args.dataset_dir)):
        datasets[dataset_name] = _load_one_rl_dataset(
            dataset_attr, model_args, data_args, training_args, skip_bad_rows, repair
        )

    if return_dict:
        return datasets

    return merge_dataset(list(datasets.values()), data_args, seed=training_args.seed)


def load_rl_dataset(
    model_args: "ModelArguments",
    data_args: "DataArguments",
    training_args: "Seq2SeqTrainingArguments",
    finetuning_args: Any,
) -> dict[str, Any]:
    r"""Load the RL prompt datasets named by `data_args.dataset` and `data_args.eval_dataset`.

    Entries come from `dataset_info.json` in `data_args.dataset_dir` (LLaMA-Factory's parser) and must use
    `formatting: arpo_rl`. Each one is read with LLaMA-Factory's `_load_single_dataset` (hub or local files;
    `num_samples` and `max_samples` apply), validated row by row, repaired, converted, merged with `mix_strategy`;
    `val_size` splits a validation set off the training data as in LLaMA-Factory.

    Args:
        model_args: LLaMA-Factory's model arguments (cache dir, hub token).
        data_args: LLaMA-Factory's data arguments (`dataset`, `eval_dataset`, `dataset_dir`, `max_samples`,
            `val_size`, `mix_strategy`, `eval_on_each_dataset`, `preprocessing_num_workers`). `streaming` must be off.
        training_args: Training arguments (`seed`, process order).
        finetuning_args: Reads `agentic_skip_bad_rows` (default False) and `agentic_repair_boxed` (default True).

    Returns:
        `{"train_dataset": Dataset | None, "eval_dataset": Dataset | dict[str, Dataset] | None}`; rows have the columns
        `_prompt` (list of `{role, content}`, user/assistant, ending with the user question), `_response` ([]),
        `_system` (str), `_tools` (""), `_images`/`_videos`/`_audios` (None), `_ground_truth` (str), `_data_source`
        (str), `_ability` (str, "" when null), `_extra` (JSON text of the other columns), `_source` (file name or
        hub id) and `_row` (0-based row number in that source, as in the bad-row messages).

    Raises:
        RLDataError: for a malformed row without `agentic_skip_bad_rows` (names file, row, field and the fix), a
            dataset whose formatting is not `arpo_rl`, or one left without valid rows.
        ValueError: with `streaming: true` (the RL stages index prompts by position).
    """
    from datasets import DatasetDict
    from llamafactory.data.data_utils import get_dataset_module, split_dataset

    from .converters import register_converters
    from .inline_template import register_default_inline_templates

    if data_args.streaming:
        raise ValueError("The RL stages do not support `streaming: true`; turn it off (the prompts are small).")

    register_converters()
    register_default_inline_templates()
    skip_bad_rows = bool(agentic_value(finetuning_args, "agentic_skip_bad_rows"))
    repair = bool(agentic_value(finetuning_args, "agentic_repair_boxed"))
    data_args.agentic_repair_boxed = repair  # read by the arpo_rl converter
    with training_args.main_process_first(desc="load dataset", local=(not data_args.data_shared_file_system)):
        train = _load_rl_datasets(data_args.dataset, model_args, data_args, training_args, skip_bad_rows, repair)
        evaluation = _load_rl_datasets(
            data_args.eval_dataset,
            model_args,
            data_args,
            training_args,
            skip_bad_rows,
            repair,
            return_dict=data_args.eval_on_each_dataset,
        )

    train_dict, eval_dict = split_dataset(train, evaluation, data_args, seed=training_args.seed)
    module = get_dataset_module(DatasetDict({**train_dict, **eval_dict}))
    return {"train_dataset": module.get("train_dataset"), "eval_dataset": module.get("eval_dataset")}


OVERLONG_MODES = ("skip", "error")
_NAMED_OVERLONG = 5  # over-long rows named in the warning


def _row_name(source: str | None, row: int | None, position: int) -> str:
    if source and row is not None and row >= 0:
        return f"{source} row {row}"

    return f"row {position}"


def encode_rl_prompts(
    dataset: "Dataset",
    template: "Template",
    tokenizer: "PreTrainedTokenizer",
    max_prompt_length: int,
    overlong: str = "skip",
) -> "Dataset":
    r"""Add `prompt_ids`: each prompt rendered with the LLaMA-Factory template, ending with the assistant header.

    The system prompt is the row's `_system` (message 0 of the data's `prompt`; the template's default system when
    empty). The rendering is `template.encode_oneturn(messages + [empty assistant])`'s prompt part, i.e. exactly the
    ids LLaMA-Factory's SFT processing puts before the first response token (docs/algorithms.md §2.7).

    A prompt is never cut (cutting from the left would drop the system prompt and the tool instructions). A prompt
    longer than `max_prompt_length` tokens is, with `overlong="skip"` (`arpo_overlong_prompt`, default), dropped
    with a warning that counts such rows and names the first five (source file and row, see `load_rl_dataset`);
    with `overlong="error"` it stops the run with the same names.

    Args:
        dataset: Rows from `load_rl_dataset` (`_prompt`, `_system`, `_tools`; `_source` and `_row` name the rows in
            messages, else the position in `dataset` is used).
        template: LLaMA-Factory template (from `get_template_and_fix_tokenizer`).
        tokenizer: The model's tokenizer.
        max_prompt_length: Token budget of a prompt (`arpo_max_prompt_length`).
        overlong: `skip` or `error` (`arpo_overlong_prompt`).

    Returns:
        The dataset without the skipped rows, with a `prompt_ids` column (list of int, length <= `max_prompt_length`).

    Raises:
        ValueError: if `max_prompt_length` < 1 or `overlong` is not `skip` / `error`.
        RLDataError: with `overlong="error"` for the first over-long prompt (file, row, length and the fix), or when
            every prompt is too long.
    """
    if max_prompt_length < 1:
        raise ValueError(f"max_prompt_length must be positive, got {max_prompt_length}")

    if overlong not in OVERLONG_MODES:
        raise ValueError(f"arpo_overlong_prompt must be skip or error, got {overlong!r}")

    all_ids: list[list[int]] = []
    too_long: list[tuple[int, str, int]] = []  # (position, name, length)
    position = 0
    for batch in dataset.iter(batch_size=256):
        size = len(batch["_prompt"])
        tools_column = batch.get("_tools") or [""] * size
        sources = batch.get("_source") or [None] * size
        rows = batch.get("_row") or [None] * size
        for prompt, system, tools, source, row in zip(batch["_prompt"], batch["_system"], tools_column, sources, rows):
            messages = list(prompt) + [{"role": "assistant", "content": ""}]
            prompt_ids, _ = template.encode_oneturn(tokenizer, messages, system or None, tools or None)
            if len(prompt_ids) > max_prompt_length:
                too_long.append((position, _row_name(source, row, position), len(prompt_ids)))

            all_ids.append(prompt_ids)
            position += 1

    if too_long and overlong == "error":
        _, name, length = too_long[0]
        others = [other for _, other, _ in too_long[1:]]
        more = ""
        if others:
            listed = ", ".join(others[:_NAMED_OVERLONG]) + (", ..." if len(others) > _NAMED_OVERLONG else "")
            more = f" ({len(others)} more such prompt{'s' if len(others) > 1 else ''}: {listed})"

        raise RLDataError(
            f"{name}: the prompt is {length} tokens, longer than arpo_max_prompt_length={max_prompt_length}{more}; "
            "raise arpo_max_prompt_length, shorten the prompt, or set arpo_overlong_prompt: skip to drop such rows"
        )

    if too_long and len(too_long) == len(all_ids):
        raise RLDataError(
            f"every prompt is longer than arpo_max_prompt_length={max_prompt_length} tokens (shortest "
            f"{min(length for _, _, length in too_long)}); raise arpo_max_prompt_length"
        )

    if too_long:
        named = ", ".join(f"{name} ({length} tokens)" for _, name, length in too_long[:_NAMED_OVERLONG])
        if len(too_long) > _NAMED_OVERLONG:
            named += ", ..."

        logger.warning(
            f"{LOG_PREFIX} skipped {len(too_long)}/{len(all_ids)} prompts longer than arpo_max_prompt_length="
            f"{max_prompt_length} tokens (longest {max(length for _, _, length in too_long)}): {named}; raise "
            "arpo_max_prompt_length to keep them, or set arpo_overlong_prompt: error to stop instead"
        )
        skipped = {pos for pos, _, _ in too_long}
        keep = [pos for pos in range(len(all_ids)) if pos not in skipped]
        dataset = dataset.select(keep)
        all_ids = [all_ids[pos] for pos in keep]

    if "prompt_ids" in dataset.column_names:
        dataset = dataset.remove_columns("prompt_ids")

    return dataset.add_column("prompt_ids", all_ids)
