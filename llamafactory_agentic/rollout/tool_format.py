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

r"""How the rollout recognises a tool call and inserts its observation (docs/algorithms.md §2.2, §2.7; docs/tools.md).

Two formats, chosen by `agentic_tool_protocol` (the key that also picks the agentic SFT view):

* `inline_tags` (`InlineTagFormat`, ARPO's format): a call is `<tag> body </tag>` for the tag of any configured tool
  (built-in or `module:Class`), the rollout stops on each tool's closing tag, and the observation is the text
  `" <result>\n…\n</result>"`.
* `template` (`NativeToolFormat`): the chat template's own JSON tool calls (Qwen2.5/Qwen3
  `<tool_call>{"name": …, "arguments": …}</tool_call>`, Llama 3.1 `{"name": …, "parameters": …}`). The model ends its
  turn with the end-of-turn token; a turn whose text the template's tool extractor (LLaMA-Factory's
  `tool_utils.ToolUtils.tool_extractor`) reads as a call is executed, and the observation is the template's tool
  message (`format_observation`, e.g. Qwen's `<|im_start|>user\n<tool_response>\n…\n</tool_response><|im_end|>\n
  <|im_start|>assistant\n`), preceded by what the template writes after the end-of-turn token of a function turn
  (Qwen's `\n`). A turn with several calls runs all of them and gets one tool message whose content is their
  results, in call order, joined by `NativeToolFormat.result_separator` (docs/tools.md "Several calls in one turn").
  The ids equal those of LLaMA-Factory's SFT rendering of the same conversation (`agentic_sft` with
  `agentic_tool_protocol: template`), docs/algorithms.md §2.7 lists the templates and cases.
"""

import json
import re
from collections.abc import Iterable
from typing import Any

from ..common.log import get_logger
from ..data.tags import wrap_observation


logger = get_logger(__name__)


PROTOCOLS = ("inline_tags", "template")
# between two results of one tool message: Qwen's `<tool_response>` blocks (what Qwen2.5/Qwen3's own chat template
# writes for consecutive tool messages: one user turn, one block per result), else a newline
RESPONSE_BLOCK_SEPARATOR = "\n</tool_response>\n<tool_response>\n"
PLAIN_SEPARATOR = "\n"
DEFAULT_TOOL_TAGS = ("search", "python")


def tool_stop_strings(tags: Iterable[str]) -> tuple[str, ...]:
    r"""Closing tags of the given tool tags, in order, without duplicates: `("search", "calc")` -> `("</search>", "</calc>")`."""
    return tuple(f"</{tag}>" for tag in dict.fromkeys(tags))


def executor_tool_tags(executor: Any) -> tuple[str, ...] | None:
    r"""Tags of the tools an executor runs (`ToolExecutor.tools` is keyed by tag), or None if it does not list them."""
    tools = getattr(executor, "tools", None)
    if isinstance(tools, dict) and tools:
        return tuple(str(tag) for tag in tools)
    return None


def call_content(arguments: Any) -> str:
    r"""The call body a `BaseTool` receives for a native call's arguments.

    A mapping with a single string value gives that string (`{"code": "print(1)"}` -> `print(1)`, `{"query": "x"}` ->
    `x`), a string stays as it is, anything else becomes its JSON text (the tool's `parse` reads it).
    """
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict) and len(arguments) == 1:
        (value,) = arguments.values()
        if isinstance(value, str):
            return value
    return json.dumps(arguments, ensure_ascii=False)


class InlineTagFormat:
    r"""ARPO's inline tags for the configured tools (see the module docstring).

    Args:
        tags: The tool tags (`ToolExecutor.tools` keys), e.g. `("python", "search", "calc")`.
    """

    name = "inline_tags"
    calls_end_turn = False

    def __init__(self, tags: Iterable[str]) -> None:
        r"""Create the format (arguments in the class docstring)."""
        self.tags = tuple(dict.fromkeys(tags))
        self.stop_strings = tool_stop_strings(self.tags)

    def observation_ids(self, tokenizer: Any, text: str) -> list[int]:
        r"""Ids of `" <result>\n" + text + "\n</result>"`, special-token text in `text` split into ordinary tokens."""
        return tokenizer(wrap_observation(text), add_special_tokens=False, split_special_tokens=True)["input_ids"]


class NativeToolFormat:
    r"""The chat template's own JSON tool calls (see the module docstring).

    Args:
        template: LLaMA-Factory `Template` whose `format_function` is a `FunctionFormatter` (it has `tool_utils`).
        tokenizer: The policy's tokenizer.

    Raises:
        ValueError: the template has no JSON tool-call formatter, or its function or observation formatter has no
            `{{content}}` slot.
    """

    name = "template"
    calls_end_turn = True
    stop_strings: tuple[str, ...] = ()

    def __init__(self, template: Any, tokenizer: Any) -> None:
        r"""Create the format (arguments in the class docstring)."""
        self.tool_utils = getattr(template.format_function, "tool_utils", None)
        if self.tool_utils is None:
            raise ValueError(
                "agentic_tool_protocol: template needs a template with JSON tool calls (its `format_function` must be "
                "a FunctionFormatter, e.g. qwen, qwen3, llama3); use agentic_tool_protocol: inline_tags otherwise"
            )
        function = _slot_text(template.format_function, "format_function", tokenizer)
        observation = _slot_text(template.format_observation, "format_observation", tokenizer)
        self.call_prefix, after_call = function.split("{{content}}", 1)  # Mistral's `[TOOL_CALLS] `, else ""
        self.thought_words = tuple(getattr(template, "thought_words", None) or ())
        ends = sorted({*template.stop_words, tokenizer.eos_token} - {None, ""}, key=len, reverse=True)
        for end in ends:  # the model samples the end-of-turn token; what the template writes after it is inserted
            if end in after_call:  # (deepseekcoder writes `\n` before it: the model's own text)
                after_call = after_call[after_call.index(end) + len(end) :]
                break
        self.turn_tail = after_call  # written after the end-of-turn token of a function turn (Qwen: "\n")
        self.prefix, self.suffix = observation.split("{{content}}", 1)
        wrapped = self.prefix.endswith("<tool_response>\n") and self.suffix.startswith("\n</tool_response>")
        self.result_separator = RESPONSE_BLOCK_SEPARATOR if wrapped else PLAIN_SEPARATOR
        self.prefix = after_call + self.prefix
        # a reasoning template with `enable_thinking: false` ends every prompt part with the empty thought (masked), as
        # LLaMA-Factory's SFT encoding (`ReasoningTemplate.encode_multiturn`) and the RL prompt do
        thinking_off = getattr(template, "enable_thinking", None) is False and hasattr(
            template, "get_thought_word_ids"
        )
        self.thought_ids: list[int] = list(template.get_thought_word_ids(tokenizer)) if thinking_off else []
        added = {*tokenizer.all_special_tokens, *tokenizer.get_added_vocab()}
        wrapper_tokens = sorted((t for t in added if t and t in self.prefix + self.suffix), key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, wrapper_tokens)) + ")") if wrapper_tokens else None

    def extract(self, text: str) -> list[tuple[str, str]]:
        r"""`(tool, content)` of every call in a turn's text (without its end-of-turn token); [] if none parses.

        The tool is the call's `name`, the content `call_content(arguments)`.
        """
        calls = self.tool_utils.tool_extractor(self._call_text(text))
        if isinstance(calls, str):
            return []
        out = []
        for call in calls:
            try:
                arguments = json.loads(call.arguments)
            except (TypeError, ValueError):
                arguments = call.arguments
            out.append((str(call.name), call_content(arguments)))
        return out

    def _call_text(self, text: str) -> str:
        r"""The part of a turn's text the template's tool extractor reads.

        LLaMA-Factory's function formatter writes `[thought] + calls` inside the function slot (`prefix{{content}}…`);
        its extractors read the calls alone, so a leading slot prefix (Mistral's `[TOOL_CALLS]`) and a leading thought
        (`thought_words`, e.g. `<think>…</think>` before a Llama 3.1 JSON call) are removed first.
        """
        text = text.strip()
        prefix = self.call_prefix.strip()
        if prefix and text.startswith(prefix):
            text = text[len(prefix) :].strip()
        if len(self.thought_words) == 2 and text.startswith(self.thought_words[0].strip()):
            end = text.find(self.thought_words[1].strip())
            if end >= 0:
                text = text[end + len(self.thought_words[1].strip()) :].strip()
        if prefix and text.startswith(prefix):  # Mistral writes the thought after `[TOOL_CALLS]`
            text = text[len(prefix) :].strip()
        return text

    def join_results(self, texts: list[str]) -> str:
        r"""The content of the one tool message that answers a turn's calls: `texts` in call order, joined.

        The separator is `result_separator`: for a template whose tool message wraps its content in
        `<tool_response>\n … \n</tool_response>` (qwen, qwen3, ...) it closes one block and opens the next, so the
        message reads as Qwen's own chat template writes consecutive tool results; for other templates a newline. The
        SFT row of such a turn holds this text as its one `observation` message (LLaMA-Factory's sharegpt format
        alternates `function_call` and `observation` messages), so SFT ids equal RL ids.
        """
        return self.result_separator.join(texts)

    def observation_ids(self, tokenizer: Any, text: str) -> list[int]:
        r"""Ids of the template's tool message around `text` (mask 0 in the rollout).

        The template's own special tokens (`<|im_start|>`, `<|im_end|>`) are real special tokens; special-token text in
        the tool output is split into ordinary tokens (an observation never ends a turn). Text pieces are encoded
        between the special tokens, as LLaMA-Factory's SFT encoding of the same string splits them. A reasoning
        template with `enable_thinking: false` (qwen3) appends its empty thought (`<think>\n\n</think>\n\n`).
        """
        pre = self._split.split(self.prefix) if self._split else [self.prefix]
        suf = self._split.split(self.suffix) if self._split else [self.suffix]
        parts = pre[:-1] + [pre[-1] + text + suf[0]] + suf[1:]
        ids: list[int] = []
        for i, part in enumerate(parts):
            if i % 2:
                ids.append(tokenizer.convert_tokens_to_ids(part))
            elif part:
                ids.extend(tokenizer(part, add_special_tokens=False, split_special_tokens=True)["input_ids"])
        return ids + self.thought_ids


def _slot_text(formatter: Any, name: str, tokenizer: Any) -> str:
    r"""A formatter's slots as text.

    Strings as they are, `{"token": t}` as `t`, `{"eos_token"}` / `{"bos_token"}` as the tokenizer's (e.g. the `default`
    template's tool message `Human: {{content}}</s>\nAssistant:`).
    """
    parts = []
    for slot in getattr(formatter, "slots", []):
        if isinstance(slot, str):
            parts.append(slot)
        elif isinstance(slot, dict) and isinstance(slot.get("token"), str):
            parts.append(slot["token"])
        elif isinstance(slot, set) and "eos_token" in slot:
            parts.append(tokenizer.eos_token or "")
        elif isinstance(slot, set) and "bos_token" in slot:
            parts.append(tokenizer.bos_token or "")
    text = "".join(parts)
    if "{{content}}" not in text:
        raise ValueError(f"agentic_tool_protocol: template: the template's {name} has no {{{{content}}}} slot")
    return text


PARITY_CASES = ("one call", "several calls", "thought")
_PROBE_CALLS = [
    {"name": "search", "arguments": {"query": "first"}},
    {"name": "search", "arguments": {"query": "second"}},
]


def template_parity_issues(template: Any, tokenizer: Any) -> dict[str, str]:
    r"""Why LLaMA-Factory's SFT ids of a native tool-call conversation cannot equal the rollout's, per case.

    Encodes a sample conversation (`PARITY_CASES`: a function turn with one call, with two calls, and with a thought
    before the call) with the template's own `encode_multiturn` (LLaMA-Factory's SFT encoding) and checks what the
    rollout needs to reproduce it (docs/algorithms.md §2.7, the table in docs/tools.md): the encoding succeeds, the
    function turn ends with the tokenizer's EOS token (LLaMA-Factory's `efficient_eos` templates put it into the next
    prompt instead), and the template's tool extractor reads back the calls its function formatter wrote.

    Args:
        template: LLaMA-Factory `Template` (as `get_template_and_fix_tokenizer` returns it; `enable_thinking` set).
        tokenizer: The policy's tokenizer.

    Returns:
        `{case: reason}` for the cases that cannot match; {} when every case can.
    """
    fmt = NativeToolFormat(template, tokenizer)
    think = tuple(getattr(template, "thought_words", None) or ("<think>\n", "\n</think>\n\n"))
    issues: dict[str, str] = {}
    for case in PARITY_CASES:
        calls = _PROBE_CALLS if case == "several calls" else _PROBE_CALLS[:1]
        content = json.dumps(calls if len(calls) > 1 else calls[0])
        if case == "thought":
            content = think[0] + "Look it up." + think[1] + content
        messages = [{"role": "user", "content": "q"}, {"role": "function", "content": content},
                    {"role": "observation", "content": "r"}, {"role": "assistant", "content": "a"}]  # fmt: skip
        try:
            pairs = template.encode_multiturn(tokenizer, messages, None, None)
        except Exception as exc:  # noqa: BLE001 - any failure of LLaMA-Factory's encoding is the reason
            issues[case] = (
                f"LLaMA-Factory's SFT encoding of this template cannot render it ({type(exc).__name__}: {exc})"
            )
            continue
        turn = list(pairs[0][1])
        if getattr(template, "efficient_eos", False):
            issues[case] = ("`efficient_eos`: LLaMA-Factory's SFT writes no end-of-turn token after a function turn, "
                            "the rollout's turn ends with the sampled EOS")  # fmt: skip
        elif tokenizer.eos_token_id not in turn:
            issues[case] = ("the function turn as the template renders it does not end with the tokenizer's EOS token, "
                            "so the rollout cannot tell where the turn ends")  # fmt: skip
        else:
            text = tokenizer.decode(turn[: len(turn) - turn[::-1].index(tokenizer.eos_token_id) - 1])
            if len(fmt.extract(text)) != len(calls):
                issues[case] = ("the template's tool extractor does not read back the calls its function formatter "
                                "writes")  # fmt: skip
    return issues


def warn_parity_issues(template: Any, tokenizer: Any, stage: str) -> dict[str, str]:
    r"""Log one warning per case of `template_parity_issues` at the start of an RL or SFT run; returns the issues."""
    try:
        issues = template_parity_issues(template, tokenizer)
    except Exception as exc:  # noqa: BLE001 - a check that cannot run never stops a run
        logger.warning(f"[agentic-{stage}] could not check native tool-call parity of the template: {exc}")
        return {}
    for case, reason in issues.items():
        logger.warning(
            f"[agentic-{stage}] agentic_tool_protocol: template: SFT ids cannot equal RL ids for a function turn with "
            f"{case if case != 'thought' else 'a thought before the call'}: {reason} (docs/tools.md, template table)"
        )
    return issues


def build_tool_format(
    protocol: str | None, executor: Any = None, template: Any = None, tokenizer: Any = None
) -> "InlineTagFormat | NativeToolFormat":
    r"""The tool-call format of a run (`agentic_tool_protocol`).

    With `template`, the cases in which LLaMA-Factory's SFT ids cannot equal the rollout's are logged as warnings
    (`warn_parity_issues`).

    Args:
        protocol: `inline_tags` (None means it) or `template`.
        executor: The tool executor; `inline_tags` uses its tools' tags (`DEFAULT_TOOL_TAGS` if it lists none).
        template: The run's LLaMA-Factory template (needed for `template`).
        tokenizer: The policy's tokenizer (needed for `template`).

    Raises:
        ValueError: an unknown protocol, or `template` without a template and tokenizer (or with a template that has
            no JSON tool calls).
    """
    protocol = protocol or "inline_tags"
    if protocol == "inline_tags":
        return InlineTagFormat(executor_tool_tags(executor) or DEFAULT_TOOL_TAGS)
    if protocol == "template":
        if template is None or tokenizer is None:
            raise ValueError("agentic_tool_protocol: template needs the run's chat template and tokenizer")
        fmt = NativeToolFormat(template, tokenizer)
        warn_parity_issues(template, tokenizer, "rollout")  # docs/tools.md "Templates and parity"
        return fmt
    raise ValueError(f"agentic_tool_protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
