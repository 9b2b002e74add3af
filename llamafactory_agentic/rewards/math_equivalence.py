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

r"""Math answer equivalence through the math-verify library (`parse` + `verify`).

Documented in docs/algorithms.md §6.3 (`agentic_reward_math`).
"""

import threading
from typing import Any

from ..common.log import get_logger
from .deep_research import normalize_ground_truths


PARSE_TIMEOUT_S = 5
VERIFY_TIMEOUT_S = 5


def _timeouts() -> tuple[int | None, int | None]:
    # math-verify enforces its timeouts with signal.alarm, which only works in the main thread; elsewhere (e.g. a
    # reward worker thread) it would raise, so run without its timeout there.
    if threading.current_thread() is threading.main_thread():
        return PARSE_TIMEOUT_S, VERIFY_TIMEOUT_S
    return None, None


def _boxed(text: str) -> str:
    return "\\boxed{" + text + "}"


def math_verify_score(prediction: str, ground_truths: Any) -> float:
    r"""1.0 if math-verify finds `prediction` equivalent to any reference, else 0.0.

    Both sides are wrapped as `\boxed{...}` before `math_verify.parse` (so plain values like `0.5` and LaTeX like
    `\frac{1}{2}` are both read as expressions), then compared with `math_verify.verify(gold, answer)`. A side that does
    not parse (e.g. the noisy reference `(37`), a parser error or a timeout counts as not equivalent; nothing raises.

    Args:
        prediction: The extracted boxed answer (wrapper already removed).
        ground_truths: Reference(s) in any form `normalize_ground_truths` accepts.

    Returns:
        0.0 or 1.0.
    """
    from math_verify import parse, verify

    parse_timeout, verify_timeout = _timeouts()
    try:
        answer = parse(_boxed(prediction), parsing_timeout=parse_timeout)
    except Exception as err:  # math-verify wraps most errors itself; be defensive about the rest
        get_logger(__name__).debug("math-verify could not parse the prediction %r: %s", prediction, err)
        return 0.0
    if not answer:
        return 0.0
    for reference in normalize_ground_truths(ground_truths):
        try:
            gold = parse(_boxed(reference), parsing_timeout=parse_timeout)
            if gold and verify(gold, answer, timeout_seconds=verify_timeout):
                return 1.0
        except Exception as err:
            get_logger(__name__).debug("math-verify failed on reference %r: %s", reference, err)
    return 0.0
