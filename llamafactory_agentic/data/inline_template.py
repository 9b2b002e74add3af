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

r"""Inline-tag variants of LLaMA-Factory chat templates (docs/algorithms.md §2.7).

`build_inline_template` builds the inline-tag variant of a template; `get_inline_template_name("qwen")` registers it
with LLaMA-Factory as `qwen_agentic`: a copy of
`qwen` whose `function` messages are rendered verbatim (no JSON tool-call parsing, no end-of-turn token) and whose
`observation` messages are rendered as `" <result>\n{content}\n</result>"` with no role header. A trajectory split into
`user, function, observation, ..., assistant` messages then encodes, message by message, to exactly the ids the RL
rollout builds: prompt ids (ending with the assistant header), then each sampled chunk and each inserted observation
string encoded on its own, then the end-of-turn token. LLaMA-Factory's supervised processor labels `observation`
messages `IGNORE_INDEX`, so SFT masks the same spans as the RL loss mask.

Observations are encoded as plain text, as the rollout encodes them (`encode_observation_text`): a tool output that
contains `<|im_end|>` or `<|eot_id|>` gives ordinary text tokens, never an end-of-turn token (LLaMA-Factory's own
encoding would turn it into the special id).

Reasoning templates (e.g. `qwen3`) keep their class, but a trajectory carries its own `<think>` blocks: no empty thought
is inserted into tool-call chunks or responses and no thought is removed. With `enable_thinking: false` the empty
thought block (`<think>\n\n</think>\n\n` for qwen3) ends every prompt that follows a user turn, as LLaMA-Factory's
rendering of the RL prompt and the model's own chat template do; with `enable_thinking: true` the prompt ends at the
bare assistant header on both sides.
"""

import dataclasses
from typing import Any

from llamafactory.data.data_utils import Role
from llamafactory.data.formatter import StringFormatter
from llamafactory.data.template import ReasoningTemplate, Template

from .tags import OBSERVATION_PREFIX, OBSERVATION_SUFFIX


INLINE_SUFFIX = "_agentic"
DEFAULT_INLINE_BASES = ("qwen", "qwen3", "qwen3_nothink", "llama3")


class VerbatimFunctionFormatter(StringFormatter):
    r"""Render a `function` message verbatim: the model's text through the closing tool tag.

    `Template._encode` passes `thought_words` and `tool_call_words` to the function formatter; they are ignored.
    """

    def apply(self, **kwargs):
        r"""Slots with `{{content}}` replaced by the message text."""
        kwargs.pop("thought_words", None)
        kwargs.pop("tool_call_words", None)
        return super().apply(**kwargs)

    def extract(self, content: str) -> str:
        r"""Inline tags are not JSON tool calls: the content is returned as it is."""
        return content


def encode_observation_text(tokenizer: Any, text: str) -> list[int]:
    r"""Ids of an observation string as plain text: special-token text in it (`<|im_end|>`) is split into ordinary tokens.

    The same call as the rollout's observation encoding (`AgenticRollout.encode_observation`), so SFT and RL ids of a
    tool output agree.
    """
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


class InlineEncodingMixin:
    r"""Encodes `observation` messages as plain text (see `encode_observation_text`); mixed into every inline template."""

    def _encode(self, tokenizer, messages, system, tools):
        encoded = super()._encode(tokenizer, messages, system, tools)
        for idx, message in enumerate(messages):
            if idx > 0 and message["role"] == Role.OBSERVATION.value:
                elements = self.format_observation.apply(content=message["content"])
                encoded[idx] = [token for text in elements for token in encode_observation_text(tokenizer, text)]

        return encoded


class InlineReasoningMixin:
    r"""Reasoning templates with inline trajectories: no thought added to or removed from model turns.

    With `enable_thinking` False the empty thought (`add_thought()`) is appended to every prompt part that ends with a
    user turn (the RL prompt rendering of `ReasoningTemplate.encode_oneturn`); nothing else changes. `mask_history`'s
    `discarding_history_cot` is ignored: the `<think>` blocks are part of the trajectory.
    """

    def _add_prompt_thought(self, tokenizer, messages, encoded):
        if self.enable_thinking is False:
            thought = self.get_thought_word_ids(tokenizer)
            for idx in range(0, len(messages), 2):
                if messages[idx]["role"] == Role.USER.value:
                    encoded[idx] = encoded[idx] + thought

        return encoded

    def encode_oneturn(self, tokenizer, messages, system=None, tools=None):
        r"""Prompt and response ids (see the class docstring)."""
        encoded = self._add_prompt_thought(tokenizer, messages, self._encode(tokenizer, messages, system, tools))
        return [token for ids in encoded[:-1] for token in ids], encoded[-1]

    def encode_multiturn(self, tokenizer, messages, system=None, tools=None, discarding_history_cot=False):
        r"""Prompt/response id pairs (see the class docstring)."""
        encoded = self._add_prompt_thought(tokenizer, messages, self._encode(tokenizer, messages, system, tools))
        return [(encoded[idx], encoded[idx + 1]) for idx in range(0, len(encoded), 2)]


_INLINE_CLASSES: dict[type, type] = {}


def inline_template_class(base_class: type) -> type:
    r"""The inline-tag subclass of a LLaMA-Factory template class (`Template` -> `InlineTemplate`, created once).

    The class is a module attribute, so templates pickle by reference (`datasets` fingerprints the processor).
    """
    if base_class not in _INLINE_CLASSES:
        if issubclass(base_class, ReasoningTemplate):
            mixins = (InlineReasoningMixin, InlineEncodingMixin)
        else:
            mixins = (InlineEncodingMixin,)

        name = f"Inline{base_class.__name__}"
        cls = type(name, (*mixins, base_class), {"__module__": __name__, "__qualname__": name})
        cls.__doc__ = f"`{base_class.__name__}` with inline tool tags (built by `build_inline_template`)."
        globals()[name] = cls
        _INLINE_CLASSES[base_class] = cls

    return _INLINE_CLASSES[base_class]


def build_inline_template(base: Template) -> Template:
    r"""Copy of `base` with the inline-tag `function` and `observation` formatters and plain-text observations.

    Args:
        base: A LLaMA-Factory `Template`.

    Returns:
        A new template of `inline_template_class(type(base))` (a subclass of the base's class).

    Raises:
        ValueError: for templates with `efficient_eos` (LLaMA-Factory labels the first token after each turn with EOS
            there, which would teach the model to stop after every tool call).
    """
    if base.efficient_eos:
        raise ValueError(
            "inline tool tags need a template without `efficient_eos` (its end-of-turn label would land after every "
            "tool call); use a template such as qwen, qwen3 or llama3"
        )

    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    values["format_function"] = VerbatimFunctionFormatter(slots=["{{content}}"])
    values["format_observation"] = StringFormatter(slots=[OBSERVATION_PREFIX + "{{content}}" + OBSERVATION_SUFFIX])
    values["stop_words"] = list(base.stop_words)
    return inline_template_class(type(base))(**values)


def is_inline_template(template: Template) -> bool:
    r"""Whether `template` renders observations as inline `<result>` blocks (built by `build_inline_template`)."""
    slots = getattr(template.format_observation, "slots", [])
    return slots == [OBSERVATION_PREFIX + "{{content}}" + OBSERVATION_SUFFIX]


def get_inline_template_name(base_name: str) -> str:
    r"""Register (once) and return the name of the inline-tag variant of LLaMA-Factory's template `base_name`.

    Args:
        base_name: A registered template such as `qwen`, `qwen3`, `llama3`; an already inline name
            (`qwen_agentic`) is returned unchanged.

    Returns:
        `f"{base_name}_agentic"`, registered in `llamafactory.data.template.TEMPLATES`.

    Raises:
        ValueError: if `base_name` is not a registered template, or see `build_inline_template`.
    """
    from llamafactory.data.template import TEMPLATES

    if base_name.endswith(INLINE_SUFFIX) and base_name in TEMPLATES:
        return base_name

    if base_name not in TEMPLATES:
        raise ValueError(f"Template {base_name} does not exist; set `template` to one of LLaMA-Factory's templates.")

    name = base_name + INLINE_SUFFIX
    if name not in TEMPLATES:
        TEMPLATES[name] = build_inline_template(TEMPLATES[base_name])

    return name


def register_default_inline_templates() -> list[str]:
    r"""Register the inline-tag variants of `DEFAULT_INLINE_BASES` present in this LLaMA-Factory (idempotent).

    Returns:
        The registered names, e.g. `["qwen_agentic", "qwen3_agentic", "qwen3_nothink_agentic", "llama3_agentic"]`.
    """
    from llamafactory.data.template import TEMPLATES

    return [get_inline_template_name(base) for base in DEFAULT_INLINE_BASES if base in TEMPLATES]


MODULE_READY = True  # read by `integration.data_registration` (registration waits until the body ran)
