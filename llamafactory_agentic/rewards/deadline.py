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

r"""Per-call deadline and worker threads of user reward functions (docs/rewards.md §3, "Deadline and workers").

A user reward (`module:function`, a registered function or `RewardFunction` subclass) is the user's code: it may block
(`time.sleep`, a socket without a timeout) or, as an `async def`, await forever. Every call gets
`agentic_reward_timeout` seconds, counted from the moment it starts; a call still running then ends the scoring with
`RewardTimeoutError` (naming the reward, the trajectory and the time), and a call slower than half the deadline is
logged as a warning. Synchronous calls run in daemon threads, `agentic_reward_workers` at a time (1: one after the
other, for functions that are not thread-safe); a thread still stuck in a call cannot be stopped and is left behind
(daemon: it never holds up the process's exit). `async def` calls of a batch run concurrently on one event loop, each
under `asyncio.wait_for`, and the loop itself runs in a daemon thread bounded by the deadline, so a coroutine that
blocks the loop is caught too.

Why daemon threads and not `concurrent.futures.ThreadPoolExecutor`: the pool's threads are joined at interpreter exit,
so one call stuck in `time.sleep(1e9)` would keep a finished (or failed) training process alive forever.
"""

import asyncio
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..common.log import get_logger


logger = get_logger(__name__)

# a call slower than this share of the deadline is logged (one warning per reward and batch)
SLOW_SHARE = 0.5


class RewardTimeoutError(TimeoutError):
    r"""A user reward call did not finish within `agentic_reward_timeout` (docs/rewards.md §3)."""


def _timeout_message(name: str, index: int, n: int, timeout_s: float, kind: str) -> str:
    return (
        f"reward {name} did not finish within agentic_reward_timeout={timeout_s:g} s ({kind} call for trajectory "
        f"{index} of a batch of {n}); the step is stopped rather than scored with a made-up value. Fix the reward "
        "(a blocking call without its own timeout?), or raise agentic_reward_timeout for a reward that is slow by "
        "design (docs/rewards.md §3)."
    )


def _warn_slow(name: str, durations: Sequence[float | None], timeout_s: float) -> None:
    slow = [d for d in durations if d is not None and d > SLOW_SHARE * timeout_s]
    if slow:
        logger.warning(
            "[agentic-reward] reward %s is slow: %d of %d calls took more than %.3g s (half its deadline "
            "agentic_reward_timeout=%g s); the slowest took %.2f s.",
            name,
            len(slow),
            len(durations),
            SLOW_SHARE * timeout_s,
            timeout_s,
            max(slow),
        )


def run_sync_calls(call: Callable[[int], Any], n: int, name: str, timeout_s: float, workers: int) -> list[Any]:
    r"""`[call(0), ..., call(n - 1)]`, each in a daemon thread, at most `workers` at a time, each within `timeout_s`.

    Args:
        call: Scores item `i` (a user reward on trajectory `i`); may block or raise.
        n: Number of items.
        name: The reward's name (messages, the slow-call warning).
        timeout_s: Per-call deadline in seconds (`agentic_reward_timeout`), counted from the call's start.
        workers: Calls running at once (`agentic_reward_workers`; 1 = one after the other).

    Returns:
        The calls' results, in order.

    Raises:
        RewardTimeoutError: a call still running `timeout_s` seconds after it started (its thread is left behind).
        Exception: the first exception a call raised (in item order), unchanged.
    """
    values: list[Any] = [None] * n
    errors: list[BaseException | None] = [None] * n
    durations: list[float | None] = [None] * n
    finished = [threading.Event() for _ in range(n)]
    any_done = threading.Event()

    def work(i: int) -> None:
        start = time.monotonic()
        try:
            values[i] = call(i)
        except BaseException as exc:  # noqa: BLE001 - handed to the scoring thread and raised there
            errors[i] = exc
        durations[i] = time.monotonic() - start
        finished[i].set()
        any_done.set()

    pending, running = deque(range(n)), {}  # index -> start time (monotonic)
    while pending or running:
        while pending and len(running) < workers:
            i = pending.popleft()
            running[i] = time.monotonic()
            threading.Thread(target=work, args=(i,), name=f"agentic-reward-{i}", daemon=True).start()
        next_deadline = min(start + timeout_s for start in running.values())
        any_done.wait(max(0.0, next_deadline - time.monotonic()))
        any_done.clear()
        now = time.monotonic()
        for i, start in list(running.items()):
            if finished[i].is_set():
                del running[i]
            elif now >= start + timeout_s:
                _warn_slow(name, [*durations, now - start], timeout_s)
                raise RewardTimeoutError(_timeout_message(name, i, n, timeout_s, "synchronous"))
    _warn_slow(name, durations, timeout_s)
    for error in errors:
        if error is not None:
            raise error
    return values


def run_async_calls(make: Callable[[int], Awaitable[Any]], n: int, name: str, timeout_s: float) -> list[Any]:
    r"""Await `make(0), ..., make(n - 1)` concurrently on one event loop, each within `timeout_s`.

    The event loop runs in a daemon thread that the caller waits for at most `timeout_s` plus 5 s (cancelled calls
    get that long to unwind), so a coroutine that blocks the loop (a `time.sleep` inside `async def`) ends the
    scoring too.

    Args:
        make: Creates the coroutine scoring item `i`.
        n: Number of items.
        name: The reward's name (messages, the slow-call warning).
        timeout_s: Per-call deadline in seconds (`agentic_reward_timeout`).

    Returns:
        The results, in order.

    Raises:
        RewardTimeoutError: a call not finished after `timeout_s` seconds, or an event loop still busy after the
            deadline and the grace period.
        Exception: the first exception a call raised (in item order), unchanged.
    """
    durations: list[float | None] = [None] * n

    async def one(i: int) -> Any:
        start = time.monotonic()
        try:
            return await asyncio.wait_for(make(i), timeout_s)
        except asyncio.TimeoutError:
            raise RewardTimeoutError(_timeout_message(name, i, n, timeout_s, "async")) from None
        finally:
            durations[i] = time.monotonic() - start

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*(one(i) for i in range(n))))

    box: dict[str, Any] = {}

    def loop_thread() -> None:
        try:
            box["value"] = asyncio.run(gather())
        except BaseException as exc:  # noqa: BLE001 - raised in the scoring thread
            box["error"] = exc

    thread = threading.Thread(target=loop_thread, name="agentic-reward-loop", daemon=True)
    thread.start()
    thread.join(timeout_s + 5.0)
    if thread.is_alive():
        raise RewardTimeoutError(
            _timeout_message(name, next((i for i, d in enumerate(durations) if d is None), 0), n, timeout_s, "async")
            + " Its event loop did not come back: a blocking call inside `async def` (run it with asyncio.to_thread)."
        )
    _warn_slow(name, durations, timeout_s)
    if "error" in box:
        raise box["error"]
    return box["value"]


__all__ = ["RewardTimeoutError", "run_async_calls", "run_sync_calls"]
