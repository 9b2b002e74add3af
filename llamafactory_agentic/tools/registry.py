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
        timeout: 30               # seconds, wall clock, per call (default: agentic_python_timeout)
        retries: 2                # attempts per call (default: agentic_tool_retries)
        call_limit: null          # calls per trajectory for this tool (the rollout has its own overall limit)
        params: {max_output_chars: 2000, isolation: bwrap}   # constructor arguments of the tool class
      - name: search
        params: {backend: web, provider: serper, api_key: "${SERPER_API_KEY}"}
    mcp_servers:                  # MCP servers: each of their tools is called by its own name (tools/mcp_tool.py)
      - {name: calc, command: python, args: [calc_server.py], tools: [add, lookup]}
      - {name: remote, url: "http://127.0.0.1:8000/mcp", headers: {Authorization: "Bearer ${MCP_TOKEN}"}}
    http_tools:                   # POST the call as JSON, read the observation (tools/http_tool.py)
      - {name: weather, url: "http://127.0.0.1:9000/weather", timeout: 10}
    cache: {path: tool_cache.sqlite, mode: read_write, tools: [search], ttl_s: null}

`${VAR}` and `${VAR:-default}` are replaced by environment variables when the file is loaded. Values that came from
`${...}` are treated as secrets: they are registered with the tool for redaction and never logged or cached.
"""

import difflib
import importlib
import inspect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..common.log import get_logger
from ..data.tags import reserved_tag_error
from .base import BaseTool, check_number


logger = get_logger(__name__)

TOOL_REGISTRY: dict[str, type[BaseTool]] = {}
_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
ENTRY_KEYS = ("name", "class", "tag", "timeout", "retries", "call_limit", "dedup", "params")
CACHE_KEYS = ("path", "mode", "tools", "ttl_s", "cache_errors")
TOP_KEYS = ("tools", "mcp_servers", "http_tools", "cache")


class ToolConfigError(ValueError):
    r"""A tool config (file entry or recipe keys) that cannot be used; the message names where and the fix."""


def register_tool(name: str):
    r"""Class decorator registering a `BaseTool` subclass under `name` (usable as `name:` in tool configs)."""

    def _wrap(cls: type[BaseTool]) -> type[BaseTool]:
        if not (isinstance(cls, type) and issubclass(cls, BaseTool)):
            raise TypeError(f"{cls!r} is not a BaseTool subclass")
        TOOL_REGISTRY[name] = cls
        return cls

    return _wrap


def _ensure_builtin_tools() -> None:
    from . import http_tool, mcp_tool, python_session, python_tool, search  # noqa: F401 - registration side effect


def resolve_tool_class(name: str) -> type[BaseTool]:
    r"""Class of a registered tool name or an import path `module:Class` (or `module.Class`).

    Raises:
        ToolConfigError: unknown name, a module that cannot be imported, a missing attribute, or an object that is
            not a `BaseTool` subclass; the message says how to fix it.
    """
    _ensure_builtin_tools()
    if not isinstance(name, str) or not name.strip():
        raise ToolConfigError(f"a tool needs a name (registered: {', '.join(sorted(TOOL_REGISTRY))}), got {name!r}")
    if name in TOOL_REGISTRY:
        return TOOL_REGISTRY[name]
    if ":" in name:
        module_name, attr = name.split(":", 1)
    elif "." in name:
        module_name, attr = name.rsplit(".", 1)
    else:
        close = difflib.get_close_matches(name, TOOL_REGISTRY, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise ToolConfigError(
            f"unknown tool `{name}`: {hint}registered tools are {', '.join(sorted(TOOL_REGISTRY))}; a tool of your "
            "own is named by its import path `package.module:Class` (a BaseTool subclass)"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or an error raised while the module runs
        raise ToolConfigError(
            f"cannot import module `{module_name}` of tool `{name}` ({type(exc).__name__}: {exc}): install the "
            "package that provides it or put its folder on PYTHONPATH"
        ) from exc
    obj = getattr(module, attr, None)
    if obj is None:
        tools = sorted(k for k, v in vars(module).items() if isinstance(v, type) and issubclass(v, BaseTool))
        raise ToolConfigError(
            f"module `{module_name}` has no `{attr}` (tool `{name}`); its tool classes: {', '.join(tools) or 'none'}"
        )
    obj = _environment_as_tool(obj)
    if not (isinstance(obj, type) and issubclass(obj, BaseTool)):
        raise ToolConfigError(
            f"`{name}` is not a BaseTool subclass: subclass llamafactory_agentic.tools.BaseTool and implement run()"
        )
    return obj


def _environment_as_tool(obj: Any) -> Any:
    r"""The `EnvironmentTool` serving `obj` when it is an `Environment` subclass (tools/environment.py), else `obj`."""
    from .environment import Environment, environment_tool

    return environment_tool(obj) if isinstance(obj, type) and issubclass(obj, Environment) else obj


def checked_entry(
    where: str, entry: dict[str, Any], allowed: tuple[str, ...], environ: dict[str, str] | None = None, hint: str = ""
) -> tuple[dict[str, Any], list[str]]:
    r"""A tool-config entry with only `allowed` keys and its `${VAR}` values substituted; returns `(entry, secrets)`.

    Shared by `tools:`, `mcp_servers:` and `http_tools:` entries, so their errors read the same.

    Raises:
        ToolConfigError: naming `where`: unknown keys (with the allowed ones and `hint`), or an unset `${VAR}`.
    """
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise ToolConfigError(f"{where} has unknown keys {unknown}; allowed: {', '.join(allowed)}{hint}")
    secrets: list[str] = []
    try:
        return substitute_env(entry, secrets, environ), secrets
    except KeyError as exc:
        raise ToolConfigError(f"{where}: {exc.args[0]}; export it or write `${{VAR:-default}}`") from None


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
    r"""One entry of a tool config (see the module docstring); `where` names it in error messages."""

    name: str
    tag: str | None = None
    timeout: float | None = None
    retries: int | None = None
    call_limit: int | None = None
    dedup: bool | None = None
    params: dict[str, Any] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list, repr=False)
    where: str = ""


@dataclass
class ToolConfig:
    r"""Parsed tool config file: the tools and the optional `cache` section."""

    tools: list[ToolSpec]
    cache: dict[str, Any] = field(default_factory=dict)


def accepted_params(cls: type[BaseTool], params: dict[str, Any] | None = None) -> set[str] | None:
    r"""Names `cls(**kwargs)` accepts, following `**kwargs` up the MRO to `BaseTool` (None: cannot be known).

    A class may define `accepted_params(params)` (a classmethod) to add what its own `**kwargs` forward elsewhere,
    as `SearchTool` does for its backend's arguments.
    """
    own = getattr(cls, "accepted_params", None)
    if callable(own):
        return own(params or {})
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        sig = inspect.signature(vars(klass)["__init__"])
        names |= {n for n, p in sig.parameters.items() if n != "self" and p.kind is not p.VAR_POSITIONAL}
        names -= {n for n, p in sig.parameters.items() if p.kind is p.VAR_KEYWORD}
        if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return names
    return None


def _check_entry(where: str, entry: dict[str, Any]) -> None:
    try:  # null (or no key) means the run's value for timeout and retries, unlimited for call_limit
        if entry.get("timeout") is not None:
            check_number("timeout", entry["timeout"])
        if entry.get("retries") is not None:
            check_number("retries", entry["retries"], integer=True, minimum=1, inclusive=True)
        check_number("call_limit", entry.get("call_limit"), integer=True, inclusive=True, allow_none=True)
    except ValueError as exc:
        raise ToolConfigError(f"{where}: {exc}") from None
    if entry.get("dedup") is not None and not isinstance(entry["dedup"], bool):
        raise ToolConfigError(f"{where}: `dedup` must be true or false, got {entry['dedup']!r}")
    tag = entry.get("tag")
    if tag is not None and not (isinstance(tag, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", tag)):
        raise ToolConfigError(f"{where}: `tag` must be a word such as `search` (letters, digits, _ or -), got {tag!r}")
    reserved = reserved_tag_error(tag, f"`tag: {tag}_tool` in this entry") if tag is not None else None
    if reserved is not None:
        raise ToolConfigError(f"{where}: {reserved}")
    if not isinstance(entry.get("params") or {}, dict):
        raise ToolConfigError(f"{where}: `params` must be a mapping of constructor arguments, got {entry['params']!r}")


def _check_cache_section(path: str, cache: Any) -> dict[str, Any]:
    from .cache import CACHE_MODES

    if not isinstance(cache, dict):
        raise ToolConfigError(f"{path}: `cache` must be a mapping with keys among {', '.join(CACHE_KEYS)}")
    unknown = sorted(set(cache) - set(CACHE_KEYS))
    if unknown:
        raise ToolConfigError(f"{path}: `cache` has unknown keys {unknown}; allowed: {', '.join(CACHE_KEYS)}")
    if cache.get("path") is not None and not isinstance(cache["path"], str):
        raise ToolConfigError(f"{path}: cache `path` must be a SQLite file path or a redis:// URL")
    if cache.get("mode") is not None and cache["mode"] not in CACHE_MODES:
        raise ToolConfigError(f"{path}: cache `mode` must be one of {', '.join(CACHE_MODES)}, got {cache['mode']!r}")
    tools = cache.get("tools")
    if tools is not None and not (isinstance(tools, str) or all(isinstance(t, str) for t in tools or [])):
        raise ToolConfigError(f"{path}: cache `tools` must be a list of tool names, got {tools!r}")
    try:
        check_number("ttl_s", cache.get("ttl_s"), allow_none=True)
    except ValueError as exc:
        raise ToolConfigError(f"{path}: cache {exc}") from None
    if cache.get("cache_errors") is not None and not isinstance(cache["cache_errors"], bool):
        raise ToolConfigError(f"{path}: cache `cache_errors` must be true or false")
    return dict(cache)


def load_tool_config(path: str | os.PathLike, environ: dict[str, str] | None = None) -> ToolConfig:
    r"""Read and validate a tool config YAML file with `${VAR}` substitution.

    Every entry is checked at load: keys, `timeout` (> 0), `retries` (>= 1), `call_limit` (>= 0), `dedup`, `tag`,
    that the tool resolves (registered name or importable `module:Class`) and that its `params` are arguments the
    tool accepts; the `cache` section's keys and values too. Values a tool's constructor checks (limits, output
    caps, backends) are checked when the tool is built (`build_tool`), with the same kind of message. The
    `mcp_servers` and `http_tools` sections become `ToolSpec`s of the `mcp` and `http` tools
    (`mcp_tool.mcp_server_specs`, `http_tool.http_tool_specs`); an MCP server is reached when it is built.

    Raises:
        FileNotFoundError: `path` does not exist.
        ToolConfigError: malformed file or entry; the message names the file, the entry and the fix.
    """
    path = str(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"tool config {path} does not exist (agentic_tool_config / --tool-config)")
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ToolConfigError(f"{path}: not valid YAML: {exc}") from None
    if isinstance(raw, list):
        raw = {"tools": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("tools") or [], list):
        raise ToolConfigError(f"{path}: expected a mapping with a `tools` list (see recipes/tools/*.yaml)")
    unknown_top = sorted(set(raw) - set(TOP_KEYS))
    if unknown_top:
        raise ToolConfigError(f"{path}: unknown top-level keys {unknown_top}; allowed: {', '.join(TOP_KEYS)}")
    specs = []
    for i, entry in enumerate(raw.get("tools") or []):
        where = f"{path}: tools[{i}]"
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or not ("name" in entry or "class" in entry):
            raise ToolConfigError(f"{where} needs a `name` (a registered tool such as python or search, or "
                                  f"`module:Class`), got {entry!r}")  # fmt: skip
        name = entry.get("class") or entry.get("name")
        where = f"{where} ({name})"
        hint = " (constructor arguments of the tool go under `params:`)"
        entry, secrets = checked_entry(where, entry, ENTRY_KEYS, environ, hint)
        _check_entry(where, entry)
        try:
            cls = resolve_tool_class(str(name))
        except ToolConfigError as exc:
            raise ToolConfigError(f"{where}: {exc}") from exc.__cause__
        params = dict(entry.get("params") or {})
        allowed = accepted_params(cls, params)
        if allowed is not None:
            bad = sorted(set(params) - allowed)
            if bad:
                close = {b: difflib.get_close_matches(b, allowed, n=1) for b in bad}
                hints = "; ".join(f"`{b}`: did you mean `{c[0]}`?" for b, c in close.items() if c)
                raise ToolConfigError(
                    f"{where}: unknown params {bad}{' (' + hints + ')' if hints else ''}; {cls.__name__} accepts "
                    f"{', '.join(sorted(allowed))}"
                )
        specs.append(
            ToolSpec(
                name=str(name),
                tag=entry.get("tag"),
                timeout=entry.get("timeout"),
                retries=entry.get("retries"),
                call_limit=entry.get("call_limit"),
                dedup=entry.get("dedup"),
                params=params,
                secrets=secrets,
                where=where,
            )
        )
    if raw.get("mcp_servers") is not None:
        from .mcp_tool import mcp_server_specs

        specs.extend(mcp_server_specs(path, raw["mcp_servers"], environ))
    if raw.get("http_tools") is not None:
        from .http_tool import http_tool_specs

        specs.extend(http_tool_specs(path, raw["http_tools"], environ))
    try:
        cache = substitute_env(raw.get("cache") or {}, None, environ)
    except KeyError as exc:
        raise ToolConfigError(f"{path}: cache: {exc.args[0]}") from None
    return ToolConfig(tools=specs, cache=_check_cache_section(path, cache))


def build_tool(spec: ToolSpec, defaults: dict[str, Any] | None = None) -> BaseTool:
    r"""Instantiate one tool: `defaults` (from the run arguments) first, then the spec's own values on top.

    Raises:
        ToolConfigError: the tool cannot be resolved or rejects its arguments (the message names `spec.where`).
    """
    where = spec.where or f"tool `{spec.name}`"
    try:
        cls = resolve_tool_class(spec.name)
    except ToolConfigError as exc:
        raise ToolConfigError(f"{where}: {exc}") from exc.__cause__
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
    try:
        tool = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        allowed = accepted_params(cls, spec.params)
        accepts = f" ({cls.__name__} accepts {', '.join(sorted(allowed))})" if allowed else ""
        raise ToolConfigError(f"{where}: {exc}; fix the entry's values{accepts}") from exc
    tool.add_secrets(*spec.secrets)
    logger.info("[agentic-tools] tool %s (tag <%s>) ready: %r", spec.name, tool.tag, tool)
    return tool


def build_tools(spec: ToolSpec, defaults: dict[str, Any] | None = None) -> list[BaseTool]:
    r"""The tools of one config entry: one, or several for a class with a `build_all(**kwargs)` classmethod.

    `MCPTool.build_all` turns one MCP server (an `mcp_servers` entry) into one tool per server tool; every other
    class gives `[build_tool(spec, defaults)]`.

    Raises:
        ToolConfigError: as `build_tool`; for an MCP server also a server that cannot be started or reached, or a
            listed tool it does not have (the message names `spec.where` and the server's tools).
    """
    where = spec.where or f"tool `{spec.name}`"
    try:
        cls = resolve_tool_class(spec.name)
    except ToolConfigError as exc:
        raise ToolConfigError(f"{where}: {exc}") from exc.__cause__
    build_all = getattr(cls, "build_all", None)
    if not callable(build_all):
        return [build_tool(spec, defaults)]
    kwargs: dict[str, Any] = dict(defaults or {})
    kwargs.update(spec.params)
    for key, value in (("tag", spec.tag), ("timeout_s", spec.timeout), ("retries", spec.retries),
                       ("call_limit", spec.call_limit), ("dedup", spec.dedup)):  # fmt: skip
        if value is not None:
            kwargs[key] = value
    try:
        tools = build_all(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ToolConfigError(f"{where}: {exc}") from exc
    for tool in tools:
        tool.add_secrets(*spec.secrets)
        logger.info("[agentic-tools] tool %s (tag <%s>) ready: %r", tool.name, tool.tag, tool)
    return tools
