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

"""Loggers of the plugin's data code that print like LLaMA-Factory's (stdout, same format, `LLAMAFACTORY_VERBOSITY`).

Loggers named `llamafactory_agentic.*` are not children of LLaMA-Factory's `llamafactory` logger, so its handler does
not apply to them; the package logger gets an equivalent handler once. Records still propagate to the root logger
(pytest's `caplog` sees them).
"""

import logging
import os
import sys
import threading


_lock = threading.Lock()


class _StdoutHandler(logging.StreamHandler):
    r"""Writes to the current `sys.stdout` (looked up per record, so redirections such as pytest's apply)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value):
        pass


_configured = False


def _configure_package_logger() -> None:
    global _configured
    with _lock:
        if _configured:
            return

        package_logger = logging.getLogger("llamafactory_agentic")
        if not package_logger.handlers:
            handler = _StdoutHandler()
            handler.setFormatter(
                logging.Formatter(
                    fmt="[%(levelname)s|%(asctime)s] %(name)s:%(lineno)s >> %(message)s", datefmt="%Y-%m-%d %H:%M:%S"
                )
            )
            package_logger.addHandler(handler)

        level = os.environ.get("LLAMAFACTORY_VERBOSITY", "INFO").upper()
        package_logger.setLevel(logging._nameToLevel.get(level, logging.INFO))
        _configured = True


def get_logger(name: str) -> logging.Logger:
    r"""Return the logger `name` (a `llamafactory_agentic.*` module name) with the package handler in place."""
    _configure_package_logger()
    return logging.getLogger(name)
