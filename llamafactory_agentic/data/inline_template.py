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

r"""Inline-tag variants of LLaMA-Factory chat templates (spec section 2, "LLaMA-Factory view").

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
from llamafactory.data.template import ReasoningTemplate, Template

from .tags import OBSERVATION_PREFIX, OBSERVATION_SUFFIX


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


def is_inline_template(template: Template) -> bool:
    r"""Whether `template` renders observations as inline `<result>` blocks (built by `build_inline_template`)."""
    slots = getattr(template.format_observation, "slots", [])
    return slots == [OBSERVATION_PREFIX + "{{content}}" + OBSERVATION_SUFFIX]


from ..integration.data_registration import register_default_inline_templates  # noqa: E402


register_default_inline_templates()  # see `register_data_extensions` (the activation hook may skip this module)
MODULE_READY = True
