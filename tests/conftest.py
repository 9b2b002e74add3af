# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Shared fixtures: the real ARPO data folder and a tiny local Qwen2 model built once per test run."""

import logging
import os
from pathlib import Path

import pytest


REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("AGENTIC_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` (ARPO's RL parquet files, search cache and benchmark samples); CI has the same folder."""
    if not (SHARED_DATA / "arpo").is_dir():
        pytest.fail(f"shared data folder not found at {SHARED_DATA}; set AGENTIC_SHARED_DATA to its path")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer Qwen2 model with a byte-level BPE tokenizer trained in-process (no model hub)."""
    from llamafactory_agentic.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture()
def tiny_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))


@pytest.fixture()
def plugin_caplog(caplog):
    """`caplog` that also sees the plugin's records.

    The plugin logs through LLaMA-Factory's `llamafactory` logger (`common.log.get_logger`), which stops
    propagating to the root logger, where `caplog` listens, once LLaMA-Factory has set it up.
    """
    logger = logging.getLogger("llamafactory")
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test`), the longest tests, then the `slow` and `browser` ones are scheduled first.

    The longest tests (a learning run of minutes) then overlap with the many short ones instead of starting last and
    leaving the other workers idle; without xdist the order is the files' order.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") or getattr(config.option, "numprocesses", None):
        items.sort(key=_schedule_rank)


# The two longest tests (about 4-5 minutes each on 2 cores, `--durations` of CI), started before every other one.
LONGEST = ("tests/tasks/test_learning.py", "tests/tasks/test_compare_smoke.py")


def _schedule_rank(item) -> int:
    r"""0 for the longest tests, 1 for the other `slow` and `browser` ones, 2 for the rest."""
    if item.nodeid.startswith(LONGEST):
        return 0
    return 1 if item.get_closest_marker("slow") or item.get_closest_marker("browser") else 2
