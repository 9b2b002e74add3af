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

r"""The `agentic_sft` stage: LLaMA-Factory's SFT on tool trajectories with the inline-tag template.

The stage runs as LLaMA-Factory's `sft` (the activation layer rewrites `stage: agentic_sft` to `sft` and routes
`run_sft` here), so checks, `get_dataset(stage="sft")`, packing, evaluation, prediction and plots are LLaMA-Factory's.
This workflow only (1) switches `template` to its inline-tag variant (`qwen_agentic`, docs/algorithms.md §2.7), (2)
passes `agentic_sft_mask_results` and `agentic_tool_protocol` to the `arpo_sft` converter through `data_args`, (3)
runs the pre-run check, then calls LLaMA-Factory's original `run_sft`.
"""

from typing import TYPE_CHECKING, Any

from ...common.log import get_logger
from ...hparams import agentic_value


if TYPE_CHECKING:
    from llamafactory.hparams import DataArguments, FinetuningArguments, GeneratingArguments, ModelArguments
    from transformers import Seq2SeqTrainingArguments, TrainerCallback


logger = get_logger(__name__)


def prepare_agentic_sft(data_args: "DataArguments", finetuning_args: Any) -> None:
    r"""Set the inline-tag template and the converter options on `data_args` (idempotent).

    Sets `data_args.agentic_tool_protocol`, `data_args.agentic_sft_mask_results` (read by the `arpo_sft` converter)
    and, with `agentic_tool_protocol: inline_tags`, `data_args.template = get_inline_template_name(template)`.

    Raises:
        ValueError: with inline tags and no `template`, with `tool_format` set (it would replace the verbatim function
            formatter by a JSON one), or for an `efficient_eos` template.
    """
    from ...data.converters import register_converters
    from ...data.inline_template import get_inline_template_name, register_default_inline_templates

    register_converters()
    register_default_inline_templates()
    protocol = agentic_value(finetuning_args, "agentic_tool_protocol")
    mask_results = bool(agentic_value(finetuning_args, "agentic_sft_mask_results"))
    data_args.agentic_tool_protocol = protocol
    data_args.agentic_sft_mask_results = mask_results
    if protocol == "inline_tags":
        if data_args.template is None:
            raise ValueError(
                "agentic_sft with `agentic_tool_protocol: inline_tags` needs `template` (e.g. qwen, qwen3, llama3): "
                "its inline-tag variant renders the tool calls and results as the RL rollout does"
            )

        if data_args.tool_format is not None:
            raise ValueError(
                f"`tool_format: {data_args.tool_format}` replaces the inline-tag function formatter with JSON tool "
                "calls; remove it, or set `agentic_tool_protocol: template` to train on the template's own tool calls"
            )

        base = data_args.template
        data_args.template = get_inline_template_name(base)
        logger.info(f"[agentic-sft] template {base} -> {data_args.template} (inline tool tags)")

    if data_args.train_on_prompt and mask_results:
        logger.warning(
            "[agentic-sft] `train_on_prompt: true` also trains on the tool results (observation turns are prompt "
            "turns in LLaMA-Factory); set it to false to mask them"
        )

    if data_args.mask_history:
        logger.warning("[agentic-sft] `mask_history: true` trains only on the last chunk of each trajectory")

    if not mask_results:
        logger.warning(
            "[agentic-sft] agentic_sft_mask_results: false: tool results are trained on (reference cold start, "
            "RUC-NLPIR/ARPO issue 9)"
        )


def run_agentic_sft(
    model_args: "ModelArguments",
    data_args: "DataArguments",
    training_args: "Seq2SeqTrainingArguments",
    finetuning_args: "FinetuningArguments",
    generating_args: "GeneratingArguments",
    callbacks: list["TrainerCallback"] | None = None,
) -> None:
    r"""Run agentic SFT: prepare the template and converter options, run the pre-run check, then LLaMA-Factory's SFT.

    Args:
        model_args: LLaMA-Factory's model arguments.
        data_args: LLaMA-Factory's data arguments (`template` is switched to its inline-tag variant).
        training_args: Training arguments.
        finetuning_args: Finetuning arguments with the plugin's fields (`agentic_tool_protocol`,
            `agentic_sft_mask_results`, `agentic_sft_check`, `agentic_skip_bad_rows`).
        generating_args: Generation arguments (prediction).
        callbacks: Trainer callbacks.

    Raises:
        ValueError: see `prepare_agentic_sft`.
        AgenticSFTCheckError: when the pre-run check finds a tag the tokenizer or template would break, or a
            trajectory with unbalanced tags.
    """
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.model import load_tokenizer
    from llamafactory.train.sft.workflow import run_sft

    from .check import run_pre_run_check

    prepare_agentic_sft(data_args, finetuning_args)
    native = data_args.agentic_tool_protocol == "template"
    if agentic_value(finetuning_args, "agentic_sft_check") or native:
        tokenizer = load_tokenizer(model_args)["tokenizer"]
        template = get_template_and_fix_tokenizer(tokenizer, data_args)
    if native:  # cases where these SFT ids cannot equal the rollout's (docs/tools.md "Templates and parity")
        from ...rollout.tool_format import warn_parity_issues

        warn_parity_issues(template, tokenizer, "sft")
    if agentic_value(finetuning_args, "agentic_sft_check"):
        run_pre_run_check(
            template,
            tokenizer,
            model_args,
            data_args,
            training_args,
            skip_bad_rows=bool(agentic_value(finetuning_args, "agentic_skip_bad_rows")),
            inline_tags=data_args.agentic_tool_protocol == "inline_tags",
        )

    result = run_sft(model_args, data_args, training_args, finetuning_args, generating_args, callbacks)
    if training_args.do_train and training_args.should_save:  # the cold-start marker RL's start check looks for
        from ...guards.cold_start import write_cold_start_marker

        write_cold_start_marker(
            training_args.output_dir,
            {"stage": "agentic_sft", "template": data_args.template,
             "agentic_tool_protocol": data_args.agentic_tool_protocol},
        )  # fmt: skip
    return result
