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

"""Every change the plugin makes to LLaMA-Factory, one function per patched module.

Each patch first checks that the module looks as it does in the supported LLaMA-Factory release and raises
`PatchError` (naming that release) otherwise; it is idempotent (a second call is a no-op).
"""

import dataclasses
import functools
import typing
from types import ModuleType
from typing import Any, Literal

from ..common.log import get_logger
from ..common.stages import STAGES, get_stage
from ..validation import validate_arguments


SUPPORTED_LLAMAFACTORY = ("0.9.5",)


class PatchError(RuntimeError):
    r"""A patch's precondition failed: LLaMA-Factory is not the release the plugin was written for."""

    def __init__(self, module: str, what: str, found_version: str | None = None):
        r"""Build the message from the patched `module`, `what` failed and the installed version, if known."""
        supported = ", ".join(SUPPORTED_LLAMAFACTORY)
        found = f" (found llamafactory {found_version})" if found_version else ""
        super().__init__(
            f"llamafactory-agentic cannot patch `{module}`: {what}. It supports llamafactory=={supported}{found}. "
            f"Install it with `pip install llamafactory=={SUPPORTED_LLAMAFACTORY[-1]}`, or set "
            "LLAMAFACTORY_AGENTIC_DISABLE=1 to run LLaMA-Factory without the plugin."
        )


def _require(module: ModuleType, attr: str, kind: type | tuple[type, ...] | None = None) -> Any:
    if not hasattr(module, attr):
        raise PatchError(module.__name__, f"attribute `{attr}` is missing")

    value = getattr(module, attr)
    if kind is not None and not isinstance(value, kind):
        raise PatchError(module.__name__, f"`{attr}` is a {type(value).__name__}, expected {kind}")

    return value


# ---------------------------------------------------------------------------------------------- extras.constants
def patch_constants(module: ModuleType) -> None:
    r"""Add the plugin's stages to `TRAINING_STAGES`, the source of LLaMA-Board's stage drop-down."""
    stages = _require(module, "TRAINING_STAGES", dict)
    for spec in STAGES.values():
        stages.setdefault(spec.display_name, spec.name)


# ---------------------------------------------------------------------------------------------- data
def patch_data(module: ModuleType) -> None:
    r"""Register the plugin's dataset converters (`arpo_rl`, `arpo_sft`) and inline-tag templates."""
    from .data_registration import register_data_extensions

    converter = __import__("llamafactory.data.converter", fromlist=["DATASET_CONVERTERS"])
    _require(converter, "DATASET_CONVERTERS", dict)
    _require(converter, "register_dataset_converter")
    template = __import__("llamafactory.data.template", fromlist=["TEMPLATES"])
    _require(template, "TEMPLATES", dict)
    _require(template, "register_template")
    register_data_extensions()


# ---------------------------------------------------------------------------------------------- hparams.parser
_ARG_LISTS = ("_TRAIN_ARGS", "_INFER_ARGS", "_EVAL_ARGS", "_TRAIN_MCA_ARGS")


@functools.cache
def build_finetuning_arguments_class(base: type) -> type:
    r"""Build `AgenticFinetuningArguments`: LLaMA-Factory's `FinetuningArguments` plus every plugin field.

    `stage` additionally accepts the registry's stages. In `__post_init__` a stage that runs as one of LLaMA-Factory's
    stages (`agentic_sft` -> `sft`) is rewritten to that stage and remembered in `agentic_stage`, so every check and
    loader of LLaMA-Factory treats it exactly like SFT; `arpo`/`aepo` keep their name.

    Raises:
        PatchError: if `base` has no `stage` field of `Literal` type.
    """
    from ..hparams import AgenticArguments

    base_fields = {f.name: f for f in dataclasses.fields(base)}
    if "stage" not in base_fields:
        raise PatchError("llamafactory.hparams.finetuning_args", "FinetuningArguments has no `stage` field")

    base_stages = typing.get_args(typing.get_type_hints(base)["stage"])
    if not base_stages:
        raise PatchError("llamafactory.hparams.finetuning_args", "`FinetuningArguments.stage` is not a Literal")

    clashes = {f.name for f in dataclasses.fields(AgenticArguments)} & set(base_fields)
    if clashes:
        raise PatchError("llamafactory.hparams.finetuning_args", f"plugin keys clash with its fields: {clashes}")

    stage_type = Literal[tuple(dict.fromkeys(base_stages + tuple(STAGES)))]  # type: ignore[misc]

    def __post_init__(self) -> None:
        spec = get_stage(self.stage)
        self.agentic_stage = spec.name if spec is not None else None
        if spec is not None and spec.runs_as is not None:
            self.stage = spec.runs_as

        base.__post_init__(self)
        validate_arguments(self, rl=spec is not None and spec.dataset_kind == "rl")  # the one validator

    namespace = {
        "__module__": __name__,
        "__qualname__": "AgenticFinetuningArguments",
        "__doc__": (base.__doc__ or "") + "\n\nWith the fields of `llamafactory_agentic.hparams.AgenticArguments`.",
        "__annotations__": {"stage": stage_type},
        "stage": dataclasses.field(
            default=base_fields["stage"].default,
            metadata={"help": "Which stage will be performed in training (plugin stages: " + ", ".join(STAGES) + ")."},
        ),
        "__post_init__": __post_init__,
    }
    cls = type("AgenticFinetuningArguments", (base, AgenticArguments), namespace)
    return dataclasses.dataclass(cls)


def patch_parser(module: ModuleType) -> None:
    r"""Swap `FinetuningArguments` for `AgenticFinetuningArguments` in every argument list the parser builds from.

    The parser's auto-resume (`get_train_args` calls `get_last_checkpoint(output_dir)` when `output_dir` exists and
    `overwrite_output_dir` is off) gets `train.checkpoints.last_complete_checkpoint`, which skips, with a warning
    naming it, a checkpoint folder whose save was interrupted (no readable `trainer_state.json`) instead of resuming
    from it and failing after the model loaded. This applies to every stage.
    """
    from ..train.checkpoints import last_complete_checkpoint

    base = _require(module, "FinetuningArguments", type)
    _require(module, "get_last_checkpoint")
    module.get_last_checkpoint = last_complete_checkpoint
    agentic_cls = build_finetuning_arguments_class(base)
    for name in _ARG_LISTS:
        arg_list = _require(module, name, list)
        for i, cls in enumerate(arg_list):
            if cls is base:
                arg_list[i] = agentic_cls

    if agentic_cls not in module._TRAIN_ARGS:
        raise PatchError(module.__name__, "`_TRAIN_ARGS` does not contain FinetuningArguments")


# ---------------------------------------------------------------------------------------------- train.tuner
def patch_tuner(module: ModuleType) -> None:
    r"""Dispatch the plugin's stages from LLaMA-Factory's `_training_function`.

    * `agentic_sft` runs as `sft`: `run_sft` (looked up by name in the tuner module) is wrapped so that the plugin's
      `run_agentic_sft` prepares the template, data and checks, then calls the original `run_sft`.
    * `arpo`/`aepo`: LLaMA-Factory builds its callbacks (LogCallback, reporters, early stopping, ...) into the list it
      was given and then raises `ValueError("Unknown task: <stage>.")` for a stage it does not know. The wrapper keeps
      the arguments parsed by `get_train_args`, catches exactly that error and calls the stage's workflow with those
      arguments and the already-built callbacks, then tears down the process group as LLaMA-Factory does.
    """
    original_training_function = _require(module, "_training_function")
    original_get_train_args = _require(module, "get_train_args")
    original_run_sft = _require(module, "run_sft")
    if getattr(original_training_function, "__agentic_patched__", False):
        return

    parsed: dict[str, tuple] = {}

    @functools.wraps(original_get_train_args)
    def get_train_args(*args, **kwargs):
        result = original_get_train_args(*args, **kwargs)
        parsed["last"] = result
        return result

    @functools.wraps(original_run_sft)
    def run_sft(model_args, data_args, training_args, finetuning_args, generating_args, callbacks=None):
        spec = get_stage(getattr(finetuning_args, "agentic_stage", None))
        if spec is None or spec.runs_as != "sft":
            return original_run_sft(model_args, data_args, training_args, finetuning_args, generating_args, callbacks)

        workflow = spec.load_workflow()
        return workflow(model_args, data_args, training_args, finetuning_args, generating_args, callbacks)

    @functools.wraps(original_training_function)
    def _training_function(config: dict[str, Any]) -> None:
        parsed.pop("last", None)
        try:
            return original_training_function(config)
        except ValueError as err:
            args = parsed.get("last")
            if args is None:
                raise

            model_args, data_args, training_args, finetuning_args, generating_args = args
            spec = get_stage(getattr(finetuning_args, "agentic_stage", None))
            if spec is None or spec.runs_as is not None or str(err) != f"Unknown task: {finetuning_args.stage}.":
                raise

        workflow = spec.load_workflow()
        workflow(model_args, data_args, training_args, finetuning_args, generating_args, config.get("callbacks"))
        _destroy_process_group()

    _training_function.__agentic_patched__ = True
    module.get_train_args = get_train_args
    module.run_sft = run_sft
    module._training_function = _training_function


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as err:  # same tolerance as LLaMA-Factory's own teardown
            get_logger(__name__).warning(f"Failed to destroy process group: {err}.")


def _patch_launcher(module: ModuleType) -> None:
    r"""See `eval_command.patch_launcher`."""
    from .eval_command import patch_launcher

    patch_launcher(module)


# ---------------------------------------------------------------------------------------------- webui.interface
def patch_llamaboard(module: ModuleType) -> None:
    r"""LLaMA-Board: the agentic panel, checks before Start, live RL plots and the rollout viewer (see `llamaboard`)."""
    from .llamaboard import patch_llamaboard as apply

    apply(module)


PATCHES = {
    "llamafactory.extras.constants": ("stages in LLaMA-Board", patch_constants),
    "llamafactory.data": ("dataset formats and inline-tag templates", patch_data),
    "llamafactory.hparams.parser": ("stages and hyper-parameters in the parser", patch_parser),
    "llamafactory.train.tuner": ("stage dispatch in llamafactory-cli train", patch_tuner),
    "llamafactory.launcher": ("llamafactory-cli eval runs the evaluation harness", _patch_launcher),
}

# Applied when LLaMA-Board is imported (`llamafactory-cli webui`); `register()` does not import it (gradio is heavy)
# but patches it when it is already imported.
LLAMABOARD_PATCHES = {
    "llamafactory.webui.interface": ("agentic panel, checks, RL monitor and rollout viewer", patch_llamaboard),
}
