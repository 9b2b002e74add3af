# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The plugin logs through LLaMA-Factory's logger, so LLaMA-Board's running log shows its records."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llamafactory.extras import logging as llamafactory_logging
from llamafactory.extras.constants import RUNNING_LOG

from llamafactory_agentic.common.log import get_logger


REPO = Path(__file__).resolve().parents[2]


def test_plugin_records_reach_llamaboards_running_log(tmp_path):
    handler = llamafactory_logging.LoggerHandler(str(tmp_path))  # the handler LLaMA-Board's LogCallback adds
    llamafactory_logging.add_handler(handler)
    try:
        get_logger("llamafactory_agentic.rewards.math_equivalence").warning("a plugin record")
        get_logger("llamafactory_agentic.rewards.math_equivalence").debug("below LLaMA-Factory's level")
    finally:
        llamafactory_logging.remove_handler(handler)
        handler.close()  # waits for its writer thread
    text = (tmp_path / RUNNING_LOG).read_text()
    assert "a plugin record" in text and "below LLaMA-Factory's level" not in text
    assert "WARNING" in text


@pytest.mark.parametrize(
    "module",
    [
        "llamafactory_agentic.tools.cache.base",
        "llamafactory_agentic.tools.executor",
        "llamafactory_agentic.tools.python_tool",
        "llamafactory_agentic.data.rl_loader",
        "llamafactory_agentic.data.converters",
        "llamafactory_agentic.evaluation.runner",
        "llamafactory_agentic.train.agentic_sft.workflow",
    ],
)
def test_every_module_logs_on_the_one_path(tmp_path, module):
    # tools, data, evaluation and agentic_sft used their own loggers (a package handler of their own, or none)
    handler = llamafactory_logging.LoggerHandler(str(tmp_path))
    llamafactory_logging.add_handler(handler)
    try:
        importlib.import_module(module).logger.warning(f"record of {module}")
    finally:
        llamafactory_logging.remove_handler(handler)
        handler.close()
    assert f"record of {module}" in (tmp_path / RUNNING_LOG).read_text()


@pytest.mark.slow
def test_getting_a_logger_does_not_load_llamafactory(tmp_path):
    """Light commands (`llamafactory-agentic tool`, `doctor`, the sandbox) never pay for LLaMA-Factory's logging
    module (it imports transformers and peft); a logger taken before it loads is served by its handler after."""
    code = (
        "import sys\n"
        "from llamafactory_agentic.tools import cache, cli, executor, python_tool, search\n"
        "assert 'llamafactory.extras.logging' not in sys.modules, 'loaded by the tools'\n"
        "from llamafactory.extras import logging as lf\n"
        f"handler = lf.LoggerHandler({str(tmp_path)!r})\n"
        "lf.add_handler(handler)\n"
        "cache.base.logger.warning('taken before LLaMA-Factory loaded')\n"
        "handler.close()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "taken before LLaMA-Factory loaded" in (tmp_path / RUNNING_LOG).read_text()
