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

r"""Pre-run check of agentic SFT (`agentic_sft_check: true`), printed before training starts.

1. Tokenizer: every tag (`<think>`, `<search>`, `<python>`, `<result>`, `<answer>` and their closing forms) must be
   ordinary text: not a special token (decoding with `skip_special_tokens` would drop it), not an added token (Qwen3's
   own `<think>`/`</think>` are allowed), and it must round-trip through encode/decode alone and in context.
2. Template: a synthetic trajectory must render its tool call verbatim and its observation as
   `" <result>\n…\n</result>"` (docs/algorithms.md §2.3).
3. Data: every `arpo_sft` row must have balanced tags and result blocks that follow tool calls (error naming the
   dataset, row and tag, or a skip count with `agentic_skip_bad_rows: true`).
4. One rendered sample with the loss-masked spans marked `[MASKED>…<MASKED]` and the share of masked tokens (prompt
   and tool results) over a sample of rows, computed with LLaMA-Factory's own `SupervisedDatasetProcessor`.
"""

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...common.log import get_logger
from ...data.tags import CHECKED_TAGS, TrajectoryFormatError, wrap_observation
from ...hparams import agentic_value


if TYPE_CHECKING:
    from llamafactory.data.template import Template
    from llamafactory.hparams import DataArguments, ModelArguments
    from transformers import PreTrainedTokenizer, Seq2SeqTrainingArguments


logger = get_logger(__name__)

LOG_PREFIX = "[agentic-sft]"
MASK_OPEN = "[MASKED>"
MASK_CLOSE = "<MASKED]"
ALLOWED_ADDED_TAGS = frozenset({"<think>", "</think>"})  # Qwen3 tokenizers ship them as (non-special) added tokens
_CONTEXT_SAMPLES = (
    "<think> First I look it up. </think>\n<search> capital of France </search>",
    wrap_observation("Page 1: Paris is the capital of France."),
    " <think> Now compute. </think>\n<python>\nprint(6 * 7)\n</python>",
    " <answer> The final answer is \\[ \\boxed{42} \\] </answer>",
)


class AgenticSFTCheckError(ValueError):
    r"""The tokenizer, the template or the data would break the inline tool tags."""


@dataclass
class SFTCheckReport:
    r"""Result of the pre-run check.

    Attributes:
        rows: Rows processed for the token statistics.
        tokens: Tokens of those rows (after `cutoff_len`).
        masked_tokens: Tokens with label `IGNORE_INDEX`.
        prompt_tokens: Masked tokens before the first trained token of each row (system, question).
        result_tokens: Masked tokens after the first trained token (tool results and later user turns).
        tool_calls: Observation messages in those rows.
        bad_rows: `"dataset row N: problem"` for every malformed row found (only filled with skipping on).
        sample: The rendered sample with the masked spans marked ("" when no row was valid).
    """

    rows: int = 0
    tokens: int = 0
    masked_tokens: int = 0
    prompt_tokens: int = 0
    result_tokens: int = 0
    tool_calls: int = 0
    bad_rows: list[str] = field(default_factory=list)
    sample: str = ""

    @property
    def masked_share(self) -> float:
        r"""Masked tokens / tokens (0 when there are none)."""
        return self.masked_tokens / self.tokens if self.tokens else 0.0


def check_tokenizer_tags(tokenizer: "PreTrainedTokenizer", tags: tuple[str, ...] = CHECKED_TAGS) -> None:
    r"""Raise when a tag is a special or added token or does not round-trip through encode/decode.

    Raises:
        AgenticSFTCheckError: listing every problem found.
    """
    special = set(tokenizer.all_special_tokens)
    special.update(token.content for token in tokenizer.added_tokens_decoder.values() if token.special)
    added = set(tokenizer.get_added_vocab())
    problems = []
    for name in tags:
        for tag in (f"<{name}>", f"</{name}>"):
            if tag in special:
                problems.append(f"{tag} is a special token of the tokenizer (decoding skips it)")
            elif tag in added and tag not in ALLOWED_ADDED_TAGS:
                problems.append(f"{tag} is an added token of the tokenizer (the tags must be ordinary text)")

            decoded = tokenizer.decode(tokenizer.encode(tag, add_special_tokens=False), skip_special_tokens=True)
            if decoded != tag:
                problems.append(f"{tag} does not round-trip through encode/decode (decodes to {decoded!r})")

    for text in _CONTEXT_SAMPLES:
        decoded = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False), skip_special_tokens=True)
        if decoded != text:
            problems.append(f"{text!r} does not round-trip through encode/decode (decodes to {decoded!r})")

    if problems:
        raise AgenticSFTCheckError(
            "The tokenizer would break the inline tool tags: " + "; ".join(problems) + ". Use the model's original "
            "tokenizer without extra special tokens for the tags."
        )


def check_template_renders(template: "Template", tokenizer: "PreTrainedTokenizer", template_name: str | None) -> None:
    r"""Render a synthetic trajectory and check the tool call and the observation come out as the rollout writes them.

    Raises:
        AgenticSFTCheckError: if the function message is not verbatim or the observation is not
            `" <result>\n…\n</result>"` without a role header.
    """
    call = _CONTEXT_SAMPLES[0]
    observation = "Page 1: Paris is the capital of France."
    messages = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "function", "content": call},
        {"role": "observation", "content": observation},
        {"role": "assistant", "content": _CONTEXT_SAMPLES[3]},
    ]
    try:
        pairs = template.encode_multiturn(tokenizer, messages, "You are a helpful assistant.", None)
    except Exception as err:  # a JSON function formatter fails on inline text
        raise AgenticSFTCheckError(
            f"template {template_name} cannot render an inline tool call ({err}); agentic SFT with "
            "`agentic_tool_protocol: inline_tags` needs the `<template>_agentic` variant (set by the agentic_sft stage)"
        ) from None

    rendered_call = tokenizer.decode(pairs[0][1], skip_special_tokens=False)
    rendered_observation = tokenizer.decode(pairs[1][0], skip_special_tokens=False)
    expected_observation = wrap_observation(observation)
    if rendered_call != call or rendered_observation != expected_observation:
        raise AgenticSFTCheckError(
            f"template {template_name} renders a tool call as {rendered_call!r} (expected {call!r}) and its result as "
            f"{rendered_observation!r} (expected {expected_observation!r}); agentic SFT with inline tags needs the "
            "`<template>_agentic` variant"
        )


def render_masked(tokenizer: "PreTrainedTokenizer", input_ids: list[int], labels: list[int]) -> str:
    r"""Decode `input_ids` with every run of loss-masked tokens (label `IGNORE_INDEX`) wrapped as `[MASKED>…<MASKED]`.

    Args:
        tokenizer: The tokenizer.
        input_ids: Token ids `[seq_len]`.
        labels: Labels `[seq_len]`.

    Returns:
        The marked text.
    """
    from llamafactory.extras.constants import IGNORE_INDEX

    parts, start = [], 0
    for pos in range(1, len(input_ids) + 1):
        if pos == len(input_ids) or (labels[pos] == IGNORE_INDEX) != (labels[start] == IGNORE_INDEX):
            text = tokenizer.decode(input_ids[start:pos], skip_special_tokens=False)
            parts.append(f"{MASK_OPEN}{text}{MASK_CLOSE}" if labels[start] == IGNORE_INDEX else text)
            start = pos

    return "".join(parts)


def _row_problems(dataset_attr: Any, raw_rows: Any, indices: list[int], data_args: Any) -> list[tuple[int, str, bool]]:
    r"""`(row, problem, is_tag_problem)` for rows the converter dropped."""
    from ...data.converters import rebuild_sft_messages

    problems = []
    for idx in indices:
        messages = raw_rows[idx][dataset_attr.messages] or []
        try:
            rebuild_sft_messages(messages, dataset_attr, agentic_value(data_args, "agentic_sft_mask_results"))
        except TrajectoryFormatError as err:
            problems.append((idx, f"tag {err.tag}: {err.problem}" if err.tag else err.problem, True))
            continue

        problems.append(
            (idx, "roles do not alternate human/gpt (function_call/observation) as sharegpt requires", False)
        )

    return problems


def check_sft_datasets(
    template: "Template",
    tokenizer: "PreTrainedTokenizer",
    model_args: "ModelArguments",
    data_args: "DataArguments",
    training_args: "Seq2SeqTrainingArguments",
    skip_bad_rows: bool = False,
    sample_rows: int = 256,
) -> SFTCheckReport:
    r"""Validate the `arpo_sft` rows of `dataset`/`eval_dataset` and measure the loss mask on a sample.

    Rows are read with LLaMA-Factory's loader and the `arpo_sft` converter (the same cached map LLaMA-Factory runs
    next), and tokenised with LLaMA-Factory's `SupervisedDatasetProcessor`.

    Args:
        template: The (inline-tag) template.
        tokenizer: The tokenizer fixed by `get_template_and_fix_tokenizer`.
        model_args: Model arguments (cache dir, hub token).
        data_args: Data arguments (with `agentic_sft_mask_results` set).
        training_args: Training arguments.
        skip_bad_rows: Count malformed rows instead of raising.
        sample_rows: Rows of the first dataset used for the token statistics.

    Returns:
        The `SFTCheckReport`.

    Raises:
        AgenticSFTCheckError: for a row with unbalanced tags (names dataset, row and tag) unless `skip_bad_rows`.
    """
    from llamafactory.data.loader import _load_single_dataset
    from llamafactory.data.parser import get_dataset_list
    from llamafactory.data.processor import SupervisedDatasetProcessor

    from ...data.converters import RAW_FORMATTING, SFT_FORMATTING
    from ...data.rl_loader import source_label

    report = SFTCheckReport()
    names = list(dict.fromkeys((data_args.dataset or []) + (data_args.eval_dataset or [])))
    processor = SupervisedDatasetProcessor(template=template, tokenizer=tokenizer, processor=None, data_args=data_args)
    for name, dataset_attr in zip(names, get_dataset_list(names, data_args.dataset_dir)):
        if dataset_attr.formatting != SFT_FORMATTING:
            continue

        aligned = _load_single_dataset(dataset_attr, model_args, data_args, training_args)
        lengths = _prompt_lengths(aligned)
        dropped = [idx for idx, n in enumerate(lengths) if n == 0]
        if dropped:
            raw_attr = copy.copy(dataset_attr)
            raw_attr.formatting = RAW_FORMATTING
            raw = _load_single_dataset(raw_attr, model_args, data_args, training_args)
            label = source_label(dataset_attr)[0]
            problems = _row_problems(dataset_attr, raw, dropped, data_args)
            tag_problems = [(idx, text) for idx, text, is_tag in problems if is_tag]
            if tag_problems and not skip_bad_rows:
                idx, text = tag_problems[0]
                more = f" ({len(tag_problems) - 1} more such rows)" if len(tag_problems) > 1 else ""
                raise AgenticSFTCheckError(
                    f"dataset {name} ({label}) row {idx}: {text}{more}; fix the trajectory or set "
                    "agentic_skip_bad_rows: true to drop such rows"
                )

            report.bad_rows.extend(f"{name} row {idx}: {text}" for idx, text, _ in problems)
            logger.warning(
                f"{LOG_PREFIX} {name}: {len(dropped)}/{len(aligned)} malformed rows are dropped "
                f"(first: row {problems[0][0]}: {problems[0][1]})"
            )

        if report.rows >= sample_rows:
            continue

        valid = [idx for idx, n in enumerate(lengths) if n > 0][: sample_rows - report.rows]
        if not valid:
            continue

        batch = aligned.select(valid)[:]
        encoded = processor.preprocess_dataset(batch)
        for prompt, response in zip(batch["_prompt"], batch["_response"]):
            report.tool_calls += sum(message["role"] == "observation" for message in prompt + response)

        _accumulate(report, encoded["input_ids"], encoded["labels"])
        if not report.sample and encoded["input_ids"]:
            report.sample = render_masked(tokenizer, encoded["input_ids"][0], encoded["labels"][0])

    return report


def _prompt_lengths(dataset: Any) -> list[int]:
    r"""Number of `_prompt` messages of every row (0 for rows the converter dropped), read from Arrow directly."""
    import pyarrow.compute as pc

    column = dataset.with_format("arrow")["_prompt"]
    return pc.fill_null(pc.list_value_length(column), 0).to_pylist()


def _accumulate(report: SFTCheckReport, all_input_ids: list[list[int]], all_labels: list[list[int]]) -> None:
    from llamafactory.extras.constants import IGNORE_INDEX

    for input_ids, labels in zip(all_input_ids, all_labels):
        trained = [pos for pos, label in enumerate(labels) if label != IGNORE_INDEX]
        first = trained[0] if trained else len(labels)
        masked = sum(label == IGNORE_INDEX for label in labels)
        report.rows += 1
        report.tokens += len(input_ids)
        report.masked_tokens += masked
        report.prompt_tokens += first
        report.result_tokens += masked - first


def format_report(report: SFTCheckReport, mask_results: bool) -> str:
    r"""The text printed before training: the marked sample and one line of statistics."""
    lines = [f"{LOG_PREFIX} pre-run check: rendered sample (loss-masked spans marked {MASK_OPEN}…{MASK_CLOSE}):"]
    lines.append(report.sample or "(no valid row)")
    if report.tokens:
        lines.append(
            f"{LOG_PREFIX} {report.rows} rows, {report.tokens} tokens: {100 * report.masked_share:.1f}% masked "
            f"(prompt {100 * report.prompt_tokens / report.tokens:.1f}%, tool results and later turns "
            f"{100 * report.result_tokens / report.tokens:.1f}%), {report.tool_calls / max(report.rows, 1):.2f} "
            "tool results per row"
        )

    if not mask_results:
        lines.append(
            f"{LOG_PREFIX} agentic_sft_mask_results: false: tool results (<result>…</result>) are trained on "
            "(reference cold start, RUC-NLPIR/ARPO issue 9)"
        )

    return "\n".join(lines)


def run_pre_run_check(
    template: "Template",
    tokenizer: "PreTrainedTokenizer",
    model_args: "ModelArguments",
    data_args: "DataArguments",
    training_args: "Seq2SeqTrainingArguments",
    skip_bad_rows: bool = False,
    inline_tags: bool = True,
    sample_rows: int = 256,
) -> SFTCheckReport:
    r"""Run every check (tokenizer, template, data), print the report on the logging rank and return it.

    Raises:
        AgenticSFTCheckError: see `check_tokenizer_tags`, `check_template_renders`, `check_sft_datasets`.
    """
    if inline_tags:
        check_tokenizer_tags(tokenizer)
        check_template_renders(template, tokenizer, data_args.template)

    with training_args.main_process_first(desc="agentic sft check", local=(not data_args.data_shared_file_system)):
        report = check_sft_datasets(
            template, tokenizer, model_args, data_args, training_args, skip_bad_rows, sample_rows
        )

    if training_args.should_log:
        print(format_report(report, agentic_value(data_args, "agentic_sft_mask_results")))

    return report
