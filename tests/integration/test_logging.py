# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The plugin logs through LLaMA-Factory's logger, so LLaMA-Board's running log shows its records."""

from llamafactory.extras import logging as llamafactory_logging
from llamafactory.extras.constants import RUNNING_LOG

from llamafactory_agentic.integration.log import get_logger


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
