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

"""The gradio side of the agentic panel inside LLaMA-Board's Train tab.

`llamafactory_agentic.integration.llamaboard` calls, around LLaMA-Board's own `create_train_tab`:

1. `build_panel()` - the "Agentic configurations" accordion: the checks box and one sub-accordion per group of
   `fields.GROUPS`, every field built from its `PanelField`. Its fields join LLaMA-Board's input elements, so Preview,
   Start, Save and Load arguments and the restore of a running job carry them like LLaMA-Board's own fields.
2. `build_monitor()` - the RL metric plot (under the loss plot), the rollout progress line (under the progress bar),
   the rollout viewer and a 2-second timer (LLaMA-Board's monitor loop polls every 2 seconds too).
3. `place()` - moves the panel under the first rows of the tab and the monitor parts beside LLaMA-Board's.
4. `wire()` - the events: stage and AEPO variant changes, checks, timer, viewer.

and, from the patched `Runner`: `add_panel_args` (the panel's keys in the command), `start_error` (Start refused on
a failed check) and `extend_preview` (effective values under the previewed command).
"""

import json
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import gradio as gr

from ..common.stages import STAGES
from .checks import Finding, dataset_fit, format_findings, run_checks
from .fields import (
    FIELD_STAGES,
    GROUPS,
    PRESET_CHOICE,
    RL_STAGES,
    effective_values,
    field_by_name,
    format_effective,
    initial_value,
    panel_args,
    panel_fields,
    placeholder,
    stage_preset,
    ui_choices,
)
from .locales import build_locales, message
from .monitor import gaming_warnings, is_aepo_run, log_signature, progress_line, read_jsonl, rl_figure
from .recipes import BOARD_KEYS, read_recipe, recipe_choices, recipe_form
from .rollouts import render_rollout, rollout_index


if TYPE_CHECKING:
    from gradio.components import Component


RECIPE_SETTLE_S = 1.0  # Load recipe's second step waits for the events its first step set off (see `wire_recipe`)
TIMER_SECONDS = 2.0  # LLaMA-Board's monitor polls the trainer every 2 seconds (Runner.monitor)
FIELDS_PER_ROW = 4
OPEN_GROUPS = ("rollout", "tools", "reward", "aepo", "sft", "data")
BOARD_IDS = tuple(BOARD_KEYS.values())
RECIPE_KEY_OF = {elem_id: key for key, elem_id in BOARD_KEYS.items()}
_DEFAULT_DIR = re.compile(r"^(?P<prefix>[A-Za-z0-9_]+)_(?P<time>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2})$")


# ---------------------------------------------------------------------------------------------- helpers
def stage_name(display_name: str | None) -> str | None:
    r"""Stage of LLaMA-Board's stage drop-down label (`"ARPO (agentic RL)"` -> `arpo`)."""
    from llamafactory.extras.constants import TRAINING_STAGES

    return TRAINING_STAGES.get(display_name) if display_name else None


def _getter(runner: Any, data: dict["Component", Any]):
    manager = runner.manager

    def get(elem_id: str, default: Any = None) -> Any:
        try:
            return data.get(manager.get_elem_by_id(elem_id), default)
        except KeyError:
            return default

    return get


def panel_values(runner: Any, data: dict["Component", Any]) -> dict[str, Any]:
    r"""`{element name: UI value}` of the panel's fields present in LLaMA-Board's input `data`."""
    get = _getter(runner, data)
    missing = object()
    values = {}
    for field in panel_fields():
        value = get(f"train.{field.name}", missing)
        if value is not missing:
            values[field.name] = value
    return values


def output_path(model_name: str | None, finetuning_type: str, output_dir: str | None) -> str:
    r"""LLaMA-Board's path of an output directory (`saves/<model>/<method>/<dir>`, or the path itself)."""
    from llamafactory.webui.common import get_save_dir

    return str(get_save_dir(model_name or "", finetuning_type or "", output_dir or ""))


def default_output_dir(
    stage: str,
    output_dir: str | None,
    current_time: str,
    start_paths: Iterable[str],
    taken: Callable[[str], bool] | None = None,
    now_time: str | None = None,
) -> str | None:
    r"""The output directory to switch to when the stage changes, or None to keep the current one.

    A name of the default form `<stage>_<time>` (LLaMA-Board's is `train_<time>`) follows the stage; an output
    directory that is the checkpoint the run starts from becomes `<stage>_<time>`. A default name that already holds a
    run (`taken`) is replaced by one with `now_time`: switching the stage away and back must not lead back into a
    finished run, which Start would resume past its end.

    Args:
        stage: The new stage.
        output_dir: The current output directory name.
        current_time: LLaMA-Board's time of the page (`<time>` of its default names).
        start_paths: Checkpoint paths the run starts from.
        taken: Whether an output directory name already holds a run (None: never).
        now_time: The time now, for a new name when the default one is taken (defaults to `current_time`).
    """
    now_time = now_time or current_time
    match = _DEFAULT_DIR.match(output_dir or "")
    prefix = stage if stage in STAGES else "train"
    if match:
        wanted = f"{prefix}_{match.group('time')}"
        if taken is not None and taken(wanted):
            wanted = f"{prefix}_{now_time}"
            if taken(wanted) or wanted == output_dir:  # the same second twice: keep the current name
                return None
        return wanted if wanted != output_dir else None
    if stage in STAGES and output_dir and output_dir in set(start_paths):
        return f"{stage}_{now_time if taken is not None and taken(f'{stage}_{current_time}') else current_time}"
    return None


def holds_run(path: str) -> bool:
    r"""Whether the output directory `path` holds a run (LLaMA-Board's config, training arguments or a checkpoint)."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(
        name in ("llamaboard_config.yaml", "training_args.yaml") or name.startswith("checkpoint-") for name in names
    )


def stage_change_note(stage: str | None, variant: str | None, values: dict[str, Any], lang: str | None) -> str:
    r"""The checks box after a stage change: the previous stage's findings are gone; typed preset values are named.

    Args:
        stage: The new stage.
        variant: The AEPO variant drop-down value.
        values: `{element name: UI value}` of the panel's preset fields.
        lang: LLaMA-Board's language.

    Returns:
        Markdown: "checks not run for this stage" and, for an RL stage, the keys whose typed value replaces a
        different value of the stage's preset (e.g. `arpo_beam_size` 4 typed under ARPO, AEPO's preset 2).
    """
    title = f"**{message('checks_title', lang)}** — {message('checks_stage_changed', lang, stage=stage)}"
    if stage not in RL_STAGES:
        return title
    try:
        typed = panel_args(stage, values)
    except ValueError:
        return title
    preset = stage_preset(stage, None if variant == PRESET_CHOICE else variant)
    kept = [
        f"`{key}` {value} (preset {preset[key]})"
        for key, value in typed.items()
        if key in preset and not callable(preset[key]) and preset[key] != value
    ]
    if not kept:
        return title
    from types import SimpleNamespace

    from ..train.presets import preset_name

    name = preset_name(
        SimpleNamespace(agentic_stage=stage, aepo_variant=variant if variant in ("paper", "released") else "released")
    )
    return title + "\n\n- ℹ " + message("kept_values", lang, preset=name, values=", ".join(kept))


# ---------------------------------------------------------------------------------------------- build
def _component(name: str, locales: dict[str, Any]) -> "Component":
    field = field_by_name(name)
    text = locales[name]["en"]
    common = dict(label=text["label"], info=text["info"], elem_id=f"ag-{name}")
    if field.kind == "bool" and not field.optional:
        return gr.Checkbox(value=field.default, **common)
    if field.kind in ("choice", "bool"):
        return gr.Dropdown(choices=ui_choices(field), value=initial_value(field), **common)
    if field.kind == "text" and field.choices:
        return gr.Dropdown(choices=list(field.choices), value=initial_value(field), allow_custom_value=True, **common)
    if field.kind == "text":
        return gr.Textbox(value=initial_value(field), placeholder=placeholder(field), **common)
    precision = 0 if field.kind == "int" else None
    return gr.Number(value=initial_value(field), precision=precision, placeholder=placeholder(field), **common)


def build_panel() -> dict[str, "Component"]:
    r"""Build the agentic accordion (hidden until a plugin stage is chosen) in the current gradio context."""
    locales = build_locales()
    elems: dict[str, Component] = {}
    with gr.Accordion(
        open=True, visible=False, label=locales["agentic_tab"]["en"]["label"], elem_id="agentic_panel"
    ) as agentic_tab:
        with gr.Row():
            recipe = gr.Dropdown(
                choices=recipe_choices(),
                value=None,
                allow_custom_value=True,
                scale=4,
                label=locales["agentic_recipe"]["en"]["label"],
                info=locales["agentic_recipe"]["en"]["info"],
                elem_id="agentic_recipe",
            )
            recipe_btn = gr.Button(
                value=locales["agentic_recipe_btn"]["en"]["value"],
                scale=0,
                min_width=140,
                elem_id="agentic_recipe_btn",
            )
        with gr.Row():
            checks = gr.Markdown(
                f"**{message('checks_title', 'en')}** — {message('checks_not_run', 'en')}", elem_id="agentic_checks"
            )
            check_btn = gr.Button(
                value=locales["agentic_check_btn"]["en"]["value"], scale=0, min_width=140, elem_id="agentic_check_btn"
            )
        for group, _, names in GROUPS:
            tab_name = f"agentic_{group}_tab"
            with gr.Accordion(open=group in OPEN_GROUPS, visible=False, label=locales[tab_name]["en"]["label"]) as tab:
                for start in range(0, len(names), FIELDS_PER_ROW):
                    with gr.Row():
                        for name in names[start : start + FIELDS_PER_ROW]:
                            elems[name] = _component(name, locales)
            elems[tab_name] = tab
    elems.update(
        agentic_tab=agentic_tab,
        agentic_checks=checks,
        agentic_check_btn=check_btn,
        agentic_recipe=recipe,
        agentic_recipe_btn=recipe_btn,
    )
    return elems


def build_monitor() -> dict[str, Any]:
    r"""Build the RL plot, the rollout progress line, the rollout viewer and the timer (placed by `place`)."""
    locales = build_locales()
    # no label over the plot: it covered the first panel's title (the figure's panels carry their own titles)
    rl_viewer = gr.Plot(
        label=locales["rl_viewer"]["en"]["label"], show_label=False, visible=False, elem_id="agentic_rl_plot"
    )
    rl_warnings = gr.Markdown("", elem_id="agentic_rl_warnings")  # the reward-gaming monitor's warnings of the run
    rollout_progress = gr.Markdown("", elem_id="agentic_rollout_progress")
    with gr.Accordion(
        open=False, visible=False, label=locales["rollout_viewer_tab"]["en"]["label"], elem_id="agentic_rollout_viewer"
    ) as rollout_viewer_tab:
        with gr.Row():
            rollout_step = gr.Dropdown(
                choices=[],
                value=None,
                scale=4,
                label=locales["rollout_step"]["en"]["label"],
                info=locales["rollout_step"]["en"]["info"],
                elem_id="agentic_rollout_step",
            )
            rollout_refresh_btn = gr.Button(
                value=locales["rollout_refresh_btn"]["en"]["value"], scale=1, elem_id="agentic_rollout_refresh"
            )
        rollout_html = gr.HTML("", elem_id="agentic_rollout_html")
    timer = gr.Timer(TIMER_SECONDS)
    monitor_state = gr.State({})
    return {
        "rl_viewer": rl_viewer,
        "rl_warnings": rl_warnings,
        "rollout_progress": rollout_progress,
        "rollout_viewer_tab": rollout_viewer_tab,
        "rollout_step": rollout_step,
        "rollout_refresh_btn": rollout_refresh_btn,
        "rollout_html": rollout_html,
        "_timer": timer,
        "_monitor_state": monitor_state,
    }


def _enclosing(block: Any, kind: type | None = None, container: Any = None) -> Any:
    r"""The nearest ancestor of `block` (itself included) that is a `kind`, or whose parent is `container`.

    Gradio wraps form fields of a row in a `Form` block, so a field's parent is not the row it was built in.
    """
    while block is not None:
        if (kind is not None and isinstance(block, kind)) or (container is not None and block.parent is container):
            return block
        block = block.parent
    raise ValueError("LLaMA-Board's Train tab does not have the expected layout")


def _move_after(block: Any, anchor: Any) -> None:
    r"""Move an already built gradio block right after `anchor` in `anchor`'s container (layout order only)."""
    block.parent.children.remove(block)
    container = anchor.parent
    container.children.insert(container.children.index(anchor) + 1, block)
    block.parent = container


def place(panel: dict[str, Any], monitor: dict[str, Any], lf: dict[str, Any]) -> None:
    r"""Move the panel and the monitor parts to their places in LLaMA-Board's Train tab.

    The panel goes after the tab's first rows (before "Extra configurations"), the RL plot across the page under the
    row of the progress bar and the loss plot, the rollout progress line under the progress bar and the
    reward-gaming warnings under it; the viewer stays at the end of the tab.
    """
    tab = panel["agentic_tab"].parent
    _move_after(panel["agentic_tab"], _enclosing(lf["cutoff_len"], container=tab))
    # the RL plot under the row of the progress and the loss plot, across the page (in the loss plot's column it
    # was 320 px wide); the reward-gaming warnings under the rollout progress line, beside the run's progress
    _move_after(monitor["rl_viewer"], _enclosing(lf["loss_viewer"], container=tab))
    _move_after(monitor["rollout_progress"], _enclosing(lf["progress_bar"], kind=gr.Row))
    _move_after(monitor["rl_warnings"], monitor["rollout_progress"])
    lf["output_box"].elem_classes = list(lf["output_box"].elem_classes or []) + ["agentic-output"]


def wire_recipe(manager: Any, lf: dict[str, Any], panel: dict[str, Any]) -> None:
    r"""Wire *Load recipe*: the picked recipe fills LLaMA-Board's fields and the panel's (`recipes.recipe_form`).

    Two steps: the first sets the model name (`Custom` unless the chosen model already points at the recipe's path),
    the method and the stage, whose own change events reset the model path, template, dataset and output directory
    (LLaMA-Board's `get_model_info`, `change_stage`, the panel's `on_stage`); the second waits `RECIPE_SETTLE_S` for
    them and sets everything else: LLaMA-Board's fields, every panel field (those the recipe leaves out back to
    their default) and *Extra arguments* (the current JSON with the recipe's other keys, and a value a slider cannot
    hold, e.g. `save_steps: 2` under its minimum of 10). The checks box says what was loaded or why not.
    """
    from llamafactory.extras.constants import TRAINING_STAGES

    labels = {stage: label for label, stage in TRAINING_STAGES.items()}
    lang, model_name = manager.get_elem_by_id("top.lang"), manager.get_elem_by_id("top.model_name")
    first = [model_name, manager.get_elem_by_id("top.finetuning_type"), lf["training_stage"]]
    state = gr.State({})
    board_ids = sorted(
        {"top.model_path", "top.template", "train.compute_type"}
        | {elem_id for elem_id in BOARD_IDS if elem_id.startswith("train.") and elem_id != "train.training_stage"}
    )
    # the Train tab's own elements join the manager only after the tab is built: take them from `lf`
    board_elems = {
        elem_id: lf[elem_id[len("train.") :]] if elem_id.startswith("train.") else manager.get_elem_by_id(elem_id)
        for elem_id in board_ids
    }
    fields = list(panel_fields())
    extra_box = lf["extra_args"]

    def load(path, lang_value, model):
        from llamafactory.webui.common import get_model_path

        try:
            recipe, resolved = read_recipe(path)
            form = recipe_form(recipe, labels)
        except ValueError as err:
            return gr.skip(), gr.skip(), gr.skip(), {"error": message("recipe_failed", lang_value, error=str(err))}
        board = form["board"]
        wanted = board.get("top.model_path")
        try:
            same = bool(model) and wanted is not None and get_model_path(model) == wanted
        except Exception:  # LLaMA-Board's user config unreadable: a custom path is always right
            same = False
        return (
            gr.skip() if same or wanted is None else "Custom",
            board.get("top.finetuning_type", gr.skip()),
            board.get("train.training_stage", gr.skip()),
            {**form, "path": resolved},
        )

    def fill(loaded, lang_value, extra_text):
        if "error" in loaded:
            gr.Warning(loaded["error"])
            return {panel["agentic_checks"]: f"✖ {loaded['error']}"}
        time.sleep(RECIPE_SETTLE_S)
        try:
            extra = json.loads(extra_text or "{}")
        except json.JSONDecodeError:
            extra = {}
        extra = extra if isinstance(extra, dict) else {}
        extra.update(loaded["extra"])
        out: dict[Any, Any] = {}
        for elem_id, value in loaded["board"].items():
            elem = board_elems.get(elem_id)
            if elem is None:
                continue
            low, high = getattr(elem, "minimum", None), getattr(elem, "maximum", None)
            if isinstance(value, (int, float)) and low is not None and high is not None and not low <= value <= high:
                extra[RECIPE_KEY_OF[elem_id]] = value  # LLaMA-Board applies the extra arguments last
                continue
            out[elem] = value
        for field in fields:
            out[panel[field.name]] = loaded["panel"].get(field.name, initial_value(field))
        out[extra_box] = json.dumps(extra)
        board_count = len(loaded["board"])
        out[panel["agentic_checks"]] = message(
            "recipe_loaded", lang_value, path=loaded["path"], board=board_count, panel=len(loaded["panel"]),
            extra=", ".join(f"`{key}`" for key in loaded["extra"]) or "-",
        )  # fmt: skip
        return out

    outputs = [*board_elems.values(), *[panel[field.name] for field in fields], extra_box, panel["agentic_checks"]]
    panel["agentic_recipe_btn"].click(load, [panel["agentic_recipe"], lang, model_name], [*first, state]).then(
        fill, [state, lang, extra_box], outputs
    )


# ---------------------------------------------------------------------------------------------- runner hooks
def add_panel_args(runner: Any, data: dict["Component", Any], args: dict[str, Any]) -> dict[str, Any]:
    r"""Add the panel's keys for a plugin stage to LLaMA-Board's `llamafactory-cli train` arguments.

    A key that the Extra arguments JSON also sets keeps the Extra arguments value (it was applied last).

    Raises:
        ValueError: a number field holds text that is not a number (`start_error` reports it first).
    """
    stage = args.get("stage")
    if stage not in STAGES:
        return args
    extra = _extra_args(runner, data)
    for key, value in panel_args(stage, panel_values(runner, data)).items():
        if key not in extra:
            args[key] = value
    return args


def _extra_args(runner: Any, data: dict["Component", Any]) -> dict[str, Any]:
    try:
        extra = json.loads(_getter(runner, data)("train.extra_args") or "{}")
    except ValueError:
        return {}
    return extra if isinstance(extra, dict) else {}


def compute_findings(runner: Any, data: dict["Component", Any]) -> tuple[str | None, list[Finding]]:
    r"""`(stage, findings)` of the checks before Start for LLaMA-Board's input `data` (`(None, [])` for its own stages).

    LLaMA-Board's own validation (model, dataset, output directory, JSON of Extra arguments) comes first; its message
    becomes the single finding when it fails (except "a process is running", which says nothing about the form).
    """
    from llamafactory.extras.misc import get_device_count
    from llamafactory.webui.common import get_time
    from llamafactory.webui.locales import ALERTS

    get = _getter(runner, data)
    stage = stage_name(get("train.training_stage"))
    if stage not in STAGES:
        return None, []
    error = runner._initialize(data, do_train=True, from_preview=True)
    if error and error not in ALERTS["err_conflict"].values():  # a run in progress does not make the form wrong
        return stage, [Finding("error", "LLaMA-Board", error)]
    args = runner._parse_train_args(data)
    extra = _extra_args(runner, data)
    overridden = [key for key in panel_args(stage, panel_values(runner, data)) if key in extra]
    findings = run_checks(
        stage,
        args,
        world_size=get_device_count() or 1,
        suggested_output_dir=f"{stage}_{get_time()}",
        overridden=overridden,
    )
    return stage, findings


def start_error(runner: Any, data: dict["Component", Any], from_preview: bool) -> str:
    r"""The message that refuses Start (or Preview, for a field that is not a number) for a plugin stage ("" = go)."""
    get = _getter(runner, data)
    stage = stage_name(get("train.training_stage"))
    if stage not in STAGES:
        return ""
    try:
        panel_args(stage, panel_values(runner, data))
    except ValueError as err:
        return str(err)
    if from_preview:
        return ""
    _, findings = compute_findings(runner, data)
    errors = [f for f in findings if f.level == "error"]
    if not errors:
        return ""
    lang = get("top.lang")
    lines = [message("start_blocked", lang)] + [
        f"- {f.show('subject', lang)} {f.show('message', lang)}" for f in errors
    ]
    return "\n".join(lines)


def saved_run(output_dir: str | None) -> tuple[int, str | None] | None:
    r"""`(global step, last complete checkpoint or None)` when the trainer saved a model in `output_dir`, else None.

    An Abort in LLaMA-Board sends SIGABRT; LLaMA-Factory's `LogCallback` then stops training after the current step,
    and the workflow saves the model (`trainer.save_model`, LLaMA-Factory's `CHECKPOINT_NAMES`) and the trainer state
    in the output directory as at a normal end.
    """
    import json

    from llamafactory.extras.constants import CHECKPOINT_NAMES

    from ..train.checkpoints import TRAINER_STATE_NAME, last_complete_checkpoint

    if not output_dir or not os.path.isdir(output_dir):
        return None
    if not any(os.path.isfile(os.path.join(output_dir, name)) for name in CHECKPOINT_NAMES):
        return None
    try:
        with open(os.path.join(output_dir, TRAINER_STATE_NAME), encoding="utf-8") as f:
            step = int(json.load(f).get("global_step") or 0)
    except (OSError, ValueError, AttributeError):
        step = 0
    return step, last_complete_checkpoint(output_dir)


def aborted_output(
    runner: Any, outputs: dict["Component", Any], lang: str | None, output_dir: str | None = None
) -> dict["Component", Any]:
    r"""LLaMA-Board's last monitor output of an aborted run with "Aborted" instead of "Finished".

    LLaMA-Board's `Runner.monitor` ends an aborted run like a finished one: the output box starts with "Finished."
    above the log. For a plugin stage that first line becomes "Aborted" with what was saved: when the trainer saved
    its model in `output_dir` (`saved_run`: it stopped after a step), the step, the folder and what the next Start
    there does (resume from the last complete checkpoint, or be refused: LLaMA-Factory's parser asks for
    `overwrite_output_dir` when the folder holds a model and no checkpoint); otherwise that no final model was saved.
    """
    from llamafactory.webui.locales import ALERTS

    output_box = runner.manager.get_elem_by_id("train.output_box")
    text = outputs.get(output_box)
    finished = ALERTS["info_finished"].get(lang or "en", ALERTS["info_finished"]["en"])
    if not isinstance(text, str) or not text.startswith(finished):
        return outputs
    saved = saved_run(output_dir)
    if saved is None:
        note = message("aborted_note", lang)
    else:
        step, checkpoint = saved
        after = (
            message("aborted_next_resume", lang, checkpoint=os.path.basename(checkpoint))
            if checkpoint
            else message("aborted_next_new", lang, name=os.path.basename(os.path.normpath(str(output_dir))))
        )
        note = message("aborted_saved", lang, step=step, path=output_dir, next=after)
    return {**outputs, output_box: note + text[len(finished) :]}


def plan_section(args: dict[str, Any], lang: str | None) -> str:
    r"""Markdown of the run planner's table (`guards.plan`, `llamafactory-agentic plan`) for LLaMA-Board's arguments.

    The arguments are planned as a recipe (paths relative to LLaMA-Board's working directory) on the detected device.
    A recipe the planner cannot plan (an unknown model shape, a batch geometry that does not split) gives one line
    with the planner's message instead of the table: the preview itself is never refused for it.

    Args:
        args: The `llamafactory-cli train` arguments of the preview (`Runner._parse_train_args`, panel keys added).
        lang: LLaMA-Board's language.
    """
    from pathlib import Path

    from ..guards.plan import PlanError, plan_recipe

    recipe = {key: value for key, value in args.items() if value is not None}
    try:
        plan = plan_recipe(recipe, str(args.get("output_dir") or "this run"), Path.cwd())
    except (PlanError, ValueError, TypeError, OSError) as err:  # a half-filled form: say why, keep the preview
        return message("plan_failed", lang, error=str(err))
    return f"**{message('plan_title', lang)}**\n\n```\n{plan.format()}\n```"


def extend_preview(runner: Any, data: dict["Component", Any], outputs: dict["Component", Any]) -> dict:
    r"""Append the effective values of the plugin's keys (presets resolved) and the run plan to the previewed command."""
    get = _getter(runner, data)
    stage = stage_name(get("train.training_stage"))
    output_box = runner.manager.get_elem_by_id("train.output_box")
    text = outputs.get(output_box)
    if stage not in STAGES or not isinstance(text, str) or not text.startswith("```"):
        return outputs  # LLaMA-Factory's stage, or an error instead of a command
    args = runner._parse_train_args(data)
    lang = get("top.lang")
    extra = format_effective(effective_values(stage, args), lang) + "\n\n" + plan_section(args, lang)
    return {**outputs, output_box: text + "\n\n" + extra}


# ---------------------------------------------------------------------------------------------- events
def wire(engine: Any, lf: dict[str, Any], panel: dict[str, Any], monitor: dict[str, Any], input_elems: set) -> None:
    r"""Register the panel's and the monitor's events (see the module docstring)."""
    manager = engine.manager
    lang = manager.get_elem_by_id("top.lang")
    model_name = manager.get_elem_by_id("top.model_name")
    finetuning_type = manager.get_elem_by_id("top.finetuning_type")
    checkpoint_path = manager.get_elem_by_id("top.checkpoint_path")
    stage = lf["training_stage"]
    group_tabs = [panel[f"agentic_{group}_tab"] for group, _, _ in GROUPS]
    preset_fields = [field for field in panel_fields() if field.preset]

    def preset_updates(stage_label: str, variant: str) -> list:
        preset = stage_preset(stage_name(stage_label), variant)
        updates = []
        for field in preset_fields:
            if field.kind in ("int", "float", "text"):
                updates.append(gr.update(placeholder=placeholder(field, preset)))
            else:
                updates.append(gr.update(choices=ui_choices(field, preset)))
        return updates

    def on_stage(stage_label, variant, output_dir, current_time, checkpoint, lang_value, model, method, *typed):
        from llamafactory.webui.common import get_time

        name = stage_name(stage_label)
        plugin, rl = name in STAGES, name in RL_STAGES
        tabs = [gr.update(visible=name in stages) for _, stages, _ in GROUPS]
        own = [gr.update(visible=name in stages) for stages in FIELD_STAGES.values()]
        starts = checkpoint if isinstance(checkpoint, list) else [checkpoint] if checkpoint else []
        new_dir = default_output_dir(
            name,
            output_dir,
            current_time or "",
            starts,
            taken=lambda candidate: holds_run(output_path(model, method, candidate)),
            now_time=get_time(),
        )
        values = {field.name: value for field, value in zip(preset_fields, typed)}
        return [
            gr.update(visible=plugin),
            gr.update(visible=not plugin),
            *tabs,
            *own,
            *preset_updates(stage_label, variant),
            gr.update(value=new_dir) if new_dir else gr.skip(),
            gr.update(visible=rl),
            gr.update(visible=rl),
            stage_change_note(name, variant, values, lang_value) if plugin else gr.skip(),
            "" if not rl else gr.skip(),  # no rollout line under another stage's progress bar
        ]

    stage.change(
        on_stage,
        [
            stage,
            panel["aepo_variant"],
            lf["output_dir"],
            lf["current_time"],
            checkpoint_path,
            lang,
            model_name,
            finetuning_type,
            *[panel[f.name] for f in preset_fields],
        ],
        [
            panel["agentic_tab"],
            lf["rlhf_tab"],
            *group_tabs,
            *[panel[name] for name in FIELD_STAGES],
            *[panel[f.name] for f in preset_fields],
            lf["output_dir"],
            monitor["rl_viewer"],
            monitor["rollout_viewer_tab"],
            panel["agentic_checks"],
            monitor["rollout_progress"],
        ],
        queue=False,
    )
    panel["aepo_variant"].change(
        preset_updates, [stage, panel["aepo_variant"]], [panel[f.name] for f in preset_fields], queue=False
    )

    wire_recipe(manager, lf, panel)

    def on_check(data):
        stage_found, findings = compute_findings(engine.runner, data)
        if stage_found is None:
            return gr.skip()
        return format_findings(findings, data.get(lang), checked_at=time.strftime("%H:%M:%S"))

    for button in (panel["agentic_check_btn"], lf["cmd_preview_btn"], lf["start_btn"]):
        button.click(on_check, input_elems, [panel["agentic_checks"]], concurrency_limit=None)

    def current_path(model, method, output_dir) -> str:
        runner = engine.runner
        if runner.running and runner.running_data is not None and runner.do_train:
            get = _getter(runner, runner.running_data)
            model, method, output_dir = get("top.model_name"), get("top.finetuning_type"), get("train.output_dir")
        return output_path(model, method, output_dir)

    def on_tick(lang_value, stage_label, model, method, output_dir, state):
        if stage_name(stage_label) not in RL_STAGES:
            cleared = {**state, "line": "", "warnings": ""}
            return (
                gr.skip(),
                ("" if state.get("line") else gr.skip()),
                ("" if state.get("warnings") else gr.skip()),
                cleared,
            )
        path = current_path(model, method, output_dir)
        signature = [path, *log_signature(path)]
        state = dict(state)
        running = bool(engine.runner.running and engine.runner.do_train)
        if running and not state.get("running"):  # a run started: a status file older than that is a former run's
            state["since"] = time.time() - TIMER_SECONDS
        state["running"] = running
        line = progress_line(path, lang_value, since=state.get("since") if running else None)
        plot, warned = gr.skip(), state.get("warnings", "")
        if signature != state.get("signature"):
            from llamafactory.extras.constants import TRAINER_LOG

            records = read_jsonl(os.path.join(path, TRAINER_LOG))
            plot = gr.update(value=rl_figure(records, aepo=is_aepo_run(path)))
            warned = gaming_warnings(records, lang_value)
        text = gr.skip() if line == state.get("line") else line
        warnings = gr.skip() if warned == state.get("warnings", "") else warned
        return plot, text, warnings, {**state, "signature": signature, "line": line, "warnings": warned}

    monitor["_timer"].tick(
        on_tick,
        [lang, stage, model_name, finetuning_type, lf["output_dir"], monitor["_monitor_state"]],
        [monitor["rl_viewer"], monitor["rollout_progress"], monitor["rl_warnings"], monitor["_monitor_state"]],
        show_progress="hidden",
        concurrency_limit=None,
    )

    def viewer(lang_value, model, method, output_dir, chosen, render: bool = True):
        from ..train.arpo.metrics import ROLLOUT_LOG_NAME

        path = os.path.join(current_path(model, method, output_dir), ROLLOUT_LOG_NAME)
        index = rollout_index(path)
        choices = index.choices()
        if not choices:
            return gr.update(choices=[], value=None), message("no_rollouts", lang_value, path=path)
        values = [value for _, value in choices]
        value = chosen if chosen in values else values[0]
        html = render_rollout(index.groups(int(value))) if render else gr.skip()
        return gr.update(choices=choices, value=value), html

    viewer_inputs = [lang, model_name, finetuning_type, lf["output_dir"], monitor["rollout_step"]]
    viewer_outputs = [monitor["rollout_step"], monitor["rollout_html"]]
    monitor["rollout_refresh_btn"].click(viewer, viewer_inputs, viewer_outputs, concurrency_limit=None)
    monitor["rollout_viewer_tab"].expand(viewer, viewer_inputs, viewer_outputs, concurrency_limit=None)
    monitor["rollout_step"].input(viewer, viewer_inputs, viewer_outputs, concurrency_limit=None)


def rank_datasets(stage: str, dataset_info: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    r"""LLaMA-Board's dataset choices for a plugin stage: fitting formats first, the others marked.

    Returns:
        `(label, dataset name)` pairs: the plugin's format for the stage first, then other usable formats, then the
        datasets that do not fit (labelled with their formatting).
    """
    ranked = sorted(dataset_info.items(), key=lambda item: dataset_fit(stage, item[1]))  # stable: file order kept
    choices = []
    for name, info in ranked:
        if dataset_fit(stage, info) == 2:
            formatting = "ranking" if info.get("ranking") else info.get("formatting", "alpaca")
            choices.append((f"{name} ({formatting}: not for {stage})", name))
        else:
            choices.append((name, name))
    return choices
