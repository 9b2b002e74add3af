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

"""Tool registry and YAML tool configuration.

Tools are found by registered name (`python`, `search`) or by import path (`package.module:Class`). A tool config
file (`agentic_tool_config`) looks like::

    tools:
      - name: python              # registered name or `module:Class`
        timeout: 120              # seconds, wall clock, per call
        retries: 3                # attempts per call
        call_limit: null          # calls per trajectory for this tool (the rollout has its own overall limit)
        params: {max_output_chars: 4000, isolation: auto}
      - name: search
        params: {backend: web, provider: serper, api_key: "${SERPER_API_KEY}"}
    cache: {path: tool_cache.sqlite, mode: read_write, tools: [search], ttl_s: null}

`${VAR}` and `${VAR:-default}` are replaced by environment variables when the file is loaded. Values that came from
`${...}` are treated as secrets: they are registered with the tool for redaction and never logged or cached.
"""

import importlib
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .base import BaseTool


logger = logging.getLogger(__name__)

TOOL_REGISTRY: dict[str, type[BaseTool]] = {}
_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def register_tool(name: str):
    r"""Class decorator registering a `BaseTool` subclass under `name` (usable as `name:` in tool configs)."""

    def _wrap(cls: type[BaseTool]) -> type[BaseTool]:
        if not (isinstance(cls, type) and issubclass(cls, BaseTool)):
            raise TypeError(f"{cls!r} is not a BaseTool subclass")
        TOOL_REGISTRY[name] = cls
        return cls

    return _wrap


def _ensure_builtin_tools() -> None:
    from . import python_tool, search  # noqa: F401 - registration side effect


def resolve_tool_class(name: str) -> type[BaseTool]:
    r"""Class of a registered tool name or an import path `module:Class` (or `module.Class`).

    Raises:
        ValueError: unknown name, or the imported object is not a `BaseTool` subclass.
        ImportError: the module cannot be imported.
    """
    _ensure_builtin_tools()
    if name in TOOL_REGISTRY:
        return TOOL_REGISTRY[name]
    if ":" in name:
        module_name, attr = name.split(":", 1)
    elif "." in name:
        module_name, attr = name.rsplit(".", 1)
    else:
        raise ValueError(f"unknown tool {name!r}; registered: {sorted(TOOL_REGISTRY)}; or use `module:Class`")
    obj = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(obj, type) and issubclass(obj, BaseTool)):
        raise ValueError(f"{name!r} is not a BaseTool subclass")
    return obj


def substitute_env(value: Any, secrets: list[str] | None = None, environ: dict[str, str] | None = None) -> Any:
    r"""Replace `${VAR}` / `${VAR:-default}` in every string of a nested structure.

    Args:
        value: a YAML-loaded structure (dicts, lists, strings, scalars).
        secrets: if given, every substituted environment value is appended (for redaction).
        environ: variables to use (default `os.environ`).

    Raises:
        KeyError: a variable without default is not set (the message names the variable, never a value).
    """
    env = os.environ if environ is None else environ
    if isinstance(value, dict):
        return {k: substitute_env(v, secrets, env) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, secrets, env) for v in value]
    if not isinstance(value, str):
        return value

    def _sub(match: re.Match) -> str:
        var, default = match.group(1), match.group(2)
        if var in env:
            if secrets is not None:
                secrets.append(env[var])
            return env[var]
        if default is not None:
            return default
        raise KeyError(f"environment variable {var} is not set (needed by the tool config)")

    return _ENV_PATTERN.sub(_sub, value)


@dataclass
class ToolSpec:
    r"""One entry of a tool config (see the module docstring)."""

    name: str
    tag: str | None = None
    timeout: float | None = None
    retries: int | None = None
    call_limit: int | None = None
    dedup: bool | None = None
    params: dict[str, Any] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list, repr=False)


@dataclass
class ToolConfig:
    r"""Parsed tool config file: the tools and the optional `cache` section."""

    tools: list[ToolSpec]
    cache: dict[str, Any] = field(default_factory=dict)


def load_tool_config(path: str | os.PathLike, environ: dict[str, str] | None = None) -> ToolConfig:
    r"""Read a tool config YAML file with `${VAR}` substitution.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: malformed file (the message names the entry).
        KeyError: a referenced environment variable is unset.
    """
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if isinstance(raw, list):
        raw = {"tools": raw}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping with a `tools` list")
    specs = []
    for i, entry in enumerate(raw.get("tools") or []):
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or not ("name" in entry or "class" in entry):
            raise ValueError(f"{path}: tools[{i}] needs a `name` (registered name or `module:Class`)")
        secrets: list[str] = []
        entry = substitute_env(entry, secrets, environ)
        unknown = set(entry) - {"name", "class", "tag", "timeout", "retries", "call_limit", "dedup", "params"}
        if unknown:
            raise ValueError(f"{path}: tools[{i}] has unknown keys {sorted(unknown)}")
        specs.append(
            ToolSpec(
                name=str(entry.get("class") or entry["name"]),
                tag=entry.get("tag"),
                timeout=entry.get("timeout"),
                retries=entry.get("retries"),
                call_limit=entry.get("call_limit"),
                dedup=entry.get("dedup"),
                params=dict(entry.get("params") or {}),
                secrets=secrets,
            )
        )
    cache = substitute_env(raw.get("cache") or {}, None, environ)
    return ToolConfig(tools=specs, cache=dict(cache))


def build_tool(spec: ToolSpec, defaults: dict[str, Any] | None = None) -> BaseTool:
    r"""Instantiate one tool: `defaults` (from the run arguments) first, then the spec's own values on top."""
    cls = resolve_tool_class(spec.name)
    kwargs: dict[str, Any] = dict(defaults or {})
    kwargs.update(spec.params)
    for key, value in (
        ("tag", spec.tag),
        ("timeout_s", spec.timeout),
        ("retries", spec.retries),
        ("call_limit", spec.call_limit),
        ("dedup", spec.dedup),
    ):
        if value is not None:
            kwargs[key] = value
    tool = cls(**kwargs)
    tool.add_secrets(*spec.secrets)
    logger.info("[agentic-tools] tool %s (tag <%s>) ready: %r", spec.name, tool.tag, tool)
    return tool
