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

r"""The number check every validator uses (`validation.py`, and the rewards layer below it)."""

import math
from typing import Any


def check_number(
    name: str,
    value: Any,
    *,
    integer: bool = False,
    minimum: float = 0,
    inclusive: bool = False,
    allow_none: bool = False,
) -> Any:
    r"""Validate a numeric setting and return it as `int`/`float` (None passes when `allow_none`).

    Args:
        name: the setting's name, used in the message (e.g. `timeout_s` or `agentic_python_timeout`).
        value: the value to check; booleans and strings are rejected.
        integer: require a whole number (returned as `int`).
        minimum: lower bound; `value` must be greater than it (or equal when `inclusive`).
        inclusive: whether `minimum` itself is allowed.
        allow_none: whether None (no limit) is allowed.

    Raises:
        ValueError: naming the setting, the bound and the value received.
    """
    if value is None and allow_none:
        return None
    kind = "a whole number" if integer else "a number"
    bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and integer and value != int(value):
        ok = False
    if ok:
        ok = value >= minimum if inclusive else value > minimum
    if not ok:
        none = " or null (no limit)" if allow_none else ""
        raise ValueError(f"`{name}` must be {kind} {bound}{none}, got {value!r}")
    return int(value) if integer else float(value)
