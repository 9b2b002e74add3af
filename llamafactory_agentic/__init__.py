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

"""llamafactory-agentic: agentic RL with tools (ARPO, AEPO) as LLaMA-Factory training stages.

Importing this package is cheap (no torch, no LLaMA-Factory). In notebooks call `register()` once before using
LLaMA-Factory; installed processes are activated automatically by the `llamafactory_agentic.pth` hook.
"""

__version__ = "0.1.0"


def register() -> list[str]:
    r"""Apply every patch to LLaMA-Factory now (imports LLaMA-Factory).

    Returns:
        The names of the patches that are active.

    Raises:
        RuntimeError: if the installed LLaMA-Factory version is not supported or a patch's precondition fails.
    """
    from .integration.activation import register as _register

    return _register()


__all__ = ["__version__", "register"]
