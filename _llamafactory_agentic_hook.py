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

"""Start-up hook of llamafactory-agentic, imported by `llamafactory_agentic.pth` in every Python process.

It only installs a meta-path finder that watches six LLaMA-Factory module names and the plugin's two data modules;
nothing else is imported, so a process that never imports LLaMA-Factory pays for one tiny module. When a watched module has finished executing, the finder
hands it to `llamafactory_agentic.integration.activation.on_module_loaded`, which applies that module's patch.
Set `LLAMAFACTORY_AGENTIC_DISABLE=1` to turn the hook off.
"""

import os
import sys


WATCHED = frozenset(
    (
        "llamafactory.extras.constants",
        "llamafactory.data",
        "llamafactory.hparams.parser",
        "llamafactory.train.tuner",
        "llamafactory.launcher",
        "llamafactory.webui.interface",
        # the plugin's data modules: their converters / templates are registered once they are complete
        # (`llamafactory_agentic.integration.data_registration`)
        "llamafactory_agentic.data.converters",
        "llamafactory_agentic.data.inline_template",
    )
)


class _LoaderProxy:
    """Wraps a module loader to run the plugin's patch right after the module body executed."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        from llamafactory_agentic.integration.activation import on_module_loaded

        on_module_loaded(module.__name__, module)


class LlamaFactoryWatcher:
    """`sys.meta_path` finder that defers to the normal path finder and wraps the loaders of `WATCHED` modules."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in WATCHED:
            return None

        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None

        spec.loader = _LoaderProxy(spec.loader)
        return spec


def install() -> bool:
    """Install the watcher once; returns False when disabled by `LLAMAFACTORY_AGENTIC_DISABLE`."""
    if os.environ.get("LLAMAFACTORY_AGENTIC_DISABLE", "0").lower() in ("1", "true", "y", "yes"):
        return False

    if not any(isinstance(finder, LlamaFactoryWatcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, LlamaFactoryWatcher())

    return True


INSTALLED = install()
