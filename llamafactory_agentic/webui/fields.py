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

"""Fields of the agentic panel, derived from the argument dataclasses and the presets (one source of truth).

`GROUPS` only says which keys the panel shows and where. Everything else about a field comes from the dataclass that
defines the key: its type (int, float, bool, text or a `Literal` of choices; `X | None` = may stay unset), its default
and its help text come from `llamafactory_agentic.hparams.AgenticArguments` (or LLaMA-Factory's `GeneratingArguments`
for the sampling keys); whether it is a preset key and its value per stage come from
`llamafactory_agentic.train.presets.PRESETS`. A key renamed or removed there fails `panel_fields()` at once.

Values in the UI: a preset key left empty (number) or at `PRESET_CHOICE` (drop-down) is not written to the command, so
the stage's preset applies; any other field is written only when it differs from the dataclass default.
"""

import dataclasses
import functools
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from ..common.stages import STAGES
from ..hparams import AgenticArguments, agentic_default
from ..train.presets import PRESETS, agentic_namespace, inert_keys, preset_name, resolve_presets


RL_STAGES: tuple[str, ...] = tuple(name for name, spec in STAGES.items() if spec.dataset_kind == "rl")
SFT_STAGES: tuple[str, ...] = tuple(name for name, spec in STAGES.items() if spec.dataset_kind == "sft")
ALL_STAGES: tuple[str, ...] = tuple(STAGES)
PRESET_KEYS: frozenset[str] = frozenset(key for preset in PRESETS.values() for key in preset)
PRESET_CHOICE = "(preset)"  # drop-down value of a preset key that is left to the preset
TRUE, FALSE = "true", "false"  # drop-down values of an optional bool

# LLaMA-Factory's sampling keys (GeneratingArguments), shown under Rollout: element name -> key. The element names
# carry a prefix because LLaMA-Board already has `temperature`/`top_p` elements (Evaluate and Chat tabs).
GENERATING_FIELDS = {"rollout_temperature": "temperature", "rollout_top_p": "top_p", "rollout_top_k": "top_k"}

# Suggested values of free-text keys (the key accepts others: a `module:function` reward, a custom backend).
SEARCH_BACKENDS = ("local", "replay", "web", "retriever")  # llamafactory_agentic.tools.search.build_backend

# (group, stages that show it, element names in display order)
GROUPS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "rollout",
        RL_STAGES,
        (
            "arpo_rollout_n",
            "arpo_initial_rollouts",
            "arpo_beam_size",
            "arpo_branch_rule",
            "arpo_branch_tau",
            "arpo_entropy_weight",
            "arpo_budget_fill",
            "arpo_max_prompt_length",
            "arpo_max_response_length",
            "arpo_rollout_batch_size",
            "arpo_rollout_backend",
            "arpo_hf_generation_batch_size",
            "rollout_temperature",
            "rollout_top_p",
            "rollout_top_k",
            "arpo_rollout_log_ratio",
            "arpo_val_max_samples",
        ),
    ),
    (
        "tools",
        RL_STAGES,
        (
            "agentic_tool_config",
            "agentic_search_backend",
            "agentic_search_index",
            "agentic_cache_path",
            "agentic_cache_mode",
            "agentic_max_tool_calls",
            "agentic_python_timeout",
            "agentic_tool_workers",
        ),
    ),
    (
        "async",
        RL_STAGES,
        (
            "rl_max_staleness",
            "rl_off_policy_correction",
            "rl_off_policy_cap",
            "arpo_server_urls",
            "arpo_server_weight_transfer",
            "arpo_server_timeout",
        ),
    ),
    ("reward", RL_STAGES, ("agentic_reward", "agentic_reward_math", "agentic_reward_tool_bonus")),
    (
        "optim",
        RL_STAGES,
        (
            "rl_epsilon",
            "rl_epsilon_high",
            "rl_kl_coef",
            "rl_entropy_coef",
            "rl_dynamic_sampling",
            "rl_dynamic_sampling_max_batches",
        ),
    ),
    (
        "aepo",
        ("aepo",),
        (
            "aepo_variant",
            "aepo_dynamic_rollouts",
            "aepo_branch_penalty",
            "aepo_branch_penalty_scope",
            "aepo_balanced_clip",
            "aepo_balanced_clip_scope",
            "aepo_entropy_advantage",
        ),
    ),
    ("sft", SFT_STAGES, ("agentic_sft_mask_results", "agentic_sft_check", "agentic_tool_protocol")),
    ("data", ALL_STAGES, ("agentic_skip_bad_rows", "agentic_repair_boxed")),
)
# fields of a group shown for fewer stages than the group
FIELD_STAGES = {"agentic_repair_boxed": RL_STAGES}


@dataclass(frozen=True)
class PanelField:
    r"""One field of the agentic panel.

    Attributes:
        name: Element name in LLaMA-Board (`train.<name>`), also its locale key.
        key: The `llamafactory-cli` key it sets.
        group: Group (sub-accordion) name.
        stages: Stages for which it is shown and written.
        kind: `int`, `float`, `bool`, `choice` (a `Literal`) or `text`.
        default: The dataclass default (None for preset keys and unset optional keys).
        optional: The key accepts None (left unset in the UI).
        choices: The `Literal` values, or suggested values of a text key.
        help: The field's help text from its dataclass.
    """

    name: str
    key: str
    group: str
    stages: tuple[str, ...]
    kind: Literal["int", "float", "bool", "choice", "text"]
    default: Any
    optional: bool
    choices: tuple[Any, ...]
    help: str

    @property
    def preset(self) -> bool:
        r"""Whether the stage's preset gives the key a value (it defaults to None in `AgenticArguments`)."""
        return self.key in PRESET_KEYS


_SOURCE = re.compile(r"\.py\b|\.sh\b|docs/|arXiv|§|RUC-NLPIR|/scripts/")  # a source reference in a help text
_PARENS = re.compile(r"\s*\(([^()]*)\)")


def plain_help(text: str) -> str:
    r"""A help text without its source references (code paths, docs sections, papers), for the panel's field info.

    Inside each parenthesis, the comma- or semicolon-separated parts that cite a source are dropped, and a
    parenthesis left empty goes; `hparams.py` keeps the full text (`--help`, docs/llamaboard.md). Example:
    `per_round (default, reference code ... vllm_rollout_with_tools.py:237-555, docs/algorithms.md §3.4)` ->
    `per_round (default)`.
    """

    def keep(match: "re.Match[str]") -> str:
        pieces = re.split(r"([,;]\s*)", match.group(1))
        parts = [piece for piece in pieces[0::2] if piece.strip() and not _SOURCE.search(piece)]
        if not parts:
            return ""
        return f" ({', '.join(part.strip() for part in parts)})" if len(parts) < len(pieces[0::2]) else match.group(0)

    previous = None
    while previous != text:  # innermost parentheses first
        previous, text = text, _PARENS.sub(lambda m: keep(m).replace("(", "\x00").replace(")", "\x01"), text)
    text = text.replace("\x00", "(").replace("\x01", ")")
    text = re.sub(r"[^.()]*?\b(?:see |as in )?docs/\S+\.md(?: §[\d.]+)?[^.]*\.\s*", "", text)  # "See docs/x.md."
    return re.sub(r"\s+([.,;])", r"\1", text).strip()


def _describe(cls: type, key: str) -> tuple[str, bool, tuple[Any, ...], Any, str]:
    r"""`(kind, optional, choices, default, help)` of field `key` of dataclass `cls` from its type hint."""
    field = next((f for f in dataclasses.fields(cls) if f.name == key), None)
    if field is None:
        raise KeyError(f"{cls.__name__} has no field `{key}` (the agentic panel lists it in GROUPS)")

    hint = typing.get_type_hints(cls)[key]
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        optional = len(members) < len(typing.get_args(hint))
        if len(members) != 1:
            raise TypeError(f"{cls.__name__}.{key}: unsupported type {hint}")
        hint = members[0]

    if typing.get_origin(hint) is Literal:
        kind, choices = "choice", typing.get_args(hint)
    elif hint in (bool, int, float):
        kind, choices = hint.__name__, ()
    elif hint is str:
        kind, choices = "text", ()
    else:
        raise TypeError(f"{cls.__name__}.{key}: unsupported type {hint}")

    default = field.default if field.default is not dataclasses.MISSING else None
    return kind, optional, choices, default, str(field.metadata.get("help", ""))


@functools.cache
def panel_fields() -> tuple[PanelField, ...]:
    r"""Every field of the panel in display order, derived from the dataclasses (see the module docstring).

    Raises:
        KeyError: a key in `GROUPS` is not a field of its dataclass.
        TypeError: a field has a type the panel cannot show.
    """
    from llamafactory.hparams import GeneratingArguments

    result = []
    for group, stages, names in GROUPS:
        for name in names:
            key = GENERATING_FIELDS.get(name, name)
            cls = GeneratingArguments if name in GENERATING_FIELDS else AgenticArguments
            kind, optional, choices, default, help_text = _describe(cls, key)
            if key == "agentic_search_backend":
                choices = SEARCH_BACKENDS
            elif key == "agentic_reward":
                from ..rewards.registry import list_reward_functions

                choices = tuple(list_reward_functions())
            result.append(
                PanelField(
                    name, key, group, FIELD_STAGES.get(name, stages), kind, default, optional, choices, help_text
                )
            )
    return tuple(result)


def field_by_name(name: str) -> PanelField:
    r"""The panel field whose element name is `name` (KeyError if none)."""
    for field in panel_fields():
        if field.name == name:
            return field
    raise KeyError(name)


def group_stages() -> dict[str, tuple[str, ...]]:
    r"""`{group: stages that show it}`."""
    return {group: stages for group, stages, _ in GROUPS}


def stage_preset(stage: str | None, aepo_variant: str | None = None) -> dict[str, Any]:
    r"""The preset values of `stage` (`{}` for a stage without presets, e.g. `agentic_sft` or `sft`)."""
    if stage not in RL_STAGES:
        return {}
    args = agentic_namespace(stage, {"aepo_variant": aepo_variant or agentic_default("aepo_variant")})
    return dict(PRESETS[preset_name(args)])


def preset_summary(field: PanelField, title: str = "Preset: ") -> str:
    r"""`"Preset: arpo 2 · aepo 2 · aepo-paper 2"` for a preset key ("" otherwise); `title` is the word before it."""
    if not field.preset:
        return ""
    return title + " · ".join(f"{name} {_show(values[field.key])}" for name, values in PRESETS.items())


def _show(value: Any) -> str:
    if callable(value):  # a value the preset derives from the recipe (`grpo`: N = M)
        return "M"
    if isinstance(value, bool):
        return TRUE if value else FALSE
    return str(value)


# ---------------------------------------------------------------------------------------------- UI values
def initial_value(field: PanelField) -> Any:
    r"""The value the UI shows before the user changes anything (the dataclass default, or "left to the preset")."""
    if field.kind == "choice" or (field.kind == "bool" and field.optional):
        if field.default is None:
            return PRESET_CHOICE
        return _show(field.default) if field.kind == "bool" else field.default
    if field.kind == "text":
        return "" if field.default is None else str(field.default)
    return field.default


def ui_choices(field: PanelField, preset: dict[str, Any] | None = None) -> list[Any]:
    r"""Choices of a drop-down field: `(label, value)` pairs; a preset key first offers "preset: <value>"."""
    if field.kind == "bool":
        values = [TRUE, FALSE]
    else:
        values = [str(choice) for choice in field.choices]
    choices: list[Any] = [(value, value) for value in values]
    if field.optional:
        if field.key in (preset or {}):
            label = f"preset: {_show(preset[field.key])}"
        elif field.preset:
            label = "preset"
        else:
            label = "not set"
        choices.insert(0, (label, PRESET_CHOICE))
    return choices


def placeholder(field: PanelField, preset: dict[str, Any] | None = None) -> str:
    r"""Hint shown in an empty number or text field: the preset value of the chosen stage, or what "unset" means."""
    if field.key in (preset or {}):
        return f"preset: {_show(preset[field.key])}"
    if field.preset:
        return "preset"
    return "not set" if field.optional else ""


def from_ui(field: PanelField, value: Any) -> Any:
    r"""The key's value for a UI value; None means "not set" (preset or dataclass default applies).

    Raises:
        ValueError: a number field holds text that is not a number.
    """
    if value is None or value == PRESET_CHOICE:
        return None
    if field.kind == "bool":
        if isinstance(value, str):
            return {TRUE: True, FALSE: False}[value]
        return bool(value)
    if field.kind in ("int", "float"):
        if isinstance(value, str) and not value.strip():
            return None
        number = float(value)
        if field.kind == "int":
            if number != int(number):
                raise ValueError(f"`{field.key}` must be an integer, got {value!r}")
            return int(number)
        return number
    text = str(value).strip()
    return text or None


def panel_args(stage: str, values: dict[str, Any]) -> dict[str, Any]:
    r"""`llamafactory-cli` keys of the panel for `stage`, in panel order.

    Only the fields shown for `stage` whose value is set and differs from the dataclass default are written.

    Args:
        stage: Stage name (`agentic_sft`, `arpo`, `aepo`).
        values: `{element name: UI value}`.

    Raises:
        ValueError: see `from_ui`.
    """
    args = {}
    for field in panel_fields():
        if stage not in field.stages or field.name not in values:
            continue
        value = from_ui(field, values[field.name])
        if value is None or value == field.default:
            continue
        args[field.key] = value
    return args


# ---------------------------------------------------------------------------------------------- effective values
def effective_values(stage: str, args: dict[str, Any]) -> dict[str, Any]:
    r"""The values the run will use for the plugin's keys, presets resolved as the training process resolves them.

    Args:
        stage: Stage name.
        args: The `llamafactory-cli` arguments (LLaMA-Board's, the panel's and the extra arguments).

    Returns:
        `{"stage", "preset" (None without presets), "rows": [(key, value, origin)]}` with origin `explicit` (set in
        `args`), `preset` (filled from the preset), `rl_epsilon` (`rl_epsilon_high` follows it), `default`, or
        `no effect` (set in `args` but inert in this run). Rows: the panel's keys for the stage, then the other keys
        the preset resolution reports, without the keys that do not act on the run (`train.presets.inert_keys`).

    Raises:
        ValueError: unknown AEPO variant (from `resolve_presets`).
    """
    from llamafactory.hparams import GeneratingArguments

    agentic = {f.name: f.default for f in dataclasses.fields(AgenticArguments)}
    generating = {f.name: f.default for f in dataclasses.fields(GeneratingArguments)}
    namespace = types.SimpleNamespace(**agentic)
    for key, value in args.items():
        if key in agentic:
            setattr(namespace, key, value)
    namespace.stage = namespace.agentic_stage = stage
    preset, from_preset, reported, inert = None, set(), {}, set()
    if stage in RL_STAGES:
        result = resolve_presets(namespace, verbose=False)
        preset, from_preset, reported = result["preset"], set(result["from_preset"]), result["values"]
        inert = inert_keys(namespace)  # every key, not only the reported ones (the panel's server keys, say)
        from_preset.update(result["derived"])  # rl_epsilon_high left unset: shown as "rl_epsilon" below

    keys = [f.key for f in panel_fields() if stage in f.stages]
    keys += [key for key in reported if key not in keys]
    rows = []
    for key in keys:
        if key in generating:
            value = args.get(key, generating[key])
        else:
            value = getattr(namespace, key)
        if key in inert and key not in args:
            continue  # does not act on this run (`train.presets.inert_keys`): e.g. every AEPO key of an `arpo` run
        if key in inert:
            origin = "no effect"
        elif key in args:
            origin = "explicit"
        elif key in from_preset:
            origin = "rl_epsilon" if key == "rl_epsilon_high" else "preset"
        else:
            origin = "default"
        rows.append((key, value, origin))
    return {"stage": stage, "preset": preset, "rows": rows}


def format_effective(effective: dict[str, Any], lang: str | None = None) -> str:
    r"""Markdown of `effective_values`' result for LLaMA-Board's preview box: one aligned `key from value` line each.

    `lang`: LLaMA-Board's language (`zh`: the title and the origins in Chinese, the keys and values as they are).
    """
    from .locales import message  # locales builds on this module

    preset = message("effective_preset", lang, preset=effective["preset"]) if effective["preset"] else ""
    rows = [
        (key, message(f"origin_{origin.replace(' ', '_')}", lang), "-" if value is None else str(value))
        for key, value, origin in effective["rows"]
    ]
    key_width = max(len(key) for key, _, _ in rows)
    origin_width = max(_width(origin) for _, origin, _ in rows)
    lines = [
        f"{key:<{key_width}}  {origin}{' ' * (origin_width - _width(origin))}  {value}" for key, origin, value in rows
    ]
    title = message("effective_title", lang, stage=effective["stage"], preset=preset)
    return f"**{title}**" + "\n\n```\n" + "\n".join(lines) + "\n```"


def _width(text: str) -> int:
    r"""Columns `text` takes in a monospace block (a CJK character takes two)."""
    return sum(2 if "\u2e80" <= ch <= "\uffef" else 1 for ch in text)
