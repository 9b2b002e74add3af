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

r"""Registration of the plugin's dataset formats and inline-tag templates in LLaMA-Factory's registries.

The data layer builds them and offers idempotent registration functions (`data.converters.register_converters`: the
`arpo_rl`, `arpo_sft` and `agentic_raw` converters in `DATASET_CONVERTERS`; `data.inline_template.
register_default_inline_templates` / `get_inline_template_name`: the `<base>_agentic` templates in `TEMPLATES`); no data
module registers itself on import or imports this package. Activation calls them (docs/architecture.md, "Layers"):

* `patches.patch_data`, when `llamafactory.data` is imported (`llamafactory-cli` and its torchrun children, the
  training process LLaMA-Board starts, `register()`), through `register_data_extensions`;
* `on_data_module_loaded`, when the start-up hook sees `llamafactory_agentic.data.converters` or `.inline_template`
  finish executing: a process whose first import of LLaMA-Factory's data package came from inside one of these modules
  (e.g. a script or a test that imports `llamafactory_agentic.data.converters` first, while it is still executing
  `patch_data` cannot use it) is registered as soon as the module is complete.

The RL loader and the agentic SFT workflow also call the data layer's registration themselves (idempotent), so a
process without the start-up hook (no `.pth` processing, `register()` not called) still loads its datasets. Data-loader
workers are forked or unpickle the converter instances, which do not look up the registry.
"""

import importlib
import sys
from types import ModuleType
from typing import Any


_DATA = "llamafactory_agentic.data"

# Plugin data modules the start-up hook watches (`_llamafactory_agentic_hook.WATCHED`) -> their registration function.
DATA_MODULES = {
    f"{_DATA}.converters": "register_converters",
    f"{_DATA}.inline_template": "register_default_inline_templates",
}


def register_data_extensions() -> None:
    r"""Register the `arpo_rl`, `arpo_sft`, `agentic_raw` converters and the default inline-tag templates (idempotent).

    Requires LLaMA-Factory. A plugin data module whose body is executing right now (it imported LLaMA-Factory's data
    package, which ran `patches.patch_data`) is skipped: `on_data_module_loaded` registers it once it is complete.
    """
    for name, register in DATA_MODULES.items():
        module = _import_unless_executing(name)
        if module is not None:
            getattr(module, register)()


def on_data_module_loaded(name: str, module: ModuleType) -> None:
    r"""Register what the plugin data module `name` defines (called by the start-up hook once its body executed)."""
    getattr(module, DATA_MODULES[name])()


def _import_unless_executing(name: str) -> Any:
    module = sys.modules.get(name)
    if module is not None and not getattr(module, "MODULE_READY", False):
        return None  # its body is running right now (circular import through the activation hook)

    return importlib.import_module(name)
