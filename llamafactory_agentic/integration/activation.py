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

"""Activation: apply the patches of `patches.py` to LLaMA-Factory, automatically or through `register()`.

Automatic path: `llamafactory_agentic.pth` imports `_llamafactory_agentic_hook` at interpreter start-up; its finder
calls `on_module_loaded` when one of the patched LLaMA-Factory modules (or one of the plugin's data modules, see
`data_registration.py`) has been executed. This covers
`llamafactory-cli train`, the torchrun children of `FORCE_TORCHRUN=1` (they import `llamafactory.train.tuner`),
`llamafactory-cli webui` (it imports `llamafactory.webui.interface`) and the training subprocess LLaMA-Board starts.
Explicit path: `register()` imports the modules (patching those already imported) for notebooks or environments where
`.pth` files are not processed; it patches LLaMA-Board only when `llamafactory.webui.interface` is already imported.
"""

import importlib
import sys
from types import ModuleType

from ..common.switch import DISABLE_ENV, is_disabled
from .data_registration import DATA_MODULES, on_data_module_loaded
from .patches import LLAMABOARD_PATCHES, PATCHES, SUPPORTED_LLAMAFACTORY, PatchError


_applied: dict[str, str] = {}
_version_checked = False


def llamafactory_version() -> str | None:
    r"""Installed LLaMA-Factory version from the package metadata (None when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llamafactory")
    except PackageNotFoundError:
        return None


def check_version() -> str:
    r"""Return the LLaMA-Factory version, or raise `PatchError` if it is not a supported release."""
    global _version_checked
    found = llamafactory_version()
    if found not in SUPPORTED_LLAMAFACTORY:
        raise PatchError("llamafactory", "unsupported LLaMA-Factory release", found_version=found or "none")

    _version_checked = True
    return found


def on_module_loaded(name: str, module: ModuleType) -> None:
    r"""Apply the patch of module `name` (called by the start-up hook right after the module executed).

    Raises:
        PatchError: on an unsupported LLaMA-Factory version or a failed precondition.
    """
    if name in DATA_MODULES:  # a plugin data module is complete: register its converters / templates
        if not is_disabled():
            on_data_module_loaded(name, module)
        return

    entry = PATCHES.get(name) or LLAMABOARD_PATCHES.get(name)
    if is_disabled() or name in _applied or entry is None:
        return

    if not _version_checked:
        check_version()

    description, patch = entry
    patch(module)
    _applied[name] = description


def register() -> list[str]:
    r"""Import and patch every LLaMA-Factory module the plugin changes; return the active patch names.

    Works whether or not the start-up hook is installed and whether or not LLaMA-Factory was imported before.

    Raises:
        PatchError: on an unsupported LLaMA-Factory version or a failed precondition.
        RuntimeError: if `LLAMAFACTORY_AGENTIC_DISABLE` is set.
    """
    if is_disabled():
        raise RuntimeError(f"llamafactory-agentic is disabled by {DISABLE_ENV}; unset it to register the plugin.")

    check_version()
    for name in PATCHES:
        module = sys.modules.get(name) or importlib.import_module(name)
        on_module_loaded(name, module)

    for name in LLAMABOARD_PATCHES:  # only when LLaMA-Board is already imported; else the hook patches it on import
        if name in sys.modules:
            on_module_loaded(name, sys.modules[name])

    return active_patches()


def active_patches() -> list[str]:
    r"""Names of the modules patched in this process, in patch order."""
    return [name for name in (*PATCHES, *LLAMABOARD_PATCHES) if name in _applied]


def hook_installed() -> bool:
    r"""True when the start-up hook's finder is on `sys.meta_path` (the `.pth` file was processed)."""
    hook = sys.modules.get("_llamafactory_agentic_hook")
    return bool(hook is not None and any(isinstance(f, hook.LlamaFactoryWatcher) for f in sys.meta_path))
