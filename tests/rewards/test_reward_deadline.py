# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Per-call deadline, slow-call warning and worker threads of user rewards (issue 34 high 3, docs/rewards.md §3).

The rewards are real `module:function` imports (a module written to tmp_path), built by `reward_from_args` from the
recipe keys `agentic_reward_timeout` / `agentic_reward_workers`, and scored by `score_batch` as the trainer does.
"""

import logging
import textwrap
import time
from types import SimpleNamespace

import pytest
from llamafactory.hparams import FinetuningArguments

from llamafactory_agentic.integration.patches import build_finetuning_arguments_class
from llamafactory_agentic.rewards import RewardItem, RewardTimeoutError, score_batch
from llamafactory_agentic.rewards.compound import reward_from_args


USER_REWARDS = """
import asyncio
import threading
import time

ACTIVE = {"now": 0, "most": 0}
LOCK = threading.Lock()


def blocking(model_text, ground_truth, metadata):
    time.sleep(30)
    return 1.0


async def never(model_text, ground_truth, metadata):
    await asyncio.Event().wait()
    return 1.0


def one_second(model_text, ground_truth, metadata):
    with LOCK:
        ACTIVE["now"] += 1
        ACTIVE["most"] = max(ACTIVE["most"], ACTIVE["now"])
    time.sleep(1.0)
    with LOCK:
        ACTIVE["now"] -= 1
    return float(len(model_text))


def slowish(model_text, ground_truth, metadata):
    time.sleep(0.7)
    return 0.5
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    name = f"user_rewards_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_REWARDS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _args(**keys):
    base = {"agentic_reward": "f1", "agentic_reward_funcs": None, "agentic_reward_timeout": 60.0,
            "agentic_reward_workers": 1}  # fmt: skip
    return SimpleNamespace(**{**base, **keys})


def _items(n):
    return [RewardItem("x" * (i + 1), "gt", {}) for i in range(n)]


@pytest.mark.parametrize("function, kind", [("blocking", "synchronous"), ("never", "async")])
def test_a_reward_that_never_finishes_ends_at_its_deadline(user_module, function, kind):
    # before: `time.sleep(30)` held the step for 30 s (forever for `never`), with nothing in the log
    reward = reward_from_args(_args(agentic_reward=f"{user_module}:{function}", agentic_reward_timeout=1.0))
    start = time.perf_counter()
    with pytest.raises(RewardTimeoutError) as info:
        score_batch(reward, _items(4))
    elapsed = time.perf_counter() - start
    assert elapsed < 3.0, elapsed
    message = str(info.value)
    assert f"reward {user_module}:{function} did not finish within agentic_reward_timeout=1 s" in message
    assert f"{kind} call for trajectory 0 of a batch of 4" in message


def test_the_deadline_holds_inside_a_compound_reward(user_module):
    reward = reward_from_args(
        _args(agentic_reward_funcs=f"format:0.5,{user_module}:blocking:1.0", agentic_reward_timeout=1.0)
    )
    start = time.perf_counter()
    with pytest.raises(RewardTimeoutError, match=f"reward {user_module}.blocking did not finish"):
        score_batch(reward, _items(2))
    assert time.perf_counter() - start < 3.0


def test_sync_reward_calls_run_in_worker_threads(user_module):
    # a 1 s reward over a batch of 8: 8 s one after the other (before, and with the default of 1 worker)
    reward = reward_from_args(_args(agentic_reward=f"{user_module}:one_second", agentic_reward_workers=8))
    start = time.perf_counter()
    results = score_batch(reward, _items(8))
    elapsed = time.perf_counter() - start
    assert [r.score for r in results] == [float(i + 1) for i in range(8)]  # in order
    assert elapsed < 2.5, elapsed  # ~1 s: the 8 calls overlap (ratio to the serial 8 s: < 0.31)
    assert __import__(user_module).ACTIVE["most"] == 8


def test_one_worker_keeps_calls_one_at_a_time(user_module):
    reward = reward_from_args(_args(agentic_reward=f"{user_module}:one_second"))
    results = score_batch(reward, _items(2))
    assert [r.score for r in results] == [1.0, 2.0]
    assert __import__(user_module).ACTIVE["most"] == 1  # never two calls at once: no thread-safety needed


def test_a_slow_reward_is_logged_with_its_name_and_time(user_module, caplog):
    reward = reward_from_args(_args(agentic_reward=f"{user_module}:slowish", agentic_reward_timeout=1.0))
    logger = logging.getLogger("llamafactory_agentic.rewards.deadline")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger=logger.name):
            assert [r.score for r in score_batch(reward, _items(2))] == [0.5, 0.5]
    finally:
        logger.removeHandler(caplog.handler)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert f"reward {user_module}:slowish is slow: 2 of 2 calls took more than 0.5 s" in warnings[0]
    assert "the slowest took 0.7" in warnings[0]


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("agentic_reward_timeout", 0, "recipe key `agentic_reward_timeout` must be a number > 0, got 0"),
        ("agentic_reward_workers", 0, "recipe key `agentic_reward_workers` must be a whole number >= 1, got 0"),
    ],
)
def test_the_keys_are_checked_by_the_parser(key, value, message):
    with pytest.raises(ValueError, match=message):
        build_finetuning_arguments_class(FinetuningArguments)(stage="arpo", **{key: value})
