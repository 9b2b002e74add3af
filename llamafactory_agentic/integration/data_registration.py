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

`register_converters` adds the `arpo_rl`, `arpo_sft` and `agentic_raw` converters to `DATASET_CONVERTERS`;
`get_inline_template_name` / `register_default_inline_templates` add the `<base>_agentic` templates to `TEMPLATES`;
`register_data_extensions` does both (called by `patches.patch_data` when `llamafactory.data` is imported, by the RL
loader and by the agentic SFT workflow). The converters and templates themselves are built in
`llamafactory_agentic.data`.
"""

from typing import Any


_DATA = "llamafactory_agentic.data"
INLINE_SUFFIX = "_agentic"
DEFAULT_INLINE_BASES = ("qwen", "qwen3", "qwen3_nothink", "llama3")


def register_data_extensions() -> None:
    r"""Register the `arpo_rl`, `arpo_sft` converters and the default inline-tag templates (idempotent).

    Requires LLaMA-Factory. When LLaMA-Factory's data package is first imported by one of this package's modules
    (e.g. `from llamafactory_agentic.data.converters import ...` in a fresh process), the activation hook calls this
    function while that module is still executing; it is skipped here and registers itself when it finishes.
    """
    if _import_unless_executing("converters") is not None:
        register_converters()

    if _import_unless_executing("inline_template") is not None:
        register_default_inline_templates()


def _import_unless_executing(name: str) -> Any:
    import importlib
    import sys

    module = sys.modules.get(f"{_DATA}.{name}")
    if module is not None and not getattr(module, "MODULE_READY", False):
        return None  # its body is running right now (circular import through the activation hook)

    return importlib.import_module(f"{_DATA}.{name}")


def register_converters() -> None:
    r"""Register `arpo_rl`, `arpo_sft` and `agentic_raw` in LLaMA-Factory's `DATASET_CONVERTERS` (idempotent)."""
    from llamafactory.data.converter import DATASET_CONVERTERS, register_dataset_converter

    from ..data.converters import (
        RAW_FORMATTING,
        RL_FORMATTING,
        SFT_FORMATTING,
        ArpoRLDatasetConverter,
        ArpoSFTDatasetConverter,
        RawRowsConverter,
    )

    for name, converter in (
        (RL_FORMATTING, ArpoRLDatasetConverter),
        (SFT_FORMATTING, ArpoSFTDatasetConverter),
        (RAW_FORMATTING, RawRowsConverter),
    ):
        if DATASET_CONVERTERS.get(name) is not converter:
            DATASET_CONVERTERS.pop(name, None)
            register_dataset_converter(name, converter)


def get_inline_template_name(base_name: str) -> str:
    r"""Register (once) and return the name of the inline-tag variant of LLaMA-Factory's template `base_name`.

    Args:
        base_name: A registered template such as `qwen`, `qwen3`, `llama3`; an already inline name
            (`qwen_agentic`) is returned unchanged.

    Returns:
        `f"{base_name}_agentic"`, registered in `llamafactory.data.template.TEMPLATES`.

    Raises:
        ValueError: if `base_name` is not a registered template, or see `build_inline_template`.
    """
    from llamafactory.data.template import TEMPLATES

    from ..data.inline_template import build_inline_template

    if base_name.endswith(INLINE_SUFFIX) and base_name in TEMPLATES:
        return base_name

    if base_name not in TEMPLATES:
        raise ValueError(f"Template {base_name} does not exist; set `template` to one of LLaMA-Factory's templates.")

    name = base_name + INLINE_SUFFIX
    if name not in TEMPLATES:
        TEMPLATES[name] = build_inline_template(TEMPLATES[base_name])

    return name


def register_default_inline_templates() -> list[str]:
    r"""Register the inline-tag variants of `DEFAULT_INLINE_BASES` present in this LLaMA-Factory (idempotent).

    Returns:
        The registered names, e.g. `["qwen_agentic", "qwen3_agentic", "qwen3_nothink_agentic", "llama3_agentic"]`.
    """
    from llamafactory.data.template import TEMPLATES

    return [get_inline_template_name(base) for base in DEFAULT_INLINE_BASES if base in TEMPLATES]
