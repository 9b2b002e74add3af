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

r"""The plugin's logging path: LLaMA-Factory's logger (`llamafactory.extras.logging`).

LLaMA-Factory configures one handler on its `llamafactory` logger (stdout, its record format, the level from
`LLAMAFACTORY_VERBOSITY`), and LLaMA-Board adds its running-log handler there while it trains. A plugin module's
logger is named under it (`llamafactory.llamafactory_agentic.<module>`), so the plugin's records get the same
handler, format, level and web-UI log as LLaMA-Factory's own.

Getting a logger imports nothing: LLaMA-Factory's logging module imports the `llamafactory` package, which pulls in
transformers and peft (about 3.5 s), a cost the light commands (`llamafactory-agentic tool`, `doctor`, the python
sandbox) must not pay. Python's loggers are shared by name, so the logger returned before LLaMA-Factory is loaded is
the one LLaMA-Factory's handler serves once it is; until then (and in a process that never loads LLaMA-Factory) the
records go to Python's root logger as any library's do.
"""

import logging
import sys


def get_logger(name: str) -> logging.Logger:
    r"""LLaMA-Factory's logger for the plugin module `name` (pass `__name__`): `llamafactory.<name>`.

    Cheap at any time (no import); when LLaMA-Factory's logging module is already loaded, its handler set-up is
    applied through its own `get_logger`.
    """
    full_name = f"llamafactory.{name}"
    module = sys.modules.get("llamafactory.extras.logging")
    if module is not None:
        return module.get_logger(full_name)
    return logging.getLogger(full_name)
