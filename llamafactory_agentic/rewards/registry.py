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

r"""Reward functions by name: `f1` (reference), `em`, `math`, or a user function given as `module:function`.

Documented in docs/algorithms.md §6; config keys `agentic_reward` and `agentic_reward_math`.
"""

import asyncio
import importlib
import inspect
import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..hparams import REWARD_TIMEOUT_S, REWARD_TOOL_BONUS, REWARD_WORKERS
from .deep_research import (
    answered_tool_calls,
    exact_match_score,
    extract_answer_span,
    extract_boxed_answer,
    f1_score,
    validate_format,
)
from .math_equivalence import math_verify_score


MATH_MODES = ("f1", "math_verify", "max")
TOOL_BONUS = REWARD_TOOL_BONUS  # agentic_reward_tool_bonus, declared in hparams.py
FORMAT_PENALTY = -1.0
# rewards become float32 tensors for the advantages (train/arpo/batch.py): a score must be finite in that dtype
FLOAT32_MAX = 3.4028234663852886e38
# `ToolCallRecord.status` of a call that the tool ran and answered (tools/base.py): output (`ok`), nothing found or
# printed (`empty`), an error such as a Python exception (`error`) or its time limit (`timeout`). A call that was not
# run has no other status: `limit`/`repeat` (a notice instead), `unknown_tool`, `cache_miss` (replay search), and an
# empty call (blank content, recorded as `empty` by the agent loop, hence the content check in `executed_tools`)
EXECUTED_STATUSES = frozenset({"ok", "empty", "error", "timeout"})
# metadata key with the tools of the executed calls (`executed_tools`), set by every caller that has the rollout
EXECUTED_TOOLS_KEY = "executed_tools"


def executed_tools(tool_calls: Iterable[Any]) -> list[str]:
    r"""Tools of the calls that executed and returned an observation, in call order (docs/algorithms.md §6.4).

    A call counts when its content is not blank and its status is in `EXECUTED_STATUSES`: the tool ran and its answer
    is the observation (output, "no results", a traceback or the timeout message; a cache hit included). Empty calls
    and bare closing tags (blank content), calls past a limit or repeated (a notice instead), unknown tools and
    replay-cache misses count nothing.

    Args:
        tool_calls: `ToolCallRecord`s of a trajectory (`Trajectory.tool_calls`; any objects with `tool`, `content`
            and `status`).

    Returns:
        Tool names, e.g. `["search", "python"]`.
    """
    return [c.tool for c in tool_calls if str(c.content).strip() and c.status in EXECUTED_STATUSES]


def check_score(name: str, score: Any) -> float:
    r"""A reward score as a float that stays finite in float32, the dtype the advantages are computed from.

    Args:
        name: The reward's name (`agentic_reward`), used in the error.
        score: What the reward returned.

    Returns:
        `float(score)`.

    Raises:
        TypeError: the score is not a number (None, a list, a bool) or is NaN or infinite.
        ValueError: the score is finite in float64 but not in float32 (|score| > 3.4e38, e.g. 1e308), where it would
            become inf and turn the advantages, the gradients and then every weight into NaN.
    """
    if isinstance(score, numbers.Integral) and not isinstance(score, bool) and abs(score) > FLOAT32_MAX:
        raise ValueError(_overflow_message(name, "an integer of more than 38 digits"))
    if isinstance(score, bool) or not isinstance(score, numbers.Real) or not math.isfinite(score):
        raise TypeError(f"reward function {name} returned a non-finite or non-numeric score {score!r}.")
    value = float(score)
    if abs(value) > FLOAT32_MAX:
        raise ValueError(_overflow_message(name, repr(value)))
    return value


def _overflow_message(name: str, what: str) -> str:
    return (
        f"reward function {name} returned {what}, which is inf in float32 (the dtype of the rewards and advantages "
        f"in training, where it would turn every weight into NaN); keep scores within +-{FLOAT32_MAX:.4g} (the "
        "reference scale is [-1, 1.1])."
    )


@dataclass
class RewardResult:
    r"""Outcome of one reward computation.

    Attributes:
        score: The scalar reward (reference range [-1, 1.1]).
        correctness: Correctness in [0, 1] before the bonus (0 when the format gate or extraction failed).
        answer: The extracted boxed answer, or None.
        reason: Short human-readable reason (format failure, "correct", "wrong answer", ...).
        format_ok: Whether the format gate and the extraction passed.
        components: Unweighted score of every component of a compound reward (`agentic_reward_funcs`), by name;
            empty for a single reward.
    """

    score: float
    correctness: float = 0.0
    answer: str | None = None
    reason: str = ""
    format_ok: bool = False
    components: dict[str, float] = field(default_factory=dict)


def accepts_context(fn: Callable) -> bool:
    r"""Whether a reward callable takes the trajectory's `RewardContext` (docs/rewards.md).

    A function receives the context when it has a parameter named `context`, or a required (no default) fourth
    positional parameter: `fn(model_text, ground_truth, metadata, context)`. The old `fn(model_text, ground_truth,
    metadata)` does not, nor does one whose further parameters all have defaults or are `*args`: it is called with the
    three arguments as before.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without an introspectable signature: the old three arguments
        return False
    if "context" in signature.parameters:
        return True
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    return len(positional) >= 4 and positional[3].default is inspect.Parameter.empty


def is_async_reward(fn: Callable) -> bool:
    r"""Whether calling `fn` returns a coroutine (`async def`, also as `__call__` of an object)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


class RewardFunction:
    r"""A reward over the model view of one response.

    Call as `reward(model_text, ground_truth, metadata) -> float`; `compute` returns the full `RewardResult`.
    `metadata` carries at least `data_source` and `ability` (either may be missing or None).

    Attributes:
        call_timeout_s: Per-call deadline of a user reward in `score_batch` (`agentic_reward_timeout`; the built-in
            rewards of this package run without one: they have their own, e.g. math-verify's).
        call_workers: Threads for the calls of a synchronous user reward (`agentic_reward_workers`).
    """

    name = "base"
    call_timeout_s: float = REWARD_TIMEOUT_S
    call_workers: int = REWARD_WORKERS

    def compute(self, model_text: str, ground_truth: Any, metadata: dict | None = None) -> RewardResult:
        r"""Full result of the reward; subclasses implement it."""
        raise NotImplementedError

    def __call__(self, model_text: str, ground_truth: Any, metadata: dict | None = None) -> float:
        r"""The scalar reward of `model_text` against `ground_truth` (str, list of str, or see `normalize_ground_truths`)."""
        return self.compute(model_text, ground_truth, metadata).score


class DeepResearchReward(RewardFunction):
    r"""The reference deep-research reward with a choice of correctness measure.

    1. Format gate (`validate_format`) -> -1 on failure.
    2. Extraction: the last `\boxed` in the first `<answer>...</answer>` -> -1 on failure.
    3. Correctness c: token F1 (`f1`), exact match (`em`) or math-verify equivalence (`math`, every row). For rows
       with `metadata["ability"] == "math"`, `math_mode` overrides it: `f1` keeps c, `math_verify` uses the
       math-verify result, `max` uses max(c, math-verify).
    4. Score: c > 0 and both search and python executed -> c + bonus (0.1, the reference's, or
       `agentic_reward_tool_bonus`); c > 0 -> c; else 0. The executed calls are `metadata["executed_tools"]`
       (`executed_tools` of the trajectory's records, which training and evaluation pass); without that key the
       model view is read (`answered_tool_calls`: calls with a body and a result). The reference counts the closing
       tags, so bare `</search></python>` earned the bonus (issue 24).

    Source: docs/algorithms.md §6; RUC-NLPIR/ARPO `ARPO/verl_arpo_entropy/verl/utils/reward_score/deep_research.py:317-351`.
    """

    def __init__(self, correctness: str = "f1", math_mode: str = "f1", tool_bonus: float = TOOL_BONUS) -> None:
        r"""Build the reward.

        Args:
            correctness: `f1`, `em` or `math`.
            math_mode: `f1`, `math_verify` or `max` (`agentic_reward_math`).
            tool_bonus: Added to a correct answer whose trajectory executed both search and python
                (`agentic_reward_tool_bonus`; the reference's 0.1 by default, 0 turns it off).

        Raises:
            ValueError: unknown `correctness` or `math_mode`, or a negative or non-finite `tool_bonus`.
        """
        if correctness not in ("f1", "em", "math"):
            raise ValueError(f"unknown correctness measure {correctness!r}; expected f1, em or math.")
        if math_mode not in MATH_MODES:
            raise ValueError(f"unknown math mode {math_mode!r}; expected one of {MATH_MODES}.")
        self.tool_bonus = _checked_bonus(tool_bonus)
        self.correctness = correctness
        self.math_mode = math_mode
        self.name = correctness

    def _correctness(self, answer: str, ground_truth: Any, metadata: dict) -> float:
        if self.correctness == "math":
            return math_verify_score(answer, ground_truth)
        base = f1_score(answer, ground_truth) if self.correctness == "f1" else exact_match_score(answer, ground_truth)
        if metadata.get("ability") != "math" or self.math_mode == "f1":
            return base
        verified = math_verify_score(answer, ground_truth)
        return verified if self.math_mode == "math_verify" else max(base, verified)

    def compute(self, model_text: str, ground_truth: Any, metadata: dict | None = None) -> RewardResult:
        r"""Full result (score, correctness, extracted answer, reason) for one model view."""
        metadata = metadata or {}
        ok, reason = validate_format(model_text)
        if not ok:
            return RewardResult(score=FORMAT_PENALTY, reason=f"bad format: {reason}")
        answer_span = extract_answer_span(model_text)
        answer = extract_boxed_answer(answer_span) if answer_span is not None else None
        if answer is None:
            return RewardResult(score=FORMAT_PENALTY, reason="cannot extract a \\boxed answer")
        correctness = float(self._correctness(answer, ground_truth, metadata))
        if correctness > 0 and self.tool_bonus and _used_search_and_python(model_text, metadata):
            score = correctness + self.tool_bonus
            return RewardResult(score, correctness, answer, "correct, used search and python", True)
        if correctness > 0:
            return RewardResult(correctness, correctness, answer, "correct", True)
        return RewardResult(0.0, 0.0, answer, "wrong answer", True)


def _used_search_and_python(model_text: str, metadata: dict) -> bool:
    r"""Whether both search and python executed: from `metadata["executed_tools"]`, else from the model view."""
    tools = metadata.get(EXECUTED_TOOLS_KEY)
    if tools is None:
        tools = answered_tool_calls(model_text)
    return {"search", "python"} <= set(tools)


class CallableReward(RewardFunction):
    r"""A user reward function as a `RewardFunction`.

    The function is called as `fn(model_text, ground_truth, metadata)`, or with the trajectory's `RewardContext` as
    well when its signature takes one (`accepts_context`: a parameter named `context` or a fourth positional one), and
    returns a number, a dict with `score`, or a `RewardResult`; an `async def` function is awaited (`score_batch` runs
    the calls of a whole batch concurrently). A `RewardResult` is used as returned. For a number or a dict the other
    fields are derived from the score on the reference scale (docs/algorithms.md §6: -1 = bad format, 1 = fully
    correct): `format_ok = score > -1` and `correctness = clip(score, 0, 1)`, so `reward/format_ok_rate` and
    `reward/accuracy` (`correctness == 1`, i.e. score >= 1) are meaningful for user rewards too.
    """

    def __init__(self, fn: Callable, name: str) -> None:
        r"""Wrap `fn` under `name`."""
        self.fn = fn
        self.name = name
        self.wants_context = accepts_context(fn)
        self.is_async = is_async_reward(fn)

    def _call(self, model_text: str, ground_truth: Any, metadata: dict | None, context: Any) -> Any:
        if not self.wants_context:
            return self.fn(model_text, ground_truth, metadata or {})
        if "context" in inspect.signature(self.fn).parameters:
            return self.fn(model_text, ground_truth, metadata or {}, context=context)
        return self.fn(model_text, ground_truth, metadata or {}, context)

    async def compute_async(
        self, model_text: str, ground_truth: Any, metadata: dict | None = None, context: Any = None
    ) -> RewardResult:
        r"""`compute` for an `async def` function (a sync function is called directly)."""
        value = self._call(model_text, ground_truth, metadata, context)
        if inspect.isawaitable(value):
            value = await value
        return self.result(value)

    def compute(
        self, model_text: str, ground_truth: Any, metadata: dict | None = None, context: Any = None
    ) -> RewardResult:
        r"""Call the user function and check its result (an `async def` one runs in its own event loop).

        Raises:
            TypeError: the function returned something that is not a finite number (or a dict/RewardResult with one).
            ValueError: a score that is finite but overflows float32 (|score| > 3.4e38), see `check_score`.
        """
        if self.is_async:
            return asyncio.run(self.compute_async(model_text, ground_truth, metadata, context))
        return self.result(self._call(model_text, ground_truth, metadata, context))

    def result(self, value: Any) -> RewardResult:
        r"""The checked `RewardResult` of what the user function returned (see the class docstring)."""
        if isinstance(value, RewardResult):
            result = value
        elif isinstance(value, dict):
            if "score" not in value:
                raise TypeError(f"reward function {self.name} returned a dict without 'score': {sorted(value)}.")
            result = RewardResult(score=value["score"], reason=str(value.get("reason", "")))
        else:
            result = RewardResult(score=value)
        result.score = check_score(self.name, result.score)
        if not isinstance(value, RewardResult):
            result.format_ok = result.score > FORMAT_PENALTY
            result.correctness = min(max(result.score, 0.0), 1.0)
        return result


BUILT_IN_REWARDS = ("f1", "em", "math")
# name -> factory(math_mode, tool_bonus); a built-in name re-registered with overwrite=True becomes the user's
_REWARD_FACTORIES: dict[str, Callable[[str, float], RewardFunction]] = {
    name: (lambda math_mode, tool_bonus, name=name: DeepResearchReward(name, math_mode, tool_bonus))
    for name in BUILT_IN_REWARDS
}
_USER_REWARDS: set[str] = set()


def register_reward_function(name: str, overwrite: bool = False) -> Callable:
    r"""Decorator registering a reward under `name` for `get_reward_function`.

    The decorated object is either a `RewardFunction` subclass (instantiated without arguments on every lookup) or a
    plain function `fn(model_text, ground_truth, metadata) -> float` (wrapped in `CallableReward`).

    Raises:
        ValueError: empty name, a name containing `:` (reserved for import paths), or a name already registered.
    """
    if not name or ":" in name:
        raise ValueError(f"invalid reward name {name!r}.")

    def decorator(obj: Callable) -> Callable:
        if name in _REWARD_FACTORIES and not overwrite:
            raise ValueError(f"reward {name!r} is already registered.")
        if isinstance(obj, type) and issubclass(obj, RewardFunction):
            _REWARD_FACTORIES[name] = lambda math_mode, tool_bonus: obj()
        else:
            _REWARD_FACTORIES[name] = lambda math_mode, tool_bonus: CallableReward(obj, name)
        _USER_REWARDS.add(name)
        return obj

    return decorator


def list_reward_functions() -> list[str]:
    r"""Sorted names of the registered rewards (import paths `module:function` work in addition)."""
    return sorted(_REWARD_FACTORIES)


def load_callable(path: str) -> Callable:
    r"""Import `module:function` (the attribute part may be dotted, e.g. `pkg.mod:Class.method`).

    Raises:
        ValueError: `path` is not of the form `module:attribute`, the module cannot be imported, or the attribute is
            missing or not callable.
    """
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected 'module:function', got {path!r}.")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as err:
        if isinstance(err, ModuleNotFoundError) and err.name == module_name.split(".")[0]:  # not on the path: one line
            raise ValueError(
                f"cannot import reward module {module_name!r}: {err}; install the package that provides it or put its "
                f"folder on PYTHONPATH (e.g. `export PYTHONPATH=$PWD` in the folder of {module_name.split('.')[0]}.py)"
            ) from None
        raise ValueError(f"cannot import reward module {module_name!r}: {err}") from err  # the module's own error
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{module_name!r} has no attribute {attribute!r}.")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{path!r} is not callable.")
    return target


def _checked_bonus(tool_bonus: Any) -> float:
    try:
        bonus = float(tool_bonus)
    except (TypeError, ValueError):
        bonus = math.nan  # "high", None, a list: refused below with the key's name
    if isinstance(tool_bonus, bool) or not math.isfinite(bonus) or bonus < 0 or bonus + 1.1 > FLOAT32_MAX:
        raise ValueError(
            f"agentic_reward_tool_bonus must be a finite number >= 0 (and finite in float32), got {tool_bonus!r}."
        )
    return bonus


def check_tool_bonus(name: str, tool_bonus: float) -> float:
    r"""Check `agentic_reward_tool_bonus` against the reward it applies to (called before the model loads).

    Returns:
        The bonus as a float.

    Raises:
        ValueError: a negative or non-finite bonus (also in float32), or a bonus other than the default (0.1) with a
            reward that is not built in (`f1`, `em`, `math`), which computes its own score.
    """
    bonus = _checked_bonus(tool_bonus)
    if bonus != TOOL_BONUS and (name not in BUILT_IN_REWARDS or name in _USER_REWARDS):
        raise ValueError(
            f"agentic_reward_tool_bonus={bonus} applies to the built-in rewards {', '.join(BUILT_IN_REWARDS)}; "
            f"reward {name!r} computes its own score: remove agentic_reward_tool_bonus or add the bonus in that reward."
        )
    return bonus


def get_reward_function(name: str, math_mode: str = "f1", tool_bonus: float = TOOL_BONUS) -> RewardFunction:
    r"""The reward named by `agentic_reward`, with `agentic_reward_math` applied to built-in rewards.

    Args:
        name: `f1` (reference F1 reward), `em` (exact match, same gate and bonus), `math` (math-verify correctness on
            every row, same gate and bonus), another registered name, or `module:function` (a user function
            `fn(model_text, ground_truth, metadata) -> float`; `math_mode` does not apply to it).
        math_mode: `f1`, `math_verify` or `max` for rows with `ability == "math"`.
        tool_bonus: The built-in rewards' bonus for a correct answer that used both search and python
            (`agentic_reward_tool_bonus`, default 0.1 as the reference); other rewards compute their own score.

    Returns:
        A `RewardFunction`.

    Raises:
        ValueError: unknown name or math mode, an import path that cannot be loaded, a negative or non-finite
            `tool_bonus`, or a `tool_bonus` other than the default for a reward that is not built in.
    """
    if math_mode not in MATH_MODES:
        raise ValueError(f"unknown math mode {math_mode!r}; expected one of {MATH_MODES}.")
    tool_bonus = check_tool_bonus(name, tool_bonus)
    if ":" in name:
        return CallableReward(load_callable(name), name)
    if name not in _REWARD_FACTORIES:
        raise ValueError(f"unknown reward {name!r}; registered: {list_reward_functions()} (or use 'module:function').")
    return _REWARD_FACTORIES[name](math_mode, tool_bonus)


def check_reward_arguments(
    name: str,
    math_mode: str = "f1",
    tool_bonus: float = TOOL_BONUS,
    reward_funcs: str | None = None,
    judge: dict[str, Any] | None = None,
) -> RewardFunction:
    r"""Build the reward of `agentic_reward` (or `agentic_reward_funcs`) and check that it can be called.

    Run when the arguments are parsed, before any model loads. Everything `get_reward_function` checks (known name,
    importable `module:function`, math mode, tool bonus) plus the signature of every user function: it must accept
    `(model_text, ground_truth, metadata)` as three positional arguments, or those and the `RewardContext` (a fourth
    positional argument or one named `context`). With `reward_funcs`, every entry is checked the same way, its weight
    too, and the judge settings when an entry is `judge` (`rewards.compound.build_reward`; no judge call is made).
    Nothing is scored, so a user function is never called here.

    Args:
        name: `agentic_reward`.
        math_mode: `agentic_reward_math`.
        tool_bonus: `agentic_reward_tool_bonus`.
        reward_funcs: `agentic_reward_funcs` (None: the single reward `name`).
        judge: The judge settings (`JudgeSettings` fields: `base_url`, `model`, `cache`, `api_key_env`).

    Returns:
        The reward (the run builds its own again after the model loads).

    Raises:
        ValueError: naming `agentic_reward` / `agentic_reward_funcs` (or the bonus or judge key) and the fix: an
            unknown name, a module that cannot be imported, a missing attribute, a function that cannot take the
            arguments, a bad weight or entry, or a judge entry without `agentic_reward_judge_url`/`_model`.
    """
    if reward_funcs:
        from .compound import build_reward

        return build_reward(name, math_mode, tool_bonus, reward_funcs, judge, connect=False)
    try:
        reward = get_reward_function(name, math_mode, tool_bonus)
    except ValueError as err:
        if "agentic_reward_tool_bonus" in str(err):  # names its key already
            raise
        raise ValueError(f"`agentic_reward: {name}`: {err}") from err.__cause__  # one traceback, the cause's kept
    check_reward_signature(reward, f"`agentic_reward: {name}`")
    return reward


def check_reward_signature(reward: RewardFunction, where: str) -> None:
    r"""Check that the reward's function can take `(model_text, ground_truth, metadata[, context])`.

    Args:
        reward: A built reward (`CallableReward` checks its `fn`, any other its `compute`).
        where: The key and value for the message, e.g. "`agentic_reward: mod:fn`".

    Raises:
        ValueError: naming `where`, the signature found and the fix.
    """
    fn = reward.fn if isinstance(reward, CallableReward) else reward.compute
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function without an introspectable signature
        return
    args: tuple = ("model text", "ground truth", {})
    context = accepts_context(fn)
    try:
        if "context" in signature.parameters:
            signature.bind(*args, context=None)
        elif context:
            signature.bind(*args, None)
        else:
            signature.bind(*args)
    except TypeError as err:
        raise ValueError(
            f"{where}: the reward is called as fn(model_text, ground_truth, metadata), but "
            f"{getattr(fn, '__qualname__', fn)}{signature} cannot take those {'four' if context else 'three'} "
            f"arguments ({err}); give it that "
            "signature, or fn(model_text, ground_truth, metadata, context) to receive the trajectory's RewardContext "
            "(docs/rewards.md)."
        ) from err
