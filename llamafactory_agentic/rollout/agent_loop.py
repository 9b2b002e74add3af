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

"""The agentic rollout loop: multi-round generation with tool calls and entropy-gated branching.

Implements docs/algorithms.md §3.4 (ARPO), §5.1 (AEPO pre-monitoring) and §5.2 (branch penalty). Reference loop:
RUC-NLPIR/ARPO `ARPO/verl_arpo_entropy/verl/workers/rollout/vllm_rollout/vllm_rollout_with_tools.py:237-555`.
"""

import itertools
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.tags import empty_call_text, wrap_observation
from .branching import premonitor_initial_rollouts, round_entropy, should_branch
from .engine import GenerationEngine, GenerationRequest, RequestSource, SamplingSettings
from .tool_format import InlineTagFormat, NativeToolFormat, executor_tool_tags
from .trajectory import RolloutConfig, RolloutOutput, ToolCallRecord, Trajectory


_CALL_COUNTER = itertools.count()
_CLOSING_TAG = re.compile(r"</[A-Za-z_][A-Za-z0-9_\-]*>$")  # the stop string of an inline tool call


@dataclass(frozen=True, slots=True)
class BranchDecision:
    r"""One branching decision of a source trajectory after a round (`RolloutState.decision_log`).

    Attributes:
        round: Rounds generated so far in the rollout call (1 after the first round).
        group: Prompt index in the rollout call.
        source: Index within its group of the trajectory that may branch.
        delta_h: Entropy change dH = H_now - H_base of the source (nats, normalised by ln|V|).
        consecutive: l of the consecutive-branch penalty (per lineage or per question, `branch_penalty_scope`).
        branched: Whether a branch was created.
    """

    round: int
    group: int
    source: int
    delta_h: float
    consecutive: int
    branched: bool


@dataclass(slots=True)
class RolloutState:
    r"""Bookkeeping of one rollout call; `AgenticRollout.last_state` keeps the latest for inspection and tests."""

    call: int  # rollout call number; trajectory uids are "<call>-<group>-<index>"
    keys: Iterator[int]  # engine keys, unique within the call
    groups: list[list[Trajectory]]  # [num_prompts][members in creation order]
    metrics: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))  # counters of the call
    branch_points: Counter[int] = field(default_factory=Counter)  # branches by the source's tool-call count
    question_counters: list[int] = field(default_factory=list)  # [num_prompts] l of the `question` penalty scope
    finished_keys: list[int] = field(default_factory=list)  # engine keys finished in the current round
    decision_log: list[BranchDecision] = field(default_factory=list)  # every decision, in order
    created_log: list[list[int]] = field(default_factory=list)  # per round: [num_prompts] trajectories created
    seeds: dict[int, int] = field(default_factory=dict)  # engine key -> base seed of a seeded trajectory (`stream`)
    self_result_streak: dict[int, int] = field(default_factory=dict)  # engine key -> own `<result>`s in a row
    ground_truths: dict[int, Any] = field(default_factory=dict)  # group index -> ground truth (contamination guard)

    @classmethod
    def new(cls, n_prompts: int) -> "RolloutState":
        r"""Fresh state for a call with `n_prompts` prompts (takes the next call number)."""
        return cls(
            call=next(_CALL_COUNTER),
            keys=itertools.count(),
            groups=[[] for _ in range(n_prompts)],
            question_counters=[0] * n_prompts,
        )


@dataclass
class _FallbackToolCall:
    r"""Same fields as `llamafactory_agentic.tools.ToolCall` (used only if the tools package cannot be imported)."""

    tool: str
    content: str
    trajectory_id: str | None = None


def _tool_call_class() -> type:
    try:
        from ..tools import ToolCall
    except ImportError:
        try:
            from ..tools.base import ToolCall
        except ImportError:
            return _FallbackToolCall
    return ToolCall


def extract_tool_call(text: str, stop_string: str) -> tuple[str, str]:
    r"""Tool name and call content of a round that ended on `stop_string` (e.g. `</search>`).

    The call opens at the first `<tag>` before the closing tag that is not inside a closed `<think>…</think>` block,
    and its content is everything from there to the closing tag, stripped (docs/algorithms.md §2.2): code that
    contains the string `'<python>'` keeps it (the last `<python>` would cut the code there), and a `<python>` the model
    only mentions while thinking does not open the call. A `<tag>` after a `<think>` that is never closed still opens
    the call (the model forgot `</think>`); without an opening tag outside think blocks the content is empty.

    Args:
        text: Decoded text of the round (or of the whole response).
        stop_string: The closing tag that ended the round.

    Returns:
        `(tool, content)`, e.g. `("search", "capital of France")`.
    """
    tool = stop_string.strip()[2:-1]
    close = text.rfind(stop_string)
    if close < 0:
        return tool, ""
    start = _call_start(text[:close], f"<{tool}>")
    if start < 0:
        return tool, ""
    return tool, text[start + len(tool) + 2 : close].strip()


def _call_start(text: str, opening: str) -> int:
    r"""Position of the opening tag of the call that `text` ends in (see `extract_tool_call`), or -1."""
    cursor = 0
    while True:
        start = text.find(opening, cursor)
        think = text.find("<think>", cursor)
        if start < 0 or think < 0 or start < think:
            return start
        think_end = text.find("</think>", think)
        if think_end < 0:  # an unclosed think block: the call opens inside it
            return text.find(opening, think)
        cursor = think_end + len("</think>")


def extract_call_after_last_observation(response_text: str, stop_string: str) -> tuple[str, str]:
    r"""`extract_tool_call` on the part of a response after its last `</result>`.

    Used when a round's own text lacks the opening tag (it can sit in the last token of the previous round): the call
    is looked for only after the last observation, never in an earlier call or its tool output.
    """
    last_result = response_text.rfind("</result>")
    tail = response_text[last_result + len("</result>") :] if last_result >= 0 else response_text
    return extract_tool_call(tail, stop_string)


observation_string = wrap_observation  # the inserted observation: " <result>\n" + text + "\n</result>"

# Stop strings with a meaning other than "a tool call ends here" (evaluation protocol, docs/algorithms.md §9).
FINAL_STOP_STRINGS = ("</answer>",)
SELF_RESULT_MARKER = "<result>"
NOTICE_STATUSES = ("limit", "repeat")


def limit_notice_text(tool: str, limit: int) -> str:
    r"""Observation of a call past its tool's per-trajectory limit (`RolloutConfig.tool_call_limits`, docs/algorithms.md §9).

    Example: `The search tool can be used at most 10 times per question; no more search calls. Answer now.`
    """
    return f"The {tool} tool can be used at most {limit} times per question; no more {tool} calls. Answer now."


def turn_limit_notice_text(tool: str, limit: int) -> str:
    r"""Observation of a native call past `max_tool_calls` in a turn with several calls (it is not run).

    Example: `At most 8 tool calls per question; this search call was not run.`
    """
    return f"At most {limit} tool calls per question; this {tool} call was not run."


def repeat_notice_text(tool: str) -> str:
    r"""Observation of a call repeating an earlier call of the same trajectory (`RolloutConfig.repeat_notice_tools`)."""
    return f"This {tool} call repeats an earlier one; its result is above."


def _call_key(tool: str, content: str) -> str:
    r"""Content of a call as compared for repeats: search queries normalised as the tool cache does (docs/algorithms.md §7.5)."""
    if tool == "search":
        from ..tools import normalize_search_query

        return normalize_search_query(content)
    return content.strip()


class _ContinuousRun(RequestSource):
    r"""The `continuous` rollout schedule (`arpo_rollout_schedule`): one trajectory at a time through its rounds.

    The engine pulls requests from here (`take`) whenever KV slots are free and hands each round back as soon as it
    ends (`put`). A round's end is processed for that trajectory alone, with the code of the `rounds` schedule
    (`_apply_segment`); its tool calls go to a background thread (one `executor.execute` batch per round) while
    decoding goes on; when the observation is back (`_apply_observations`) the
    trajectory is at its round boundary: it finishes at R, or makes its branching decisions there
    (`_branch_source`) and re-enters the queue with its branches. A trajectory that finishes while no other member of
    its group is active triggers the budget fill (`_fill`) right away. Continuations and branches are served before
    fresh global rollouts (their prefix is resident in the KV cache).

    What stays as in the `rounds` schedule (docs/algorithms.md §3.4): branching only at round boundaries, per
    source, after its observation; beam_size - 1 decisions while the group is short of M; fills only for a group
    without active members (`per_round`: one at a time, `all_at_once`: every missing one); exactly M per group.
    What differs: a round boundary no longer waits for the slowest member of the batch, so the order in which
    sources of one group reach their boundaries (and take the last free places of the group) is the order their
    rounds end rather than creation order, the random draws come in that order, and `BranchDecision.round` is the
    source lineage's own round count. The `question` penalty scope counts global rounds and is refused.
    """

    def __init__(
        self,
        rollout: "AgenticRollout",
        prompts: list[list[int]],
        state: RolloutState,
        sampling: SamplingSettings,
        branching: bool,
    ) -> None:
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self.rollout, self.prompts, self.state, self.branching = rollout, prompts, state, branching
        self.hot: deque[Trajectory] = deque()  # continuations and branches (prefix resident)
        self.cold: deque[Trajectory] = deque(t for members in state.groups for t in members)  # fresh globals
        self.generating: dict[int, Trajectory] = {}
        self.queued_calls: list = []  # pending tool calls not submitted yet
        self.futures: dict[Any, list] = {}  # future -> its pending calls
        self.active: list[int] = [len(members) for members in state.groups]  # unfinished members per group
        workers = getattr(rollout.executor, "workers", None)  # the executor's own concurrency (ToolExecutor)
        self.pool = ThreadPoolExecutor(max_workers=int(workers or 64), thread_name_prefix="rollout-tools")
        self.tool_s = 0.0
        self.wait_s = 0.0

    # ---------------------------------------------------------------- RequestSource
    def take(self, limit: int) -> list[GenerationRequest]:
        self._collect(block=False)
        self._submit()
        out = []
        while len(out) < limit and (self.hot or self.cold):
            traj = self.hot.popleft() if self.hot else self.cold.popleft()
            self.generating[traj.engine_key] = traj
            out.append(self.rollout._request(traj, self.state))
        return out

    def put(self, request: GenerationRequest, result: Any) -> None:
        traj = self.generating.pop(request.key)
        self.state.metrics["segments"] += 1
        calls = self.rollout._apply_segment(traj, result, self.state)
        if calls:  # the round's calls (several for a native turn with several calls) go to the executor together
            self.queued_calls.append(calls)
        else:
            self._boundary(traj)

    def waiting(self) -> bool:
        # queued trajectories count too: a request admitted by the engine can finish at its first token and its
        # boundary queue a fill or a branch after the engine's last `take`; the engine must come back for it
        return bool(self.queued_calls or self.futures or self.hot or self.cold)

    def wait(self) -> None:
        self._submit()
        t0 = time.perf_counter()
        self._collect(block=True)
        self.wait_s += time.perf_counter() - t0

    # ---------------------------------------------------------------- internals
    def _submit(self) -> None:
        # one executor call per tool call: a slow call never holds back another trajectory's observation (the
        # executor runs concurrent calls in its own pool and shares identical in-flight calls across threads)
        for calls in self.queued_calls:
            self.futures[self.pool.submit(self._execute, calls)] = calls
        self.queued_calls = []

    def _execute(self, batch: list) -> tuple[list, float]:
        t0 = time.perf_counter()
        results = self.rollout._execute_calls(batch)
        return results, time.perf_counter() - t0

    def _collect(self, block: bool) -> None:
        from concurrent.futures import FIRST_COMPLETED
        from concurrent.futures import wait as wait_futures

        if not self.futures:
            return
        done, _ = wait_futures(list(self.futures), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for future in [f for f in self.futures if f in done]:  # submission order
            batch = self.futures.pop(future)
            results, seconds = future.result()
            self.tool_s += seconds
            self.rollout._apply_observations(batch, results, self.state)
            for traj in {id(t): t for t, *_ in batch}.values():  # one boundary per trajectory of the batch
                self._boundary(traj)

    def _boundary(self, traj: Trajectory) -> None:
        r"""`traj`'s round (and observation) is complete: finish at R, or branch and queue its next round."""
        rollout, state = self.rollout, self.state
        rollout._check_budget(traj, state)
        if state.finished_keys:
            rollout.engine.finish(state.finished_keys)
            state.finished_keys = []
        g = traj.group_index
        if traj.finished:
            self.active[g] -= 1
            if self.branching and self.active[g] == 0:
                fills = rollout._fill(state, g, self.prompts[g])
                if fills:
                    state.metrics["fill_rounds"] += 1.0
                self.active[g] += len(fills)
                self.cold.extend(fills)
            return
        children = rollout._branch_source(traj, state, len(traj.round_entropies)) if self.branching else []
        self.active[g] += len(children)
        self.hot.append(traj)
        self.hot.extend(children)

    def check_done(self) -> None:
        r"""Raise if the engine stopped with work left (it must drain the source)."""
        left = len(self.hot) + len(self.cold) + len(self.generating) + len(self.queued_calls) + len(self.futures)
        if left:
            raise RuntimeError(f"The engine stopped with {left} trajectories or calls still pending.")

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def rollout_stop_strings(config_stops: Sequence[str], tool_stops: Sequence[str]) -> tuple[str, ...]:
    r"""The stop strings `AgenticRollout` sends the engine: the tool format's, then the config's that close no call.

    Args:
        config_stops: `RolloutConfig.stop_strings` (its closing tags stand for the default tools).
        tool_stops: The tool format's stop strings (one closing tag per configured tool for inline tags, none for
            native calls).

    Returns:
        The tool closers (in the config's order first: `</search>`, `</python>`, then the others), then the config's
        stop strings that do not close a tool call (`</answer>`, `<result>`), without duplicates. Evaluation records
        these in `run.json` (`evaluation/config.py`).
    """
    tools = [s for s in config_stops if s in tool_stops] + [s for s in tool_stops if s not in config_stops]
    others = [s for s in config_stops if not (AgenticRollout._stop_kind(s) == "tool" and _CLOSING_TAG.match(s))]
    return tuple(dict.fromkeys((*tools, *others)))


class AgenticRollout:
    r"""Generates groups of tool-using trajectories for a batch of prompts.

    Args:
        engine: A `GenerationEngine` (`hf` or `vllm`).
        executor: Tool executor with `execute(list[ToolCall]) -> list[ToolResult]` (never raises).
        tokenizer: The policy's tokenizer (observation encoding, call extraction, |V|).
        config: Resolved `RolloutConfig`.
        tool_format: How calls are written and observations inserted (`rollout.tool_format.build_tool_format`,
            `agentic_tool_protocol`). None: inline tags of the executor's tools (`executor.tools`, keyed by tag, as
            `ToolExecutor` has them), or of the tool closing tags among `config.stop_strings` for an executor that
            does not list its tools.

    The stop strings sent to the engine (`stop_strings`) are the format's (one closing tag per configured tool for
    inline tags, none for native calls, which end with the end-of-turn token) plus the stop strings of `config`
    that do not close a tool call (`</answer>`, `<result>` of the evaluation protocol): a tool registered in the
    tool config (built-in or `module:Class`) is called in training, validation, evaluation and the synthetic task
    alike (docs/tools.md).
    """

    def __init__(
        self,
        engine: GenerationEngine,
        executor: Any,
        tokenizer: Any,
        config: RolloutConfig,
        tool_format: InlineTagFormat | NativeToolFormat | None = None,
    ) -> None:
        r"""Create the rollout (arguments in the class docstring)."""
        self.engine = engine
        self.executor = executor
        self.tokenizer = tokenizer
        self.config = config
        if tool_format is None:
            configured = [
                s[2:-1] for s in config.stop_strings if self._stop_kind(s) == "tool" and _CLOSING_TAG.match(s)
            ]
            tool_format = InlineTagFormat(executor_tool_tags(executor) or configured)
        self.tool_format = tool_format
        self.stop_strings: tuple[str, ...] = rollout_stop_strings(config.stop_strings, tool_format.stop_strings)
        self.log_vocab = math.log(len(tokenizer.get_vocab()))
        self.rng = np.random.default_rng(config.seed)
        self.last_state: RolloutState | None = None

    # ------------------------------------------------------------------ helpers
    def _sampling(self, training: bool) -> SamplingSettings:
        cfg = self.config
        return SamplingSettings(
            temperature=cfg.temperature if training else 0.0,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            stop_strings=self.stop_strings,
            eos_token_ids=(cfg.eos_token_id,),
            entropy_source=cfg.entropy_source,
            entropy_topk=cfg.entropy_topk,
            entropy_tokens=cfg.entropy_tokens,
            repetition_penalty=cfg.repetition_penalty,
        )

    @staticmethod
    def _stop_kind(stop_string: str | None) -> str:
        r"""`final` (`</answer>`), `self_result` (`<result>`) or `tool` (every other stop string)."""
        if stop_string in FINAL_STOP_STRINGS:
            return "final"
        if stop_string == SELF_RESULT_MARKER:
            return "self_result"
        return "tool"

    def _notice(self, traj: Trajectory, tool: str, content: str) -> tuple[str, str] | None:
        r"""`(status, text)` when this call must not run (per-tool limit reached or repeated call), else None."""
        cfg = self.config
        executed = [c for c in traj.tool_calls if c.tool == tool and c.status not in NOTICE_STATUSES]
        limits = cfg.tool_call_limits or {}
        if tool in limits and len(executed) >= int(limits[tool]):
            return "limit", limit_notice_text(tool, int(limits[tool]))
        if content and tool in cfg.repeat_notice_tools:
            key = _call_key(tool, content)
            if any(_call_key(tool, c.content) == key for c in executed if c.content):
                return "repeat", repeat_notice_text(tool)
        return None

    def _drop_self_result(self, traj: Trajectory, n_new: int) -> None:
        r"""Remove the last round's text from the model's own `<result>` on.

        Whole tokens are removed: a token that also holds text before the marker goes too.
        """
        start = len(traj.response_ids) - n_new
        new = traj.response_ids[start:]
        cut = self.tokenizer.decode(new, skip_special_tokens=False).find(SELF_RESULT_MARKER)
        keep = n_new
        if cut >= 0:
            while keep > 0 and len(self.tokenizer.decode(new[:keep], skip_special_tokens=False)) > cut:
                keep -= 1
        del traj.response_ids[start + keep :]
        del traj.loss_mask[start + keep :]
        del traj.behaviour_logps[start + keep :]

    @staticmethod
    def _request_seed(state: RolloutState, traj: Trajectory) -> int | None:
        r"""Per-round seed of a trajectory that was given a seed (`stream`); None otherwise (training)."""
        base = state.seeds.get(traj.engine_key)
        if base is None:
            return None
        return (int(base) * 1_000_003 + len(traj.round_entropies)) % (2**31 - 1)

    def encode_observation(self, text: str) -> list[int]:
        r"""Token ids of the observation of a call that returned `text` (`tool_format.observation_ids`).

        Inline tags: `observation_string(text)` encoded alone with `add_special_tokens=False`; native calls: the
        template's tool message. Special-token text inside tool output (e.g. a web page containing `<|im_end|>`) is
        split into ordinary tokens (`split_special_tokens=True`): an observation never injects an end-of-turn or role
        token.
        """
        return self.tool_format.observation_ids(self.tokenizer, text)

    def _new_global(self, state: RolloutState, group: int, prompt: list[int], is_fill: bool) -> Trajectory:
        members = state.groups[group]
        traj = Trajectory(
            uid=f"{state.call}-{group}-{len(members)}",
            group_index=group,
            prompt_ids=prompt,
            is_fill=is_fill,
            index=len(members),
            engine_key=next(state.keys),
        )
        members.append(traj)
        return traj

    def _branch(self, state: RolloutState, source: Trajectory) -> Trajectory:
        members = state.groups[source.group_index]
        child = Trajectory(
            uid=f"{state.call}-{source.group_index}-{len(members)}",
            group_index=source.group_index,
            prompt_ids=source.prompt_ids,
            response_ids=list(source.response_ids),
            loss_mask=list(source.loss_mask),
            behaviour_logps=list(source.behaviour_logps),
            weight_version=source.weight_version,
            parent=source.index,
            branch_pos=len(source.response_ids),
            num_tool_calls=source.num_tool_calls,
            tool_calls=list(source.tool_calls),  # records are immutable
            round_entropies=list(source.round_entropies),
            entropy_base=source.entropy_base,
            consecutive_branches=source.consecutive_branches,
            index=len(members),
            engine_key=next(state.keys),
            parent_engine_key=source.engine_key,
        )
        members.append(child)
        fork = getattr(self.executor, "fork_trajectory", None)
        if fork is not None:  # the branch's environments start in its source's state (docs/tools.md "Environments")
            fork(source.uid, child.uid)
        return child

    def _finish(self, traj: Trajectory, reason: str, state: RolloutState) -> None:
        traj.finished = True
        traj.finish_reason = reason
        traj.truncated = reason == "length"
        state.finished_keys.append(traj.engine_key)
        release = getattr(self.executor, "release_trajectories", None)
        if release is not None:  # its environments close with it (docs/tools.md "Environments")
            release([traj.uid])

    # ------------------------------------------------------------------ one round
    def _request(self, traj: Trajectory, state: RolloutState) -> GenerationRequest:
        r"""The engine request of `traj`'s next round (`max_tokens` = what is left of R, capped per round if set)."""
        cfg = self.config
        budget = cfg.max_response_length
        return GenerationRequest(
            key=traj.engine_key,
            prompt_ids=traj.prompt_ids,
            response_ids=traj.response_ids,
            max_tokens=(
                budget - len(traj.response_ids)
                if cfg.max_round_tokens is None
                else min(budget - len(traj.response_ids), cfg.max_round_tokens)
            ),
            parent_key=traj.parent_engine_key,
            seed=self._request_seed(state, traj),
        )

    def _round(self, active: list[Trajectory], state: RolloutState, sampling: SamplingSettings) -> tuple[float, float]:
        r"""Generate one round for `active`, run their tool calls and append observations. Returns (gen_s, tool_s)."""
        requests = [self._request(t, state) for t in active]
        t0 = time.perf_counter()
        segments = self.engine.generate(requests, sampling)
        gen_s = time.perf_counter() - t0
        state.metrics["rounds"] += 1
        state.metrics["segments"] += len(active)
        # (trajectory, tool, content, pos, notice) of this round's calls; notice = (status, text) of a call not run
        pending = [call for traj, seg in zip(active, segments) for call in self._apply_segment(traj, seg, state)]
        t1 = time.perf_counter()
        self._apply_observations(pending, self._execute_calls(pending), state)
        tool_s = time.perf_counter() - t1
        for traj in active:
            self._check_budget(traj, state)
        return gen_s, tool_s

    def _apply_segment(
        self, traj: Trajectory, seg: Any, state: RolloutState
    ) -> list[tuple[Trajectory, str, str, int, tuple[str, str] | None]]:
        r"""Append one round's segment to `traj`; returns its tool calls `(traj, tool, content, pos, notice)`.

        [] when the round made no call; one call for inline tags; every call of the turn for a native tool-call turn
        (all with the same `pos`; docs/tools.md "Several calls in one turn").

        Records the round entropy, finishes the trajectory on `</answer>`, EOS, an engine error, the call limit (EOS
        appended), R, or a round without a tool call under `max_round_tokens`; drops a self-written `<result>`.
        """
        cfg = self.config
        budget = cfg.max_response_length
        metrics = state.metrics
        streaks = state.self_result_streak
        traj.parent_engine_key = None
        h_now = round_entropy(seg.entropy_terms, cfg.entropy_tokens, self.log_vocab)
        traj.round_entropies.append(h_now)
        if traj.entropy_base is None:
            traj.entropy_base = h_now
        traj.response_ids.extend(seg.token_ids)
        traj.loss_mask.extend([1] * len(seg.token_ids))
        logprobs = list(getattr(seg, "logprobs", None) or ())
        if len(logprobs) != len(seg.token_ids):  # an engine without behaviour log-probs
            logprobs = [math.nan] * len(seg.token_ids)
        traj.behaviour_logps.extend(logprobs)
        if getattr(seg, "weight_version", None) is not None:
            traj.weight_version = seg.weight_version
        traj.generated_tokens += len(seg.token_ids)
        metrics["generated_tokens"] += len(seg.token_ids)
        kind = self._stop_kind(seg.stop_string) if seg.finish_reason == "stop" else None
        if kind == "self_result":
            self._drop_self_result(traj, len(seg.token_ids))
            streaks[traj.engine_key] = streaks.get(traj.engine_key, 0) + 1
            metrics["self_results"] += 1
            if streaks[traj.engine_key] > cfg.self_result_retries:
                self._finish(traj, "self_result", state)
            return []
        streaks.pop(traj.engine_key, None)
        if kind == "final":
            self._finish(traj, "answer", state)
        elif seg.finish_reason == "error":
            traj.error = seg.error or "the engine gave no answer"
            self._finish(traj, "error", state)
        elif seg.finish_reason == "stop":
            if traj.num_tool_calls >= cfg.max_tool_calls:
                traj.response_ids.append(cfg.eos_token_id)
                traj.loss_mask.append(1)
                traj.behaviour_logps.append(math.nan)  # appended, not sampled
                traj.hit_call_limit = True
                metrics["call_limit_hits"] += 1
                self._finish(traj, "call_limit", state)
                return []
            traj.num_tool_calls += 1
            text = self.tokenizer.decode(seg.token_ids, skip_special_tokens=False)
            tool, content = extract_tool_call(text, seg.stop_string)
            if not content and f"<{tool}>" not in text:
                full = self.tokenizer.decode(traj.response_ids, skip_special_tokens=False)
                tool, content = extract_call_after_last_observation(full, seg.stop_string)
            notice = self._notice(traj, tool, content) if cfg.tool_call_limits or cfg.repeat_notice_tools else None
            return [(traj, tool, content, len(traj.response_ids), notice)]
        elif seg.finish_reason == "eos" and self.tool_format.calls_end_turn and (calls := self._native_calls(seg)):
            # a native tool call ends the model's turn with the end-of-turn token (kept, mask 1)
            if traj.num_tool_calls >= cfg.max_tool_calls:
                traj.hit_call_limit = True
                metrics["call_limit_hits"] += 1
                self._finish(traj, "call_limit", state)
                return []
            pos, out = len(traj.response_ids), []
            for tool, content in calls:  # every call of the turn; those past `max_tool_calls` get a notice, not run
                if traj.num_tool_calls >= cfg.max_tool_calls:
                    out.append((traj, tool, content, pos, ("limit", turn_limit_notice_text(tool, cfg.max_tool_calls))))
                    continue
                traj.num_tool_calls += 1
                checked = cfg.tool_call_limits or cfg.repeat_notice_tools
                out.append((traj, tool, content, pos, self._notice(traj, tool, content) if checked else None))
            return out
        elif seg.finish_reason == "eos":
            self._finish(traj, "eos", state)
        elif len(traj.response_ids) >= budget:
            self._finish(traj, "length", state)
        elif cfg.max_round_tokens is not None:
            # a round without a tool call ends the loop (docs/algorithms.md §9.1)
            self._finish(traj, "round_length", state)
        return []

    def _native_calls(self, seg: Any) -> list[tuple[str, str]]:
        r"""`(tool, content)` of every native call of a turn that ended with the end-of-turn token, in order ([]: none).

        All of them run (concurrently, each within the executor's per-call limits) and their results form the one tool
        message that follows the turn (`NativeToolFormat.join_results`, docs/tools.md "Several calls in one turn").
        """
        ids = list(seg.token_ids)
        if ids and ids[-1] == self.config.eos_token_id:
            ids = ids[:-1]
        return self.tool_format.extract(self.tokenizer.decode(ids, skip_special_tokens=False))

    def _execute_calls(self, pending: list) -> list:
        r"""Run the calls of `pending` that need the executor (content, no notice); results in the order of `pending`.

        The calls run concurrently (`executor.execute` batches), except that the calls one trajectory makes to a stateful
        tool (an environment, `BaseTool.stateful`) run one after another in call order: the k-th such call of each
        trajectory goes in the k-th batch (docs/tools.md "Several calls in one turn").
        """
        real = [(t, tool, content) for t, tool, content, _, notice in pending if content and notice is None]
        if not real:
            return []
        ToolCall = _tool_call_class()
        calls = [ToolCall(tool=tool, content=content, trajectory_id=t.uid) for t, tool, content in real]
        tools = getattr(self.executor, "tools", None)
        tools = tools if isinstance(tools, dict) else {}
        waves: list[list[int]] = []
        seen: dict[tuple[str, str], int] = {}
        for i, (t, tool, _) in enumerate(real):
            wave = 0
            if getattr(tools.get(tool), "stateful", False):
                wave = seen.get((t.uid, tool), 0)
                seen[(t.uid, tool)] = wave + 1
            while len(waves) <= wave:
                waves.append([])
            waves[wave].append(i)
        results: list = [None] * len(calls)
        for wave in waves:
            answers = self.executor.execute([calls[i] for i in wave])
            if len(answers) != len(wave):
                raise RuntimeError(f"Tool executor returned {len(answers)} results for {len(wave)} calls.")
            for i, answer in zip(wave, answers):
                results[i] = answer
        return results

    def _apply_observations(self, pending: list, results: list, state: RolloutState) -> None:
        r"""Append every pending call's observation (mask 0): executor results in order, notices, empty-call text.

        Consecutive calls of one native turn (same trajectory and `pos`) share one tool message with their results
        joined (`NativeToolFormat.join_results`); its first call's record carries the message's length, the others 0.
        """
        metrics = state.metrics
        result_iter = iter(results)
        answered = []
        for traj, tool, content, pos, notice in pending:
            if notice is not None:
                status, text = notice
                latency_s, cached = 0.0, False
                metrics[f"{status}_notices"] += 1
            elif content:
                res = next(result_iter)
                text, status, latency_s, cached = res.text, res.status, float(res.latency_s), bool(res.cached)
            else:
                text, status, latency_s, cached = empty_call_text(tool), "empty", 0.0, False
                metrics["empty_calls"] += 1
            if self.config.contamination_mode != "log" and tool in self.config.contamination_tools and content:
                truth = state.ground_truths.get(traj.group_index)
                if truth is not None:
                    from ..rewards.contamination import guard_observation

                    text, leaked = guard_observation(text, truth, self.config.contamination_mode)
                    metrics["contamination_guarded"] += int(leaked)
            answered.append((traj, tool, content, pos, text, status, latency_s, cached))
        join = getattr(self.tool_format, "join_results", None) if self.tool_format.calls_end_turn else None
        i = 0
        while i < len(answered):
            traj, pos = answered[i][0], answered[i][3]
            j = i + 1
            while join is not None and j < len(answered) and answered[j][0] is traj and answered[j][3] == pos:
                j += 1
            turn = answered[i:j]
            obs = self.encode_observation(join([a[4] for a in turn]) if join is not None else turn[0][4])
            for k, (_, tool, content, _, _, status, latency_s, cached) in enumerate(turn):
                record = ToolCallRecord(tool, content, pos, status, latency_s, cached, len(obs) if k == 0 else 0)
                traj.tool_calls.append(record)
                metrics[f"tool_calls/{tool}"] += 1
            traj.response_ids.extend(obs)
            traj.loss_mask.extend([0] * len(obs))
            traj.behaviour_logps.extend([math.nan] * len(obs))
            metrics["masked_tokens"] += len(obs)
            i = j

    def _check_budget(self, traj: Trajectory, state: RolloutState) -> None:
        if not traj.finished and len(traj.response_ids) >= self.config.max_response_length:
            self._finish(traj, "length", state)

    # ------------------------------------------------------------------ branching
    def _branch_phase(
        self, alive: list[Trajectory], state: RolloutState, prompts: list[list[int]]
    ) -> list[Trajectory]:
        r"""Branch the alive sources (creation order), then budget-fill prompts without active trajectories.

        Budget fill (docs/algorithms.md §3.4): a prompt whose group is short of M and has none alive gets fresh global
        rollouts (`is_fill=True`): one per round with `budget_fill="per_round"` (reference code), or all
        M - len(group) missing ones at once with `"all_at_once"` (arXiv 2507.19849 section 3.1). Fills may branch in
        later rounds. Returns the trajectories created this round (branches first, then fills).
        """
        cfg = self.config
        metrics = state.metrics
        groups = state.groups
        alive_ids = {id(t) for t in alive}
        new: list[Trajectory] = []
        created = [0] * len(prompts)
        for g in range(len(prompts)):
            for source in list(groups[g]):  # creation order; branches created this round are not sources yet
                if id(source) not in alive_ids:
                    continue
                children = self._branch_source(source, state, int(metrics["rounds"]))
                new += children
                created[g] += len(children)
        filled = False
        for g, prompt in enumerate(prompts):
            # budget fill (docs/algorithms.md §3.4): only for a prompt without active trajectories whose group is short
            if any(id(t) in alive_ids for t in groups[g]):
                continue
            fills = self._fill(state, g, prompt)
            new += fills
            created[g] += len(fills)
            filled = filled or bool(fills)
        metrics["fill_rounds"] += float(filled)  # rounds after which at least one fill was created
        state.created_log.append(list(created))
        if cfg.branch_penalty_scope == "question" and any(created):
            counters = state.question_counters
            for g in range(len(prompts)):
                counters[g] = counters[g] + 1 if created[g] else 0
        return new

    def _branch_source(self, source: Trajectory, state: RolloutState, round_number: int) -> list[Trajectory]:
        r"""Branching decisions of one alive source at its round boundary; returns the branches created.

        Up to `beam_size - 1` decisions while the group is short of M, one random draw each (stochastic rule); with
        the `lineage` penalty scope the source's consecutive-branch count l is updated (docs/algorithms.md §5.2).
        """
        cfg = self.config
        metrics = state.metrics
        g = source.group_index
        members = state.groups[g]
        children: list[Trajectory] = []
        decided = False
        for _ in range(cfg.beam_size - 1):
            if len(members) >= cfg.group_size:
                break
            consecutive = (
                source.consecutive_branches if cfg.branch_penalty_scope == "lineage" else state.question_counters[g]
            )
            delta_h = source.entropy_now - source.entropy_base
            u = float(self.rng.random()) if cfg.branch_rule == "stochastic" else None
            decision = should_branch(
                cfg.branch_rule,
                delta_h,
                consecutive,
                tau=cfg.branch_tau,
                beta=cfg.entropy_weight,
                alpha=cfg.branch_alpha,
                branch_penalty=cfg.branch_penalty,
                u=u,
            )
            decided = True
            state.decision_log.append(
                BranchDecision(round_number, g, source.index, delta_h, consecutive, bool(decision))
            )
            metrics["decisions"] += 1
            metrics["delta_h_sum"] += delta_h
            if cfg.branch_penalty > 0 and consecutive > 0:
                metrics["penalised_decisions"] += 1
            if decision:
                children.append(self._branch(state, source))
                metrics["branches"] += 1
                state.branch_points[source.num_tool_calls] += 1
        if decided and cfg.branch_penalty_scope == "lineage":
            if children:
                source.consecutive_branches += 1
                for child in children:
                    child.consecutive_branches = source.consecutive_branches
            else:
                source.consecutive_branches = 0
        return children

    def _fill(self, state: RolloutState, g: int, prompt: list[int]) -> list[Trajectory]:
        r"""Budget fill of a group without active trajectories: M - len (`all_at_once`) or 1 (`per_round`) globals."""
        cfg = self.config
        missing = cfg.group_size - len(state.groups[g])
        if missing <= 0:
            return []
        count = missing if cfg.budget_fill == "all_at_once" else 1
        fills = [self._new_global(state, g, prompt, is_fill=True) for _ in range(count)]
        state.metrics["fills"] += count
        return fills

    # ------------------------------------------------------------------ loop
    def _run(
        self,
        prompts: list[list[int]],
        initial: list[int],
        state: RolloutState,
        sampling: SamplingSettings,
        branching: bool,
    ) -> tuple[float, float]:
        for g, prompt in enumerate(prompts):
            for _ in range(initial[g]):
                self._new_global(state, g, prompt, is_fill=False)
        if self.config.schedule == "continuous":
            run = _ContinuousRun(self, prompts, state, sampling, branching)
            t0 = time.perf_counter()
            try:
                self.engine.serve(run, sampling)
            finally:
                run.close()
            run.check_done()
            wall = time.perf_counter() - t0
            state.metrics["rounds"] = float(max((len(t.round_entropies) for m in state.groups for t in m), default=0))
            state.metrics["tool_wait_s"] += run.wait_s
            return wall - run.wait_s, run.tool_s
        active = [t for members in state.groups for t in members]
        gen_s = tool_s = 0.0
        while active:
            g_s, t_s = self._round(active, state, sampling)
            gen_s, tool_s = gen_s + g_s, tool_s + t_s
            alive = [t for t in active if not t.finished]
            if state.finished_keys:
                self.engine.finish(state.finished_keys)
                state.finished_keys = []
            new = self._branch_phase(alive, state, prompts) if branching else []
            active = alive + new
        return gen_s, tool_s

    def _premonitor(self, prompts: list[list[int]], sampling: SamplingSettings) -> tuple[list[int], dict]:
        r"""AEPO entropy pre-monitoring (docs/algorithms.md §5.1): m per prompt; probe samples are discarded."""
        cfg = self.config
        state = RolloutState.new(len(prompts))
        root_sampling = SamplingSettings(**{**sampling.__dict__})
        requests = [
            GenerationRequest(key=-(g + 1), prompt_ids=p, response_ids=[], max_tokens=cfg.premonitor_tokens)
            for g, p in enumerate(prompts)
        ]
        roots = self.engine.generate(requests, root_sampling)
        self.engine.finish([r.key for r in requests])
        h_root = [round_entropy(r.entropy_terms, cfg.entropy_tokens, self.log_vocab) for r in roots]
        self._run(prompts, [1] * len(prompts), state, sampling, branching=False)
        self.engine.finish([t.engine_key for members in state.groups for t in members])
        ms, h_bars = [], []
        for g, members in enumerate(state.groups):
            rounds = members[0].round_entropies
            chosen = rounds if cfg.premonitor_rounds == "all" else rounds[1:]
            h_bar = float(np.mean(chosen)) if chosen else h_root[g]
            h_bars.append(h_bar)
            ms.append(premonitor_initial_rollouts(cfg.group_size, h_root[g], h_bar, cfg.premonitor_beta))
        info = {"h_root": h_root, "h_bar": h_bars, "probe_tool_calls": state.metrics}
        return ms, info

    def rollout(
        self, prompts: list[list[int]], training: bool = True, ground_truths: Sequence[Any] | None = None
    ) -> RolloutOutput:
        r"""Generate the trajectories of one rollout call (docs/algorithms.md §3.4).

        Args:
            prompts: Prompt token ids per prompt (already rendered with the chat template, ending with the assistant
                header).
            training: True: groups of exactly M with branching (and pre-monitoring if enabled). False
                (validation): greedy, one trajectory per prompt, no branching, no pre-monitoring.
            ground_truths: The ground truth of each prompt (or None), for `RolloutConfig.contamination_mode` `mask`
                and `drop`; unused under `log`.

        Returns:
            `RolloutOutput` with `groups[g]` in creation order (index = position; `parent` points into the group).

        Raises:
            RuntimeError: a training group ended with a size other than M (never expected; the loop would be wrong).
        """
        cfg = self.config
        self.engine.reset()
        prompts = [list(p) for p in prompts]
        sampling = self._sampling(training)
        timing = {"time/generation": 0.0, "time/tools": 0.0, "time/premonitor": 0.0}
        extra: dict[str, float] = {}
        if training:
            if cfg.dynamic_rollouts:
                t0 = time.perf_counter()
                initial, info = self._premonitor(prompts, sampling)
                timing["time/premonitor"] = time.perf_counter() - t0
                self.engine.reset()
                extra["rollout/premonitor_global"] = float(np.mean(initial))
                extra["rollout/premonitor_branch"] = float(np.mean([cfg.group_size - m for m in initial]))
                extra["rollout/premonitor_h_root"] = float(np.mean(info["h_root"]))
                extra["rollout/premonitor_h_bar"] = float(np.mean(info["h_bar"]))
            else:
                initial = [min(max(cfg.initial_rollouts, 1), cfg.group_size)] * len(prompts)
        else:
            initial = [1] * len(prompts)

        state = RolloutState.new(len(prompts))
        if ground_truths is not None:
            state.ground_truths = {g: t for g, t in enumerate(ground_truths) if t is not None}
        self.last_state = state  # decision and creation logs of the latest call (inspection and tests)
        try:
            gen_s, tool_s = self._run(prompts, initial, state, sampling, branching=training)
        finally:  # environments of trajectories left unfinished (an engine error) close too
            release = getattr(self.executor, "release_trajectories", None)
            if release is not None:
                release([t.uid for members in state.groups for t in members if not t.finished])
        timing["time/generation"] += gen_s
        timing["time/tools"] += tool_s
        if cfg.schedule == "continuous":  # tools overlap generation; this is the time nothing was decoding
            timing["time/tool_wait"] = float(state.metrics["tool_wait_s"])
        self.engine.release()

        groups = state.groups
        expected = cfg.group_size if training else 1
        for g, members in enumerate(groups):
            if len(members) != expected:
                raise RuntimeError(f"Group {g} has {len(members)} trajectories, expected exactly {expected}.")
            for traj in members:
                if len(traj.response_ids) > cfg.max_response_length:
                    del traj.response_ids[cfg.max_response_length :]
                    del traj.loss_mask[cfg.max_response_length :]
                    del traj.behaviour_logps[cfg.max_response_length :]
                    traj.truncated = True
                    if not traj.finish_reason:
                        traj.finish_reason = "length"
        metrics = self._metrics(state, groups, initial, training)
        metrics.update(extra)
        return RolloutOutput(groups=groups, metrics=metrics, timing=timing)

    def stream(
        self,
        items: Iterable[tuple[Any, list[int], int | None]],
        on_finished: Callable[[Any, Trajectory], None],
        max_in_flight: int = 64,
    ) -> dict[str, float]:
        r"""Evaluation loop: one trajectory per item, kept `max_in_flight` at a time (continuous batching).

        Every round generates for all active trajectories at once (one `engine.generate` call) and runs their tool
        calls concurrently (one `executor.execute` call); a trajectory that ends is handed to `on_finished` right
        away and its place goes to the next item, so a slow sample never holds back the others. No branching, no
        groups, no pre-monitoring; sampling uses the configured temperature (0 = greedy) and the evaluation
        settings of `RolloutConfig` (stop strings, `max_round_tokens`, per-tool limits and notices, repetition
        penalty, `trajectory_timeout_s`).

        Args:
            items: `(item_id, prompt_ids, seed)` triples, or `(item_id, prompt_ids, seed, ground_truth)` for
                `RolloutConfig.contamination_mode` `mask`/`drop`, consumed lazily; `seed` (or None) seeds every round
                of the item in engines that seed per request (`GenerationRequest.seed`), so a sample draws the same
                tokens whatever else is in flight.
            on_finished: Called as `on_finished(item_id, trajectory)` once per item, in completion order, from this
                thread. The response is already cut to `max_response_length`.
            max_in_flight: Most trajectories generating at once (>= 1).

        Returns:
            Counters of the call: `rounds`, `generated_tokens`, `masked_tokens`, `tool_calls/<tool>`,
            `limit_notices`, `repeat_notices`, `self_results`, `empty_calls`, plus `time/generation` and
            `time/tools` in seconds.

        Raises:
            ValueError: `max_in_flight` < 1.
        """
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}.")
        cfg = self.config
        self.engine.reset()
        sampling = self._sampling(training=True)  # the configured temperature; 0 means greedy
        state = RolloutState.new(0)
        source = iter(items)
        exhausted = False
        active: list[Trajectory] = []
        item_of: dict[int, Any] = {}
        started: dict[int, float] = {}
        gen_s = tool_s = 0.0
        while True:
            while not exhausted and len(active) < max_in_flight:
                item = next(source, None)
                if item is None:
                    exhausted = True
                    break
                item_id, prompt, seed = item[:3]
                state.groups.append([])
                if len(item) > 3 and item[3] is not None:
                    state.ground_truths[len(state.groups) - 1] = item[3]
                traj = self._new_global(state, len(state.groups) - 1, list(prompt), is_fill=False)
                item_of[traj.engine_key] = item_id
                started[traj.engine_key] = time.perf_counter()
                if seed is not None:
                    state.seeds[traj.engine_key] = int(seed)
                active.append(traj)
            if not active:
                break
            if cfg.trajectory_timeout_s is not None:
                now = time.perf_counter()
                for traj in active:
                    if now - started[traj.engine_key] > cfg.trajectory_timeout_s:
                        self._finish(traj, "timeout", state)
            live = [t for t in active if not t.finished]
            if live:
                g_s, t_s = self._round(live, state, sampling)
                gen_s, tool_s = gen_s + g_s, tool_s + t_s
            if state.finished_keys:
                self.engine.finish(state.finished_keys)
                state.finished_keys = []
            for traj in active:
                if not traj.finished:
                    continue
                if len(traj.response_ids) > cfg.max_response_length:
                    del traj.response_ids[cfg.max_response_length :]
                    del traj.loss_mask[cfg.max_response_length :]
                    del traj.behaviour_logps[cfg.max_response_length :]
                    traj.truncated = True
                state.groups[traj.group_index] = []  # nothing refers to finished groups any more
                started.pop(traj.engine_key, None)
                on_finished(item_of.pop(traj.engine_key), traj)
            active = [t for t in active if not t.finished]
        self.engine.release()
        out = {key: float(value) for key, value in state.metrics.items()}
        out.update({"time/generation": gen_s, "time/tools": tool_s})
        return out

    def _metrics(
        self, state: RolloutState, groups: list[list[Trajectory]], initial: list[int], training: bool
    ) -> dict[str, float]:
        m = state.metrics
        trajs = [t for members in groups for t in members]
        n = max(len(trajs), 1)
        out = {
            "rollout/trajectories": float(len(trajs)),
            "rollout/initial_rollouts": float(np.mean(initial)) if initial else 0.0,
            "rollout/branches": m["branches"],
            "rollout/fills": m["fills"],
            "rollout/fill_rounds": m["fill_rounds"],
            "rollout/decisions": m["decisions"],
            "rollout/branch_rate": m["branches"] / m["decisions"] if m["decisions"] else 0.0,
            "rollout/mean_delta_h": m["delta_h_sum"] / m["decisions"] if m["decisions"] else 0.0,
            "rollout/penalised_decisions": m["penalised_decisions"],
            "rollout/rounds": m["rounds"],
            "rollout/segments": m["segments"],  # engine requests (one per trajectory and round)
            "rollout/tool_calls_per_traj": sum(t.num_tool_calls for t in trajs) / n,
            "rollout/call_limit_hits": float(sum(t.hit_call_limit for t in trajs)),
            "rollout/truncations": float(sum(t.truncated for t in trajs)),
            "rollout/empty_calls": m["empty_calls"],
            "rollout/contamination_guarded": m["contamination_guarded"],  # observations masked or dropped
            "rollout/generated_tokens": m["generated_tokens"],
            "rollout/masked_tokens": m["masked_tokens"],
            "rollout/response_length": sum(len(t.response_ids) for t in trajs) / n,
            "rollout/finish_eos": float(sum(t.finish_reason == "eos" for t in trajs)),
        }
        per_tool = Counter()
        for t in trajs:
            for call in t.tool_calls:
                per_tool[call.tool] += 1
        for tool, count in per_tool.items():
            out[f"rollout/tool_calls_per_traj/{tool}"] = count / n
        for key, value in m.items():
            if key.startswith("tool_calls/"):
                out[f"rollout/executed_{key}"] = value
        for call_index, count in sorted(state.branch_points.items()):
            out[f"rollout/branch_points/call_{call_index}"] = float(count)
        return out
