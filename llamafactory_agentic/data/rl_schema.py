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

r"""Validation and normalisation of one RL row in the verl layout of the ARPO files (docs/algorithms.md §8.1).

Columns: `data_source` (str), `prompt` (list of `{role, content}`: system, user), `ability` (str or null),
`reward_model` (`{ground_truth, style}`), `extra_info` (`{index, question, split, need_tools_kwargs}`), `metadata`.
Other exports store `prompt`, `reward_model`, `extra_info` (and `metadata`) as JSON or Python-literal strings; both are
decoded here. Nothing here imports torch or LLaMA-Factory.
"""

import ast
import json
import math
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from .tags import repair_boxed


PROMPT_COLUMN = "prompt"
KNOWN_COLUMNS = ("data_source", PROMPT_COLUMN, "ability", "reward_model")
_ROLES = ("system", "user", "assistant")
MAX_PLAIN_EXPONENT = 30  # numbers beyond 1e30 / below 1e-30 keep their exponent form


class RLRowError(ValueError):
    r"""A malformed RL row.

    Attributes:
        field: Dotted path of the bad field, e.g. `reward_model.ground_truth` or `prompt[1].content`.
        problem: What is wrong with it, e.g. `is empty`.
    """

    def __init__(self, field: str, problem: str):
        r"""Build the error `field <field> <problem>`."""
        super().__init__(f"field {field} {problem}")
        self.field = field
        self.problem = problem


@dataclass
class RLRow:
    r"""A validated RL row.

    Attributes:
        messages: User/assistant messages (the system message removed), alternating, ending with a user message.
        system: Content of the leading system message ("" when there is none).
        ground_truth: The reference answer; a list of aliases is JSON-encoded, a number written in canonical form
            (`format_number`: `10.0` -> `"10"`).
        data_source: `data_source` ("" when absent or null).
        ability: `ability` ("" when absent or null).
        extra: Every other column (`extra_info`, `metadata`, unknown columns, decoded when they were JSON/Python-literal
            strings) plus `reward_model` without its `ground_truth`.
        boxed_repairs: Number of `\x08oxed` occurrences in the messages (replaced when the row was parsed with
            `repair=True`).
    """

    messages: list[dict[str, str]]
    system: str
    ground_truth: str
    data_source: str
    ability: str
    extra: dict[str, Any] = field(default_factory=dict)
    boxed_repairs: int = 0


def decode_literal(value: Any) -> Any:
    r"""Decode a JSON or Python-literal string (`"{'a': 1}"`, `'[{"role": ...}]'`); other values pass unchanged.

    numpy arrays (pandas exports) become lists.

    Raises:
        ValueError: if `value` is a string that is neither JSON nor a Python literal.
    """
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()

    if not isinstance(value, str):
        return value

    text = value.strip()
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        pass

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as err:
        raise ValueError(f"is a string that is neither JSON nor a Python literal ({type(err).__name__})") from None


def _decode_field(value: Any, name: str, expected: type | tuple[type, ...], expected_text: str) -> Any:
    try:
        decoded = decode_literal(value)
    except ValueError as err:
        raise RLRowError(name, f"{err}; expected {expected_text}") from None

    if decoded is None:
        raise RLRowError(name, "is missing")

    if not isinstance(decoded, expected):
        raise RLRowError(name, f"must be {expected_text}, got {type(decoded).__name__}")

    return decoded


def _optional_text(row: dict[str, Any], name: str) -> str:
    value = row.get(name)
    if value is None:
        return ""

    if not isinstance(value, str):
        raise RLRowError(name, f"must be a string or null, got {type(value).__name__}")

    return "" if value == "None" else value


def _decode_extra(value: Any) -> Any:
    r"""Decode an extra column that holds a JSON / Python-literal container or null; other values stay as they are."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()

    if isinstance(value, str):
        text = value.strip()
        if text in ("None", "null"):
            return None

        if text[:1] in ("{", "["):
            try:
                return decode_literal(text)
            except ValueError:
                return value

    return value


def canonical_decimal(text: str) -> str | None:
    r"""Canonical decimal form of a number written with digits: no trailing fractional zeros, no exponent, no commas.

    `"10.50"` -> `"10.5"`, `"10.0"` -> `"10"`, `"1e3"` -> `"1000"`, `"1,000.5"` -> `"1000.5"`, `"-0.0"` -> `"0"`.
    Used for numeric ground truths (`format_number`) and by the F1 / exact-match normalisation of the rewards, so a
    stored `10.0` and an answer `10` compare equal.

    Args:
        text: The number as written (digits, optional thousands commas, fraction and exponent; no surrounding text).

    Returns:
        The canonical text, or None when `text` is not a finite number or its decimal exponent is beyond
        +-`MAX_PLAIN_EXPONENT` (it would expand to more than 30 digits).
    """
    try:
        number = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None

    if not number.is_finite():
        return None

    if number.is_zero():
        return "0"

    number = number.normalize()
    if abs(number.adjusted()) > MAX_PLAIN_EXPONENT:
        return None

    return format(number, "f")


def format_number(value: int | float) -> str:
    r"""Text of a numeric ground truth: `10.0` -> `"10"`, `10.5` -> `"10.5"`, `1e3` -> `"1000"`, `7` -> `"7"`.

    Floats are written from their shortest round-trip representation (`repr`) in canonical decimal form
    (`canonical_decimal`); beyond 1e30 they keep the exponent (`1e+40`).

    Raises:
        ValueError: for NaN or an infinite value.
    """
    if isinstance(value, int):
        return str(value)

    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")

    text = repr(float(value))
    return canonical_decimal(text) or text


def _non_finite(value: float) -> str:
    if math.isnan(value):
        return "is NaN (a missing value in a numeric column?)"

    return f"is {value!r} (not a finite number)"


def normalize_ground_truth(value: Any, name: str = "reward_model.ground_truth") -> str:
    r"""The ground truth as one string: text unchanged, a number in canonical form, a list of aliases JSON-encoded.

    Numbers (ints, floats, numpy scalars) are written with `format_number` (`10.0` -> `"10"`), also inside a list of
    aliases; text is stored as given (the rewards compare numbers written in text in canonical form).

    Raises:
        RLRowError: if it is missing, empty (also whitespace only or an empty list), NaN or infinite (also as a list
            item, named `ground_truth[i]`) or of another type.
    """
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()

    if value is None:
        raise RLRowError(name, "is missing")

    if isinstance(value, bool):
        raise RLRowError(name, "must be a string, a number or a list of strings, got bool")

    if isinstance(value, str):
        if not value.strip():
            raise RLRowError(name, "is empty")

        return value

    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise RLRowError(name, _non_finite(value))

        return format_number(value)

    if isinstance(value, (list, tuple)):
        aliases = []
        for idx, item in enumerate(value):
            if isinstance(item, float) and not math.isfinite(item):
                raise RLRowError(f"{name}[{idx}]", _non_finite(item))

            if isinstance(item, (int, float)) and not isinstance(item, bool):
                aliases.append(format_number(item))
            elif item is not None and str(item).strip():
                aliases.append(str(item))

        if not aliases:
            raise RLRowError(name, "is empty")

        return json.dumps(aliases, ensure_ascii=False)

    raise RLRowError(name, f"must be a string, a number or a list of strings, got {type(value).__name__}")


def parse_rl_row(row: dict[str, Any], prompt_column: str = PROMPT_COLUMN, repair: bool = True) -> RLRow:
    r"""Validate one raw RL row and bring it to the plugin's layout.

    Checks, in this order: `prompt` present, decodable, a non-empty list of `{role, content}` dicts with string role
    and content, roles in system/user/assistant, a system message only first, the rest alternating user/assistant and
    ending with a user message with non-empty content; `reward_model` a dict (or its JSON / Python-literal string) with
    a non-empty `ground_truth`; `data_source` and `ability` strings or null.

    Args:
        row: One dataset row as a dict of column values.
        prompt_column: Name of the chat-messages column.
        repair: Replace `\x08oxed` with `\boxed` in every message (docs/algorithms.md §2.8, `agentic_repair_boxed`).

    Returns:
        The validated `RLRow`.

    Raises:
        RLRowError: naming the first bad field.
    """
    if prompt_column not in row or row[prompt_column] is None:
        raise RLRowError(prompt_column, "is missing")

    prompt = _decode_field(row[prompt_column], prompt_column, list, "a list of {role, content} messages")
    if not prompt:
        raise RLRowError(prompt_column, "is empty")

    system = ""
    messages: list[dict[str, str]] = []
    repairs = 0
    for idx, message in enumerate(prompt):
        name = f"{prompt_column}[{idx}]"
        if not isinstance(message, dict):
            raise RLRowError(name, f"must be a {{role, content}} dict, got {type(message).__name__}")

        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str):
            raise RLRowError(
                f"{name}.role", "is missing" if role is None else f"must be a string, got {type(role).__name__}"
            )

        if role not in _ROLES:
            raise RLRowError(f"{name}.role", f"is {role!r}; expected one of {', '.join(_ROLES)}")

        if not isinstance(content, str):
            problem = "is missing" if content is None else f"must be a string, got {type(content).__name__}"
            raise RLRowError(f"{name}.content", problem)

        if repair:
            content, count = repair_boxed(content)
            repairs += count
        else:
            repairs += content.count("\x08oxed")

        if role == "system":
            if idx != 0:
                raise RLRowError(f"{name}.role", "is 'system' but only the first message may be the system prompt")

            system = content
            continue

        expected = "user" if len(messages) % 2 == 0 else "assistant"
        if role != expected:
            raise RLRowError(
                f"{name}.role", f"is {role!r}; messages after the system prompt must alternate user/assistant"
            )

        if role == "user" and not content.strip():
            raise RLRowError(f"{name}.content", "is empty")

        messages.append({"role": role, "content": content})

    if not messages:
        raise RLRowError(prompt_column, "has no user message")

    if messages[-1]["role"] != "user":
        raise RLRowError(prompt_column, "must end with a user message (the question)")

    if "reward_model" not in row or row["reward_model"] is None:
        raise RLRowError("reward_model", "is missing")

    reward_model = _decode_field(row["reward_model"], "reward_model", dict, "a {ground_truth, style} dict")
    ground_truth = normalize_ground_truth(reward_model.get("ground_truth"))
    data_source = _optional_text(row, "data_source")
    ability = _optional_text(row, "ability")

    extra: dict[str, Any] = {}
    for name, value in row.items():
        if name in KNOWN_COLUMNS or name == prompt_column:
            continue

        extra[name] = _decode_extra(value)

    rest = {key: value for key, value in reward_model.items() if key != "ground_truth"}
    if rest:
        extra["reward_model"] = rest

    return RLRow(
        messages=messages,
        system=system,
        ground_truth=ground_truth,
        data_source=data_source,
        ability=ability,
        extra=extra,
        boxed_repairs=repairs,
    )


def dump_extra(extra: dict[str, Any]) -> str:
    r"""JSON text of the extra columns (non-JSON values such as timestamps written with `str`)."""
    return json.dumps(extra, ensure_ascii=False, default=str)
