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

r"""The plugin's logging path: LLaMA-Factory's logger (`llamafactory.extras.logging.get_logger`).

LLaMA-Factory configures one handler on its `llamafactory` logger (stdout, its record format, the level from
`LLAMAFACTORY_VERBOSITY`), and LLaMA-Board adds its running-log handler there while it trains. A plugin module's
logger is named under it (`llamafactory.llamafactory_agentic.<module>`), so the plugin's records get the same
handler, format, level and web-UI log as LLaMA-Factory's own.
"""

import logging


def get_logger(name: str) -> logging.Logger:
    r"""LLaMA-Factory's logger for the plugin module `name` (pass `__name__`).

    Imports LLaMA-Factory's logging module (a few seconds on first import): call it from modules that run with
    LLaMA-Factory loaded, or on first use.
    """
    from llamafactory.extras.logging import get_logger as get_llamafactory_logger

    return get_llamafactory_logger(f"llamafactory.{name}")
