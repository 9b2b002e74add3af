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

r"""LLaMA-Factory dataset converters for the ARPO formats (`formatting:` values of a `dataset_info.json` entry).

* `arpo_rl`: verl-style RL prompts -> LLaMA-Factory's aligned columns (`_prompt` user/assistant messages, `_response`
  [], `_system`, `_tools` "", media None) plus `_ground_truth`, `_data_source`, `_ability`, `_extra` (JSON of every
  other column) and where the row came from: `_source` (file name or hub id) and `_row` (its row number there).
* `arpo_sft`: sharegpt-like trajectories (`conversations` + `system`; tags from/value; roles
  human/gpt/function_call/observation). A `gpt` message holding a whole inline trajectory is split into
  function/observation/assistant turns; trajectories already given as function_call/observation turns are kept
  (observations wrapped in `<result>` tags are unwrapped). With `agentic_sft_mask_results: false` the trajectory is
  instead joined into one assistant message with the results inline, so they are trained on (the reference's
  behaviour, RUC-NLPIR/ARPO issue 9).
* `agentic_raw` (internal): returns the row unchanged; used to read raw rows through LLaMA-Factory's loader so they can
  be validated with their row numbers before conversion.
"""

from dataclasses import dataclass
from typing import Any

from llamafactory.data.converter import DatasetConverter, SharegptDatasetConverter
from llamafactory.data.data_utils import Role

from ..common.log import get_logger
from ..hparams import agentic_value
from .rl_schema import PROMPT_COLUMN, RLRowError, dump_extra, parse_rl_row
from .tags import (
    TrajectoryFormatError,
    Turn,
    check_turns_balance,
    join_trajectory,
    split_inline_trajectory,
    unwrap_observation,
)


logger = get_logger(__name__)

RL_FORMATTING = "arpo_rl"
SFT_FORMATTING = "arpo_sft"
RAW_FORMATTING = "agentic_raw"

_DEFAULT_ALPACA_PROMPT = "instruction"  # DatasetAttr.prompt's default, meaningless for the RL layout
ROW_NUMBER_COLUMN = "__agentic_row"  # added by `load_rl_dataset` before conversion: the row number in the source


def source_text(dataset_attr: Any) -> str:
    r"""`_source` of the converted rows: the file's base name or the hub id (`(sampled)` added with `num_samples`)."""
    from .rl_loader import source_label

    label = source_label(dataset_attr)[0]
    return f"{label} (sampled)" if getattr(dataset_attr, "num_samples", None) is not None else label


def rl_prompt_column(dataset_attr: Any) -> str:
    r"""Column holding the chat messages: `columns.prompt` of the entry when set, else `prompt`."""
    column = getattr(dataset_attr, "prompt", None)
    return column if column and column != _DEFAULT_ALPACA_PROMPT else PROMPT_COLUMN


@dataclass
class ArpoRLDatasetConverter(DatasetConverter):
    r"""Convert one verl-style RL row (ARPO's `rl_datasets/*.parquet`) to LLaMA-Factory's aligned layout.

    Reads `data_args.agentic_repair_boxed` (default True; set by `load_rl_dataset` from the finetuning arguments) to
    repair `\x08oxed` in every message (docs/algorithms.md §2.8). Rows are validated by `load_rl_dataset` first; a
    malformed row reaching this converter raises.

    Raises:
        ValueError: for a malformed row (names the dataset and the field).
    """

    def __call__(self, example: dict[str, Any]) -> dict[str, Any]:
        r"""Convert one raw row (see the class docstring)."""
        repair = agentic_value(self.data_args, "agentic_repair_boxed")
        example = dict(example)
        row_number = example.pop(ROW_NUMBER_COLUMN, None)
        try:
            row = parse_rl_row(example, prompt_column=rl_prompt_column(self.dataset_attr), repair=repair)
        except RLRowError as err:
            raise ValueError(
                f"{self.dataset_attr.dataset_name}: {err}; fix the row or load RL data with `load_rl_dataset` and "
                "`agentic_skip_bad_rows: true`"
            ) from None

        return {
            "_prompt": row.messages,
            "_response": [],
            "_system": row.system,
            "_tools": "",
            "_images": None,
            "_videos": None,
            "_audios": None,
            "_ground_truth": row.ground_truth,
            "_data_source": row.data_source,
            "_ability": row.ability,
            "_extra": dump_extra(row.extra),
            "_source": source_text(self.dataset_attr),
            "_row": -1 if row_number is None else int(row_number),
        }


@dataclass
class RawRowsConverter(DatasetConverter):
    r"""Return the row unchanged (LLaMA-Factory's loader with sampling and `max_samples`, without conversion)."""

    def __call__(self, example: dict[str, Any]) -> dict[str, Any]:
        r"""Return a copy of the row."""
        return dict(example)


def sft_trajectory_turns(messages: list[dict[str, Any]], dataset_attr: Any) -> list[list[Turn]]:
    r"""The model turns of each trajectory in a sharegpt message list, as `Turn`s (function/observation/assistant).

    A trajectory is a maximal run of assistant/function_call/observation messages. Inline `gpt` messages are split.

    Raises:
        TrajectoryFormatError: if a result block does not follow a closing tool tag.
    """
    role_tag, content_tag = dataset_attr.role_tag, dataset_attr.content_tag
    roles = {
        dataset_attr.assistant_tag: Role.ASSISTANT.value,
        dataset_attr.function_tag: Role.FUNCTION.value,
        dataset_attr.observation_tag: Role.OBSERVATION.value,
    }
    trajectories: list[list[Turn]] = []
    current: list[Turn] | None = None
    for message in messages:
        role = roles.get(message.get(role_tag))
        if role is None:  # user or system: closes the running trajectory
            current = None
            continue

        if current is None:
            current = []
            trajectories.append(current)

        content = message.get(content_tag) or ""
        if role == Role.ASSISTANT.value:
            current.extend(split_inline_trajectory(content))
        elif role == Role.OBSERVATION.value:
            current.append(Turn("observation", unwrap_observation(content)))
        else:  # the rollout stops right at the closing tool tag: trailing whitespace is not model output
            current.append(Turn("function", content.rstrip()))

    return trajectories


@dataclass
class ArpoSFTDatasetConverter(SharegptDatasetConverter):
    r"""Convert one ARPO SFT row (sharegpt-like) to LLaMA-Factory's aligned layout with split tool turns.

    Reads from `data_args` (set by `run_agentic_sft`): `agentic_sft_mask_results` (default True: split, so that
    results become `observation` messages that LLaMA-Factory's supervised processor excludes from the loss; False:
    one assistant message with the results inline) and `agentic_tool_protocol` (`template`: rows pass through as plain
    sharegpt). A row with unbalanced tags or a result block that follows no tool call is logged and dropped (empty
    prompt and response, LLaMA-Factory's convention); `run_agentic_sft`'s pre-run check names it with its row.
    """

    def __call__(self, example: dict[str, Any]) -> dict[str, Any]:
        r"""Convert one sharegpt row (see the class docstring)."""
        if agentic_value(self.data_args, "agentic_tool_protocol") == "template":
            return super().__call__(example)

        messages_column = self.dataset_attr.messages
        try:
            messages = rebuild_sft_messages(
                example[messages_column] or [],
                self.dataset_attr,
                mask_results=agentic_value(self.data_args, "agentic_sft_mask_results"),
            )
        except TrajectoryFormatError as err:
            logger.warning_rank0(f"Skipping a malformed trajectory of {self.dataset_attr}: {err}.")
            return self._empty(example)

        return super().__call__({**example, messages_column: messages})

    def _empty(self, example: dict[str, Any]) -> dict[str, Any]:
        output = super().__call__({**example, self.dataset_attr.messages: []})
        output["_prompt"], output["_response"] = [], []
        return output


def rebuild_sft_messages(
    messages: list[dict[str, Any]], dataset_attr: Any, mask_results: bool
) -> list[dict[str, Any]]:
    r"""Rewrite a sharegpt message list so that every trajectory is in the requested layout.

    Args:
        messages: The row's messages (`{role_tag: ..., content_tag: ...}` dicts, in the entry's tags).
        dataset_attr: LLaMA-Factory's `DatasetAttr` of the entry (tags).
        mask_results: True: `function_call`/`observation`/`gpt` turns; False: one `gpt` message per trajectory with
            the results inline.

    Returns:
        The new message list in the same tags.

    Raises:
        TrajectoryFormatError: for unbalanced tags or a result block that follows no tool call.
    """
    role_tag, content_tag = dataset_attr.role_tag, dataset_attr.content_tag
    model_roles = {dataset_attr.assistant_tag, dataset_attr.function_tag, dataset_attr.observation_tag}
    tag_of = {
        "function": dataset_attr.function_tag,
        "observation": dataset_attr.observation_tag,
        "assistant": dataset_attr.assistant_tag,
    }
    trajectories = iter(sft_trajectory_turns(messages, dataset_attr))
    output: list[dict[str, Any]] = []
    in_trajectory = False
    for message in messages:
        if message.get(role_tag) not in model_roles:
            output.append(message)
            in_trajectory = False
            continue

        if in_trajectory:
            continue

        in_trajectory = True
        turns = next(trajectories)
        check_turns_balance(turns)  # model-written text only: a tool output may quote any tag (issue 8)
        if not mask_results:
            output.append({role_tag: dataset_attr.assistant_tag, content_tag: join_trajectory(turns)})
        else:
            output.extend({role_tag: tag_of[turn.role], content_tag: turn.content} for turn in turns)

    return output


def register_converters() -> None:
    r"""Register `arpo_rl`, `arpo_sft` and `agentic_raw` in LLaMA-Factory's `DATASET_CONVERTERS` (idempotent)."""
    from llamafactory.data.converter import DATASET_CONVERTERS, register_dataset_converter

    for name, converter in (
        (RL_FORMATTING, ArpoRLDatasetConverter),
        (SFT_FORMATTING, ArpoSFTDatasetConverter),
        (RAW_FORMATTING, RawRowsConverter),
    ):
        if DATASET_CONVERTERS.get(name) is not converter:
            DATASET_CONVERTERS.pop(name, None)
            register_dataset_converter(name, converter)


MODULE_READY = True  # read by `integration.data_registration` (registration waits until the body ran)
