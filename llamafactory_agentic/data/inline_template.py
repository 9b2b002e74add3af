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

`get_inline_template_name("qwen")` registers `qwen_agentic`: a copy of `qwen` whose `function` messages are rendered
verbatim (no JSON tool-call parsing, no end-of-turn token) and whose `observation` messages are rendered as
`" <result>\n{content}\n</result>"` with no role header. A trajectory split into
`user, function, observation, ..., assistant` messages then encodes, message by message, to exactly the ids the RL
rollout builds: prompt ids (ending with the assistant header), then each sampled chunk and each inserted observation
string encoded on its own, then the end-of-turn token. LLaMA-Factory's supervised processor labels `observation`
messages `IGNORE_INDEX`, so SFT masks the same spans as the RL loss mask.

Reasoning templates (e.g. `qwen3`) are copied as plain templates: a trajectory carries its own `<think>` blocks, so
no empty thought is inserted into tool-call chunks (the RL prompt with `enable_thinking: true` also ends at the bare
assistant header).
"""

import dataclasses

from llamafactory.data.formatter import StringFormatter
from llamafactory.data.template import TEMPLATES, ReasoningTemplate, Template

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


def build_inline_template(base: Template) -> Template:
    r"""Copy of `base` with the inline-tag `function` and `observation` formatters.

    Args:
        base: A LLaMA-Factory `Template`.

    Returns:
        A new template (plain `Template` for reasoning templates, the same class otherwise).

    Raises:
        ValueError: for templates with `efficient_eos` (LLaMA-Factory labels the first token after each turn with EOS
            there, which would teach the model to stop after every tool call).
    """
    if base.efficient_eos:
        raise ValueError(
            "inline tool tags need a template without `efficient_eos` (its end-of-turn label would land after every "
            "tool call); use a template such as qwen, qwen3 or llama3"
        )

    template_class = Template if isinstance(base, ReasoningTemplate) else type(base)
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    values["format_function"] = VerbatimFunctionFormatter(slots=["{{content}}"])
    values["format_observation"] = StringFormatter(slots=[OBSERVATION_PREFIX + "{{content}}" + OBSERVATION_SUFFIX])
    values["stop_words"] = list(base.stop_words)
    return template_class(**values)


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
    if base_name.endswith(INLINE_SUFFIX) and base_name in TEMPLATES:
        return base_name

    if base_name not in TEMPLATES:
        raise ValueError(f"Template {base_name} does not exist; set `template` to one of LLaMA-Factory's templates.")

    name = base_name + INLINE_SUFFIX
    if name not in TEMPLATES:
        TEMPLATES[name] = build_inline_template(TEMPLATES[base_name])

    return name


def is_inline_template(template: Template) -> bool:
    r"""Whether `template` renders observations as inline `<result>` blocks (built by `build_inline_template`)."""
    slots = getattr(template.format_observation, "slots", [])
    return slots == [OBSERVATION_PREFIX + "{{content}}" + OBSERVATION_SUFFIX]


def register_default_inline_templates() -> list[str]:
    r"""Register the inline-tag variants of `DEFAULT_INLINE_BASES` present in this LLaMA-Factory (idempotent).

    Returns:
        The registered names, e.g. `["qwen_agentic", "qwen3_agentic", "qwen3_nothink_agentic", "llama3_agentic"]`.
    """
    return [get_inline_template_name(base) for base in DEFAULT_INLINE_BASES if base in TEMPLATES]


register_default_inline_templates()
MODULE_READY = True
