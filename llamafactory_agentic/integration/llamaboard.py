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

"""The LLaMA-Board patch (`llamafactory-cli webui`): what changes in LLaMA-Factory 0.9.5's web UI, and only that.

Applied when `llamafactory.webui.interface` has been imported (the start-up hook watches it; `register()` patches it
if it is already imported). Everything is looked up at call time in LLaMA-Board, so patching these names is enough:

* `interface.create_train_tab`: LLaMA-Board's Train tab, then the agentic panel and the RL monitor around it
  (`llamafactory_agentic.webui.panel`). The panel's fields are added to the set that LLaMA-Board's tab builds its
  event inputs from (`Manager.get_base_elems`, for the duration of the call), so Preview, Start, Save/Load arguments
  and the restore of a running job carry them.
* `interface.CSS`: long lines of the output box wrap instead of being cut at the right edge.
* `components.train.list_datasets`: for the plugin's stages, the datasets whose formatting fits come first.
* `control.gen_loss_plot`: for the plugin's RL logs the loss plot keeps zero losses (LLaMA-Board drops them, and
  GRPO-style losses are often exactly 0).
* `runner.Runner._parse_train_args` (the panel's keys in the command), `Runner._initialize` (Start refused when a
  check before Start fails), `Runner.preview_train` (effective values under the command), `Runner.set_abort` and
  `Runner.monitor` (an aborted plugin run ends with "Aborted", not "Finished.").
* `locales.LOCALES`: the panel's labels, so the language switch relabels it.
"""

import functools
import importlib
from types import ModuleType
from typing import Any

from .patches import PatchError


EXTRA_CSS = r"""
.agentic-output pre, .agentic-output code { white-space: pre-wrap !important; word-break: break-word; }
#agentic_checks { min-height: 2em; }
"""

_LF_WEBUI = "llamafactory.webui"


def _attr(module: ModuleType, name: str, kind: type | None = None) -> Any:
    if not hasattr(module, name):
        raise PatchError(module.__name__, f"attribute `{name}` is missing")
    value = getattr(module, name)
    if kind is not None and not isinstance(value, kind):
        raise PatchError(module.__name__, f"`{name}` is a {type(value).__name__}, expected {kind.__name__}")
    return value


def _method(cls: type, name: str, module: str) -> Any:
    if not callable(getattr(cls, name, None)):
        raise PatchError(module, f"`{cls.__name__}.{name}` is missing")
    return getattr(cls, name)


def _preconditions(interface: ModuleType) -> dict[str, Any]:
    r"""Check that LLaMA-Board looks as in the supported release; return the pieces the patch changes."""
    import gradio as gr

    for name in ("Timer", "skip", "update", "Accordion", "Plot", "HTML"):
        if not hasattr(gr, name):
            raise PatchError(interface.__name__, f"gradio has no `{name}` (gradio {gr.__version__})")

    modules = {
        name: importlib.import_module(f"{_LF_WEBUI}.{name}")
        for name in ("components.train", "control", "runner", "manager", "locales", "common")
    }
    pieces = {
        "create_train_tab": _attr(interface, "create_train_tab"),
        "css": _attr(interface, "CSS", str),
        "list_datasets": _attr(modules["components.train"], "list_datasets"),
        "gen_loss_plot": _attr(modules["control"], "gen_loss_plot"),
        "locales": _attr(modules["locales"], "LOCALES", dict),
        "runner": _attr(modules["runner"], "Runner", type),
        "modules": modules,
    }
    for name in ("get_save_dir", "load_dataset_info", "get_time"):
        _attr(modules["common"], name)
    manager = _attr(modules["manager"], "Manager", type)
    for name in ("get_base_elems", "get_elem_by_id", "add_elems"):
        _method(manager, name, f"{_LF_WEBUI}.manager")
    for name in ("_initialize", "_parse_train_args", "preview_train", "set_abort", "monitor"):
        _method(pieces["runner"], name, f"{_LF_WEBUI}.runner")
    return pieces


def patch_llamaboard(interface: ModuleType) -> None:
    r"""Add the agentic panel, checks, RL monitor and rollout viewer to LLaMA-Board (idempotent).

    Raises:
        PatchError: LLaMA-Board does not look as in llamafactory 0.9.5.
    """
    pieces = _preconditions(interface)
    if getattr(pieces["create_train_tab"], "__agentic_patched__", False):
        return

    from ..webui.locales import build_locales

    additions = build_locales()
    clashes = sorted(set(additions) & set(pieces["locales"]))
    if clashes:
        raise PatchError(f"{_LF_WEBUI}.locales", f"the panel's element names are taken: {clashes}")

    pieces["locales"].update(additions)
    interface.CSS = pieces["css"] + EXTRA_CSS
    interface.create_train_tab = _wrap_create_train_tab(pieces["create_train_tab"])
    pieces["modules"]["components.train"].list_datasets = _wrap_list_datasets(pieces["list_datasets"])
    pieces["modules"]["control"].gen_loss_plot = _wrap_gen_loss_plot(pieces["gen_loss_plot"])
    _patch_runner(pieces["runner"])


def _mark(func: Any) -> Any:
    func.__agentic_patched__ = True
    return func


def _wrap_create_train_tab(original: Any) -> Any:
    @functools.wraps(original)
    def create_train_tab(engine: Any) -> dict[str, Any]:
        from ..webui import panel
        from ..webui.fields import panel_fields

        panel_elems = panel.build_panel()
        fields = {panel_elems[field.name] for field in panel_fields()}
        captured: dict[str, set] = {}
        base = engine.manager.get_base_elems

        def get_base_elems() -> set:
            elems = base() | fields  # LLaMA-Board's tab adds its own inputs to this very set
            captured["input_elems"] = elems
            return elems

        engine.manager.get_base_elems = get_base_elems
        try:
            lf_elems = original(engine)
        finally:
            del engine.manager.get_base_elems

        if "input_elems" not in captured:
            raise PatchError(f"{_LF_WEBUI}.components.train", "create_train_tab did not call get_base_elems")
        monitor_elems = panel.build_monitor()
        panel.place(panel_elems, monitor_elems, lf_elems)
        panel.wire(engine, lf_elems, panel_elems, monitor_elems, captured["input_elems"])
        public = {name: elem for name, elem in monitor_elems.items() if not name.startswith("_")}
        return {**lf_elems, **panel_elems, **public}

    return _mark(create_train_tab)


def _wrap_list_datasets(original: Any) -> Any:
    @functools.wraps(original)
    def list_datasets(dataset_dir: str | None = None, training_stage: str | None = None) -> Any:
        import gradio as gr
        from llamafactory.webui.common import DEFAULT_DATA_DIR, load_dataset_info

        from ..common.stages import STAGES
        from ..webui.panel import rank_datasets, stage_name

        stage = stage_name(training_stage)
        if stage not in STAGES:
            return original(dataset_dir) if training_stage is None else original(dataset_dir, training_stage)
        info = load_dataset_info(dataset_dir if dataset_dir is not None else DEFAULT_DATA_DIR)
        return gr.Dropdown(choices=rank_datasets(stage, info))

    return _mark(list_datasets)


def _wrap_gen_loss_plot(original: Any) -> Any:
    @functools.wraps(original)
    def gen_loss_plot(trainer_log: list[dict[str, Any]]) -> Any:
        if not any(key.startswith(("rollout/", "reward/")) for record in trainer_log for key in record):
            return original(trainer_log)
        from ..webui.monitor import loss_figure

        return loss_figure(trainer_log)

    return _mark(gen_loss_plot)


def _patch_runner(runner: type) -> None:
    original_initialize = runner._initialize
    original_parse = runner._parse_train_args
    original_preview = runner.preview_train

    @functools.wraps(original_initialize)
    def _initialize(self, data, do_train, from_preview):
        error = original_initialize(self, data, do_train, from_preview)
        if error or not do_train:
            return error
        from ..webui.panel import start_error

        return start_error(self, data, from_preview)

    @functools.wraps(original_parse)
    def _parse_train_args(self, data):
        from ..webui.panel import add_panel_args

        return add_panel_args(self, data, original_parse(self, data))

    @functools.wraps(original_preview)
    def preview_train(self, data):
        from ..webui.panel import extend_preview

        for outputs in original_preview(self, data):
            yield extend_preview(self, data, outputs)

    original_abort = runner.set_abort
    original_monitor = runner.monitor

    @functools.wraps(original_abort)
    def set_abort(self):
        self._agentic_aborted = True  # LLaMA-Board's own flag is cleared before its last monitor output
        return original_abort(self)

    @functools.wraps(original_monitor)
    def monitor(self):
        from ..common.stages import STAGES
        from ..webui.panel import aborted_output, stage_name

        self._agentic_aborted = False
        data = self.running_data or {}
        get = lambda elem_id: data.get(self.manager.get_elem_by_id(elem_id))  # noqa: E731
        plugin = self.do_train and stage_name(get("train.training_stage")) in STAGES
        lang = get("top.lang")
        for outputs in original_monitor(self):
            if plugin and self._agentic_aborted:
                outputs = aborted_output(self, outputs, lang)
            yield outputs

    runner.set_abort = _mark(set_abort)
    runner.monitor = _mark(monitor)
    runner._initialize = _mark(_initialize)
    runner._parse_train_args = _mark(_parse_train_args)
    runner.preview_train = _mark(preview_train)
