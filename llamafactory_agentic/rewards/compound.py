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

r"""The reward API for agents (docs/rewards.md).

A typed trajectory context, weighted reward components, batched and concurrent scoring, and an LLM-judge reward:

* `RewardContext`: what a reward sees beside the model view: the tool calls (`ToolCallRecord`: tool, arguments,
  status, latency, cached), the finish reason, the turns, the response and observation lengths, the question.
* `agentic_reward_funcs: "f1:1.0,format:0.2,tool_efficiency:0.1,judge:0.5,my_mod:fn:0.5"`: several rewards, each
  with a weight; the score is the weighted sum and every component is logged as `reward/<name>`.
* `score_batch(reward, items)`: scores a whole generation batch; the components run side by side, a judge's calls and
  an `async def` reward's calls run concurrently, so a slow judge costs about one call per batch, not one per
  trajectory.
* `JudgeReward`: the evaluation's LLM judge (`rewards.judge.LLMJudge`, its prompt, decision rule and SQLite verdict
  cache) as a correctness reward.
"""

import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..common.log import get_logger
from ..common.numbers import check_number
from ..hparams import JUDGE_RETRIES, JUDGE_TIMEOUT_S, agentic_value
from .deadline import run_async_calls, run_sync_calls
from .deep_research import exact_match_score, extract_answer_span, extract_boxed_answer, normalize_ground_truths
from .deep_research import validate_format as _validate_format
from .math_equivalence import math_verify_score
from .registry import (
    BUILT_IN_REWARDS,
    EXECUTED_TOOLS_KEY,
    FLOAT32_MAX,
    TOOL_BONUS,
    CallableReward,
    RewardFunction,
    RewardResult,
    accepts_context,
    check_reward_arguments,
    check_reward_signature,
    check_score,
    executed_tools,
    get_reward_function,
    list_reward_functions,
)


logger = get_logger(__name__)

# metric names `rollout_log_values` already writes under `reward/`: a component may not take one
RESERVED_NAMES = frozenset({"mean", "std", "accuracy", "format_ok_rate", "identical_groups"})
JUDGE_NAME = "judge"
FUNCS_KEY = "agentic_reward_funcs"


@dataclass(frozen=True)
class RewardContext:
    r"""What a reward sees of one trajectory beside its model view (docs/rewards.md).

    Attributes:
        tool_calls: One `rollout.trajectory.ToolCallRecord` per call, in call order (inherited calls of a branch
            first): `tool`, `content` (the call's arguments, the text between the tags), `status` (`ok`, `empty`,
            `error`, `timeout`, `limit`, `repeat`, `unknown_tool`, `cache_miss`), `latency_s` (seconds), `cached`
            (answered from the tool cache), `obs_tokens`, `pos`.
        finish_reason: `eos`, `length`, `call_limit` (and the evaluation settings' `answer`, `round_length`, ...).
        turns: Model turns: tool calls + 1 (every call ends a turn, the last turn ends the response).
        response_tokens: Response length in tokens, observations included.
        observation_tokens: Tokens inserted by tools (loss mask 0).
        generated_tokens: Tokens the model wrote (loss mask 1).
        truncated: The response ran into the response budget.
        hit_call_limit: A turn ended in a call while the call counter was at its limit.
        question: The prompt's last user message (empty when the row has none).
        data_source: The row's `data_source` (may be None).
        ability: The row's `ability` (may be None).
    """

    tool_calls: tuple = ()
    finish_reason: str = ""
    turns: int = 1
    response_tokens: int = 0
    observation_tokens: int = 0
    generated_tokens: int = 0
    truncated: bool = False
    hit_call_limit: bool = False
    question: str = ""
    data_source: str | None = None
    ability: str | None = None

    @property
    def num_tool_calls(self) -> int:
        r"""Number of tool calls (empty calls included)."""
        return len(self.tool_calls)

    @property
    def executed_tools(self) -> list[str]:
        r"""Tools of the calls that ran and returned an observation (`rewards.executed_tools`)."""
        return executed_tools(self.tool_calls)


@dataclass
class RewardItem:
    r"""One trajectory to score: model view, ground truth, metadata and context."""

    text: str
    ground_truth: Any
    metadata: dict[str, Any] = field(default_factory=dict)
    context: RewardContext = field(default_factory=RewardContext)


def question_of(row: dict[str, Any]) -> str:
    r"""The last user message of a row's `_prompt` (a list of `{"role", "content"}`), or ""."""
    messages = row.get("_prompt") or []
    for message in reversed(list(messages)):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content", ""))
    return ""


def build_item(trajectory: Any, row: dict[str, Any], text: str) -> RewardItem:
    r"""The `RewardItem` of one rollout trajectory (`rollout.trajectory.Trajectory`) and its dataset row.

    Args:
        trajectory: Has `tool_calls`, `finish_reason`, `response_ids`, `loss_mask`, `truncated`, `hit_call_limit`.
        row: The dataset row (`_ground_truth`, `_data_source`, `_ability`, `_extra`, `_prompt`).
        text: The trajectory's model view (`rewards.build_model_view`).
    """
    calls = tuple(trajectory.tool_calls or ())
    mask = list(trajectory.loss_mask)
    generated = int(sum(mask))
    metadata = {
        "data_source": row.get("_data_source"),
        "ability": row.get("_ability"),
        "extra": row.get("_extra"),
        EXECUTED_TOOLS_KEY: executed_tools(calls),
    }
    context = RewardContext(
        tool_calls=calls,
        finish_reason=str(getattr(trajectory, "finish_reason", "") or ""),
        turns=len(calls) + 1,
        response_tokens=len(trajectory.response_ids),
        observation_tokens=len(mask) - generated,
        generated_tokens=generated,
        truncated=bool(getattr(trajectory, "truncated", False)),
        hit_call_limit=bool(getattr(trajectory, "hit_call_limit", False)),
        question=question_of(row),
        data_source=row.get("_data_source"),
        ability=row.get("_ability"),
    )
    return RewardItem(text, row.get("_ground_truth"), metadata, context)


# ------------------------------------------------------------------------------------------------ built-in components
class FormatReward(RewardFunction):
    r"""`format`: 1.0 when the response passes the format gate and has a `\boxed` answer in `<answer>`, else 0.0.

    The same gate as the reference reward (`validate_format`, then the boxed answer), as its own component, so that
    a compound reward can pay for the format apart from correctness.
    """

    name = "format"

    def compute(self, model_text: str, ground_truth: Any, metadata: dict | None = None) -> RewardResult:
        r"""1.0 / 0.0 with `format_ok` and the reason."""
        ok, reason = _validate_format(model_text)
        if not ok:
            return RewardResult(0.0, reason=f"bad format: {reason}")
        span = extract_answer_span(model_text)
        answer = extract_boxed_answer(span) if span is not None else None
        if answer is None:
            return RewardResult(0.0, reason="cannot extract a \\boxed answer")
        return RewardResult(1.0, correctness=0.0, answer=answer, reason="format ok", format_ok=True)


class ToolEfficiencyReward(RewardFunction):
    r"""`tool_efficiency`: the share of the trajectory's tool calls that returned something useful, in [0, 1].

    A useful call ran and answered (`status` `ok`, a cache hit included); an empty call, an error, a timeout, a call
    past a limit or repeated, an unknown tool all count as wasted. 1.0 for a trajectory without calls (nothing was
    wasted); a trajectory stopped at the call limit (`hit_call_limit`) loses one more call's share.
    """

    name = "tool_efficiency"

    def compute(
        self, model_text: str, ground_truth: Any, metadata: dict | None = None, context: RewardContext | None = None
    ) -> RewardResult:
        r"""The useful share of the calls (see the class docstring)."""
        calls = tuple(context.tool_calls) if context is not None else ()
        if not calls:
            return RewardResult(1.0, reason="no tool calls")
        useful = sum(1 for c in calls if c.status == "ok" and str(c.content).strip())
        total = len(calls) + (1 if context.hit_call_limit else 0)
        return RewardResult(useful / total, reason=f"{useful} useful of {len(calls)} calls")


@dataclass(frozen=True)
class JudgeSettings:
    r"""The LLM judge of the `judge` component (keys `agentic_reward_judge_*`).

    Attributes:
        base_url: OpenAI-compatible endpoint, e.g. `http://127.0.0.1:8000/v1` (`agentic_reward_judge_url`).
        model: Judge model name (`agentic_reward_judge_model`).
        cache: SQLite verdict cache (`agentic_reward_judge_cache`; the run's default is
            `<output_dir>/judge_cache.sqlite`). The same file as `eval_judge_cache` shares verdicts with evaluation.
        api_key_env: Environment variable holding the API key (`agentic_reward_judge_api_key_env`), or None.
        workers: Concurrent judge requests.
        timeout_s: Seconds per request, whole (`agentic_reward_judge_timeout`).
        retries: Attempts per request (`agentic_reward_judge_retries`).
    """

    base_url: str | None = None
    model: str | None = None
    cache: str | None = None
    api_key_env: str | None = None
    workers: int = 16
    timeout_s: float = JUDGE_TIMEOUT_S
    retries: int = JUDGE_RETRIES


class JudgeReward(RewardFunction):
    r"""`judge`: 1.0 when the LLM judge says the boxed answer is correct, else 0.0 (docs/rewards.md).

    The evaluation's judge (`rewards.judge.LLMJudge`): the reference prompt, the decision rule, the SQLite verdict
    cache keyed by (judge model, prompt), retries. An answer equivalent by rule (exact match after normalisation, or
    math-verify) scores 1.0 without a call; a response without a boxed answer scores 0.0 without a call. A call that
    still fails after its retries scores 0.0 with the reason `judge error: ...` and a warning; it is not cached, so the
    next time the same answer is asked again. `compute_batch` judges a whole batch concurrently (`workers` requests).
    """

    name = JUDGE_NAME

    def __init__(self, settings: JudgeSettings) -> None:
        r"""Open the verdict cache and the HTTP client of `settings`."""
        from .judge import LLMJudge, VerdictCache

        self.settings = settings
        api_key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        self.judge = LLMJudge(
            settings.base_url,
            settings.model,
            VerdictCache(settings.cache),
            api_key=api_key,
            timeout_s=settings.timeout_s,
            retries=settings.retries,
            workers=settings.workers,
        )

    @staticmethod
    def _request(item: RewardItem) -> dict[str, Any]:
        span = extract_answer_span(item.text)
        answer = extract_boxed_answer(span) if span is not None else None
        answers = normalize_ground_truths(item.ground_truth)
        equivalent = answer is not None and (
            exact_match_score(answer, answers) >= 1.0 or math_verify_score(answer, answers) >= 1.0
        )
        return {"question": item.context.question, "answers": answers, "prediction": answer, "equivalent": equivalent}

    def compute_batch(self, items: list[RewardItem]) -> list[RewardResult]:
        r"""Judge every item, concurrently and in order (`LLMJudge.judge_many`: same prompts share one call)."""
        requests = [self._request(item) for item in items]
        verdicts = self.judge.judge_many(requests)
        results = []
        for request, verdict in zip(requests, verdicts):
            if verdict.correct is None:
                results.append(RewardResult(0.0, answer=request["prediction"], reason=f"judge error: {verdict.error}"))
            else:
                score = 1.0 if verdict.correct else 0.0
                results.append(
                    RewardResult(score, score, request["prediction"], f"judge ({verdict.source})", verdict.correct)
                )
        return results

    def compute(
        self, model_text: str, ground_truth: Any, metadata: dict | None = None, context: RewardContext | None = None
    ) -> RewardResult:
        r"""The verdict of one response (see `compute_batch`)."""
        return self.compute_batch([RewardItem(model_text, ground_truth, metadata or {}, context or RewardContext())])[
            0
        ]


BUILT_IN_COMPONENTS: dict[str, Callable[[], RewardFunction]] = {
    "format": FormatReward,
    "tool_efficiency": ToolEfficiencyReward,
}


# ------------------------------------------------------------------------------------------------ compound reward
@dataclass
class RewardComponent:
    r"""One weighted entry of `agentic_reward_funcs`: its metric name (`reward/<name>`), weight and reward."""

    name: str
    weight: float
    reward: RewardFunction


class CompoundReward(RewardFunction):
    r"""The weighted sum of several rewards (`agentic_reward_funcs`, docs/rewards.md).

    `score = sum(weight_i * score_i)`; `correctness`, `answer` and `format_ok` are the first component's (list the
    correctness reward first: `reward/accuracy` and `reward/format_ok_rate` come from it); `components` holds every
    unweighted score by name. `compute` scores one response component by component; `score_batch` scores a batch
    with the slow components running concurrently.
    """

    def __init__(self, components: list[RewardComponent]) -> None:
        r"""Combine `components` (at least one)."""
        if not components:
            raise ValueError(f"{FUNCS_KEY} names no reward.")
        self.components = components
        self.name = ",".join(f"{c.name}:{c.weight:g}" for c in components)

    def compute(
        self, model_text: str, ground_truth: Any, metadata: dict | None = None, context: RewardContext | None = None
    ) -> RewardResult:
        r"""The combined result of one response (every component called in turn)."""
        item = RewardItem(model_text, ground_truth, metadata or {}, context or RewardContext())
        return score_batch(self, [item])[0]


def _call_one(reward: RewardFunction, item: RewardItem) -> RewardResult:
    if accepts_context(reward.compute):
        return reward.compute(item.text, item.ground_truth, item.metadata, item.context)
    return reward.compute(item.text, item.ground_truth, item.metadata)


def is_user_reward(reward: RewardFunction) -> bool:
    r"""Whether `reward` runs the user's code: a `CallableReward` or a `RewardFunction` class from another package.

    User rewards get the per-call deadline and the worker threads of docs/rewards.md §3; the built-in ones (`f1`,
    `em`, `math`, `format`, `tool_efficiency`) run in the calling thread, where math-verify's own timeouts work.
    """
    return isinstance(reward, CallableReward) or not type(reward).__module__.startswith("llamafactory_agentic.")


def _is_slow(reward: RewardFunction) -> bool:
    r"""Whether a component runs in its own thread: a batch method (the judge), an `async def` or any user function."""
    return hasattr(reward, "compute_batch") or bool(getattr(reward, "is_async", False)) or is_user_reward(reward)


def score_component(reward: RewardFunction, items: list[RewardItem]) -> list[RewardResult]:
    r"""Every item's result from one reward, in order.

    `compute_batch` when the reward has it (the judge, with its own deadlines); the calls of an `async def` function
    concurrently on one event loop; a synchronous user reward's calls in `call_workers` threads; each user call within
    `call_timeout_s` seconds (`rewards.deadline`, docs/rewards.md §3). A built-in reward is called item by item.

    Raises:
        RewardTimeoutError: a user reward call did not finish within its deadline (naming the reward).
    """
    name = getattr(reward, "name", type(reward).__name__)
    if hasattr(reward, "compute_batch"):
        return list(reward.compute_batch(items))
    if getattr(reward, "is_async", False):
        return run_async_calls(
            lambda i: reward.compute_async(items[i].text, items[i].ground_truth, items[i].metadata, items[i].context),
            len(items),
            name,
            reward.call_timeout_s,
        )
    if is_user_reward(reward):
        return run_sync_calls(
            lambda i: _call_one(reward, items[i]), len(items), name, reward.call_timeout_s, reward.call_workers
        )
    return [_call_one(reward, item) for item in items]


def set_call_limits(reward: RewardFunction, timeout_s: Any, workers: Any) -> RewardFunction:
    r"""Give `reward` (every component of a `CompoundReward`) the per-call deadline and worker count of its run.

    Args:
        reward: The run's reward.
        timeout_s: `agentic_reward_timeout` (seconds, > 0).
        workers: `agentic_reward_workers` (whole number >= 1).

    Returns:
        `reward` itself.

    Raises:
        ValueError: naming the key, the value and what it must be.
    """
    try:
        timeout_s = check_number("agentic_reward_timeout", timeout_s)
        workers = check_number("agentic_reward_workers", workers, integer=True, minimum=1, inclusive=True)
    except ValueError as exc:
        raise ValueError(f"recipe key {exc}") from None
    parts = [c.reward for c in reward.components] if isinstance(reward, CompoundReward) else [reward]
    for part in parts:
        part.call_timeout_s, part.call_workers = timeout_s, workers
    return reward


def score_batch(reward: RewardFunction, items: list[RewardItem]) -> list[RewardResult]:
    r"""Score a whole generation batch (docs/rewards.md).

    The components of a `CompoundReward` run side by side: every slow component (the judge, an `async def`
    function) in its own thread, its calls concurrent (judge workers, `asyncio.gather`), the others in the calling
    thread meanwhile, so the batch takes about as long as its slowest component's slowest call, not the sum of its
    calls. A single reward is scored the same way and gives its results unchanged (empty `components`).

    Args:
        reward: `get_reward_function`'s or `build_reward`'s reward.
        items: One `RewardItem` per trajectory (`build_item`).

    Returns:
        One `RewardResult` per item, in order; its score is checked finite in float32 (`check_score`).

    Raises:
        TypeError, ValueError: a component returned a score that is not a finite number (naming it), see `check_score`.
    """
    if not items:
        return []
    components = (
        reward.components
        if isinstance(reward, CompoundReward)
        else [RewardComponent(getattr(reward, "name", type(reward).__name__), 1.0, reward)]
    )
    slow = [c for c in components if _is_slow(c.reward)]
    by_name: dict[str, list[RewardResult]] = {}
    if slow:
        with ThreadPoolExecutor(max_workers=len(slow), thread_name_prefix="agentic-reward") as pool:
            futures = {c.name: pool.submit(score_component, c.reward, items) for c in slow}
            for c in components:
                if c not in slow:
                    by_name[c.name] = score_component(c.reward, items)
            for name, future in futures.items():
                by_name[name] = future.result()
    else:
        for c in components:
            by_name[c.name] = score_component(c.reward, items)
    for c in components:
        if len(by_name[c.name]) != len(items):
            raise RuntimeError(f"reward {c.name} returned {len(by_name[c.name])} results for {len(items)} items.")
    if not isinstance(reward, CompoundReward):
        results = by_name[components[0].name]
        for result in results:
            result.score = check_score(components[0].name, result.score)
        return results
    out = []
    for i in range(len(items)):
        scores = {c.name: check_score(c.name, by_name[c.name][i].score) for c in components}
        total = check_score(reward.name, sum(c.weight * scores[c.name] for c in components))
        first = by_name[components[0].name][i]
        reason = "; ".join(f"{c.name}: {by_name[c.name][i].reason}" for c in components if by_name[c.name][i].reason)
        out.append(RewardResult(total, first.correctness, first.answer, reason, first.format_ok, scores))
    return out


def score_trajectories(
    reward: RewardFunction, trajectories: Iterable[Any], rows: Iterable[dict[str, Any]], texts: Iterable[str]
) -> list[RewardResult]:
    r"""`score_batch` of rollout trajectories with their rows and model views (`build_item` each)."""
    return score_batch(reward, [build_item(t, r, x) for t, r, x in zip(trajectories, rows, texts)])


# ------------------------------------------------------------------------------------------------ configuration
def parse_reward_funcs(spec: str) -> list[tuple[str, float]]:
    r"""`(name, weight)` of every entry of `agentic_reward_funcs`.

    Format: comma-separated entries `name[:weight]`; `name` is a registered reward (`f1`, `em`, `math`, `format`,
    `tool_efficiency`, `judge`, or one registered with `register_reward_function`) or `module:function`; the weight
    (default 1.0) is the last `:` part when it reads as a number. Example: `"f1:1.0,format:0.2,my_mod:fn:0.5"`.

    Raises:
        ValueError: naming the key and the entry: an empty entry, a non-finite weight, a name given twice.
    """
    entries = []
    for raw in str(spec).split(","):
        entry = raw.strip()
        if not entry:
            raise ValueError(f"`{FUNCS_KEY}: {spec}`: empty entry; write `name[:weight]` entries separated by commas.")
        head, sep, tail = entry.rpartition(":")
        weight = 1.0
        if sep:
            try:
                weight = float(tail)
            except ValueError:
                if head.strip() in _known_names():
                    raise ValueError(
                        f"`{FUNCS_KEY}`: entry {entry!r}: the weight {tail!r} is not a number; write "
                        f"`{head.strip()}:0.5`."
                    ) from None
                head = entry  # `module:function` without a weight
            else:
                if not math.isfinite(weight) or abs(weight) > FLOAT32_MAX:
                    raise ValueError(f"`{FUNCS_KEY}`: entry {entry!r} has a non-finite weight {tail!r}.")
        else:
            head = entry
        name = head.strip()
        if not name:
            raise ValueError(f"`{FUNCS_KEY}`: entry {entry!r} has no reward name.")
        if any(name == n for n, _ in entries):
            raise ValueError(f"`{FUNCS_KEY}`: reward {name!r} is listed twice; list it once with its weight.")
        entries.append((name, weight))
    return entries


def _known_names() -> set[str]:
    return {*list_reward_functions(), *BUILT_IN_COMPONENTS, JUDGE_NAME}


def metric_name(name: str) -> str:
    r"""The component's log name: `reward/<name>` with `:` of an import path as `.` (`my_mod:fn` -> `my_mod.fn`)."""
    return name.replace(":", ".")


def build_reward(
    name: str = "f1",
    math_mode: str = "f1",
    tool_bonus: float = TOOL_BONUS,
    reward_funcs: str | None = None,
    judge: JudgeSettings | dict[str, Any] | None = None,
    connect: bool = True,
) -> RewardFunction:
    r"""The run's reward: `agentic_reward` alone, or the `CompoundReward` of `agentic_reward_funcs`.

    Args:
        name: `agentic_reward` (used when `reward_funcs` is empty).
        math_mode: `agentic_reward_math`, for the built-in `f1`/`em`/`math` entries.
        tool_bonus: `agentic_reward_tool_bonus`, for the built-in `f1`/`em`/`math` entries.
        reward_funcs: `agentic_reward_funcs` (see `parse_reward_funcs`), or None.
        judge: Settings of the `judge` entry (`JudgeSettings` or a dict of its fields).
        connect: False to check everything without opening the judge (parse time): the reward returned then has no
            usable judge component.

    Returns:
        A `RewardFunction` (`CompoundReward` with `reward_funcs`).

    Raises:
        ValueError: naming the key, the entry and the fix (unknown name, an import that fails, a bad signature, a bad
            weight, a reserved or repeated name, a `judge` entry without `agentic_reward_judge_url` and
            `agentic_reward_judge_model`).
    """
    if not reward_funcs:
        return get_reward_function(name, math_mode, tool_bonus)
    if isinstance(judge, dict):
        judge = JudgeSettings(**{k: v for k, v in judge.items() if v is not None})
    judge = judge or JudgeSettings()
    components = []
    for entry, weight in parse_reward_funcs(reward_funcs):
        where = f"`{FUNCS_KEY}` entry {entry!r}"
        log_name = metric_name(entry)
        if log_name in RESERVED_NAMES:
            raise ValueError(
                f"{where}: `reward/{log_name}` is already a metric; register the reward under another name."
            )
        if entry == JUDGE_NAME:
            if not judge.base_url or not judge.model:
                raise ValueError(
                    f"{where} needs the judge: set agentic_reward_judge_url (an OpenAI-compatible endpoint, e.g. "
                    "http://127.0.0.1:8000/v1) and agentic_reward_judge_model."
                )
            reward = JudgeReward(judge) if connect else _UnconnectedJudge()
        elif entry in BUILT_IN_COMPONENTS:
            reward = BUILT_IN_COMPONENTS[entry]()
        else:
            try:
                reward = get_reward_function(entry, math_mode, tool_bonus if entry in BUILT_IN_REWARDS else TOOL_BONUS)
            except ValueError as err:
                raise ValueError(
                    f"{where}: {str(err).rstrip('.')}. Fix the entry (a registered name, {sorted(BUILT_IN_COMPONENTS)}, `judge`, or an "
                    "importable `module:function`; docs/rewards.md)."
                ) from err.__cause__  # one traceback, the cause (a module's own error) kept
            check_reward_signature(reward, where)
        components.append(RewardComponent(log_name, weight, reward))
    return CompoundReward(components)


class _UnconnectedJudge(RewardFunction):
    r"""Stands for the judge in a reward built at parse time (`connect=False`); it cannot score."""

    name = JUDGE_NAME

    def compute(self, model_text: str, ground_truth: Any, metadata: dict | None = None) -> RewardResult:
        r"""Refuse: the parse-time reward is only checked, never used."""
        raise RuntimeError(
            "the judge of a parse-time reward check is not connected; build the reward with connect=True"
        )


def judge_settings_from_args(args: Any, output_dir: str | None = None) -> JudgeSettings:
    r"""The `judge` component's settings from the `agentic_reward_judge_*` keys.

    Args:
        args: `FinetuningArguments` with the plugin's keys (missing keys read as unset).
        output_dir: The run's output folder: the cache defaults to `<output_dir>/judge_cache.sqlite`.

    Raises:
        ValueError: `agentic_reward_judge_timeout` not > 0 or `agentic_reward_judge_retries` not an integer >= 1.
    """
    timeout, retries = (
        agentic_value(args, "agentic_reward_judge_timeout"),
        agentic_value(args, "agentic_reward_judge_retries"),
    )
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"agentic_reward_judge_timeout must be a number of seconds > 0, got {timeout!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
        raise ValueError(f"agentic_reward_judge_retries must be an integer >= 1 (attempts per call), got {retries!r}")
    cache = agentic_value(args, "agentic_reward_judge_cache")
    if cache is None and output_dir:
        cache = os.path.join(output_dir, "judge_cache.sqlite")
    return JudgeSettings(
        base_url=agentic_value(args, "agentic_reward_judge_url"),
        model=agentic_value(args, "agentic_reward_judge_model"),
        cache=cache,
        api_key_env=agentic_value(args, "agentic_reward_judge_api_key_env"),
        timeout_s=timeout,
        retries=retries,
    )


def reward_from_args(args: Any, output_dir: str | None = None, connect: bool = True) -> RewardFunction:
    r"""The run's reward from its arguments (`agentic_reward*` keys; `build_reward`).

    Args:
        args: `FinetuningArguments` with the plugin's keys.
        output_dir: The run's output folder (default judge cache location).
        connect: False at parse time (nothing is opened; see `build_reward`).

    Raises:
        ValueError: see `build_reward`; also `agentic_reward` set to something other than its default together with
            `agentic_reward_funcs` (one of the two names the reward), or a bad `agentic_reward_timeout` /
            `agentic_reward_workers` (`set_call_limits`).
    """
    funcs = agentic_value(args, "agentic_reward_funcs")
    name = agentic_value(args, "agentic_reward")
    if funcs and name != "f1":
        raise ValueError(
            f"`agentic_reward: {name}` and `{FUNCS_KEY}: {funcs}` both name the reward; list {name} in {FUNCS_KEY} "
            "(e.g. `{name}:1.0,format:0.2`) and drop agentic_reward."
        )
    math_mode = agentic_value(args, "agentic_reward_math")
    tool_bonus = agentic_value(args, "agentic_reward_tool_bonus")
    timeout_s = agentic_value(args, "agentic_reward_timeout")
    workers = agentic_value(args, "agentic_reward_workers")
    if not funcs:  # the single reward, checked as before (`agentic_reward: ...` in its errors)
        return set_call_limits(check_reward_arguments(name, math_mode, tool_bonus), timeout_s, workers)
    judge = judge_settings_from_args(args, output_dir)
    if funcs and JUDGE_NAME in dict(parse_reward_funcs(funcs)) and connect and not judge.cache:
        raise ValueError("the `judge` reward needs a verdict cache: set agentic_reward_judge_cache or output_dir.")
    return set_call_limits(
        build_reward(name, math_mode, tool_bonus, funcs, judge, connect=connect), timeout_s, workers
    )
