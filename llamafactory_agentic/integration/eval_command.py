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

r"""Patch of `llamafactory.launcher`: `llamafactory-cli eval ...` runs the plugin's evaluation harness.

LLaMA-Factory 0.9.5's launcher pops the command word from `sys.argv` and, for `eval`, raises
`NotImplementedError("Evaluation will be deprecated in the future.")`. `llamafactory.cli.main` looks `launch` up on
the module at call time, so replacing `launcher.launch` with a wrapper that handles `eval` first (and leaves every other
command to the original) is enough.
"""

import functools
import inspect
import sys
from types import ModuleType


USAGE_LINE = "llamafactory-cli eval CONFIG.yaml: evaluate (agentic)"


def patch_launcher(module: ModuleType) -> None:
    r"""Route `llamafactory-cli eval` to `llamafactory_agentic.evaluation.cli.run_eval_command`; list it in `USAGE`.

    Raises:
        PatchError: `launch` or `USAGE` is missing, or `launch` has no `eval` command (not the 0.9.5 launcher).
    """
    from .patches import PatchError, _require

    original = _require(module, "launch")
    usage = _require(module, "USAGE", str)
    if getattr(original, "__agentic_patched__", False):
        return

    try:
        source = inspect.getsource(original)
    except (OSError, TypeError):  # no source shipped: rely on the attribute checks
        source = 'command == "eval"'
    if 'command == "eval"' not in source or "llamafactory-cli train -h" not in usage:
        raise PatchError(module.__name__, "`launch` does not dispatch an `eval` command as in LLaMA-Factory 0.9.5")

    @functools.wraps(original)
    def launch() -> None:
        if len(sys.argv) > 1 and sys.argv[1] == "eval":
            from ..evaluation.cli import run_eval_command

            sys.exit(run_eval_command(sys.argv[2:]))
        return original()

    launch.__agentic_patched__ = True
    module.launch = launch
    lines = usage.split("\n")
    width = len(lines[1]) if len(lines) > 1 else 70
    entry = "|   " + USAGE_LINE
    entry += " " * max(1, width - len(entry) - 1) + "|"
    at = next((i for i, line in enumerate(lines) if "llamafactory-cli export" in line), 1)
    module.USAGE = "\n".join(lines[:at] + [entry] + lines[at:])
