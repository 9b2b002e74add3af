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

"""Defaults in one home: the tools layer's defaults are the recipe keys' (hparams.py) and the `arpo` preset's.

A tool class, the executor, the cache and the standalone `llamafactory-agentic tool` command used on their own behave
as a run with default keys; a default changed in hparams.py (or the preset) reaches all of them.
"""

import argparse
import inspect
from types import SimpleNamespace

from llamafactory_agentic.hparams import AgenticArguments, agentic_field
from llamafactory_agentic.tools.base import BaseTool, BoundedText
from llamafactory_agentic.tools.cache import RedisCache, SQLiteCache, ToolCache, open_cache
from llamafactory_agentic.tools.cli import add_subcommands
from llamafactory_agentic.tools.executor import ToolExecutor, validate_tool_args
from llamafactory_agentic.tools.python_tool import PythonTool, run_python_code
from llamafactory_agentic.tools.sandbox.isolation import DEFAULT_MIN_ISOLATION
from llamafactory_agentic.tools.search import SearchTool, format_snippets
from llamafactory_agentic.train.presets import PRESETS


HPARAMS = AgenticArguments()
ARPO = PRESETS["arpo"]


def _default(func, name):
    return inspect.signature(func).parameters[name].default


def _parse(*argv):
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers(dest="command"))
    return parser.parse_args(list(argv))


def test_tool_classes_default_to_the_recipe_keys_and_the_arpo_preset():
    for func in (PythonTool, run_python_code):
        assert _default(func, "timeout_s") == HPARAMS.agentic_python_timeout
        assert _default(func, "max_output_chars") == HPARAMS.agentic_python_max_output_chars
        assert _default(func, "isolation") == HPARAMS.agentic_python_isolation
    assert DEFAULT_MIN_ISOLATION == HPARAMS.agentic_python_min_isolation
    assert _default(BoundedText, "max_chars") == HPARAMS.agentic_python_max_output_chars
    assert _default(SearchTool, "backend") == HPARAMS.agentic_search_backend
    for func in (SearchTool, format_snippets):
        assert _default(func, "topk") == HPARAMS.agentic_search_topk
        assert _default(func, "snippet_chars") == HPARAMS.agentic_search_snippet_chars
    for func in (ToolCache, SQLiteCache, RedisCache, open_cache):
        assert _default(func, "mode") == HPARAMS.agentic_cache_mode
    assert _default(ToolExecutor, "cache_tools") == HPARAMS.agentic_cache_tools
    # the stage-dependent keys: the `arpo` preset's values
    assert _default(ToolExecutor, "workers") == ARPO["agentic_tool_workers"]
    assert _default(BaseTool, "retries") == ARPO["agentic_tool_retries"]
    tool = PythonTool()
    try:
        assert tool.retries == ARPO["agentic_tool_retries"]
    finally:
        tool.close()


def test_missing_tool_keys_resolve_to_the_recipe_defaults_and_the_arpo_preset():
    assert validate_tool_args(SimpleNamespace()) == {
        "retries": ARPO["agentic_tool_retries"],
        "workers": ARPO["agentic_tool_workers"],
        "python_timeout": HPARAMS.agentic_python_timeout,
        "python_max_output_chars": HPARAMS.agentic_python_max_output_chars,
        "search_topk": HPARAMS.agentic_search_topk,
        "search_snippet_chars": HPARAMS.agentic_search_snippet_chars,
        "search_backend": HPARAMS.agentic_search_backend,
        "python_isolation": HPARAMS.agentic_python_isolation,
        "python_min_isolation": None,  # no key: no isolation check (a run's ToolsConfig always carries it)
        "cache_mode": None,  # no key: the tool config's cache section decides
    }


def test_tool_command_defaults_are_the_recipe_defaults():
    py = _parse("tool", "python", "--code", "1")
    assert (py.timeout, py.max_output_chars, py.isolation) == (
        HPARAMS.agentic_python_timeout,
        HPARAMS.agentic_python_max_output_chars,
        HPARAMS.agentic_python_isolation,
    )
    se = _parse("tool", "search", "--query", "q")
    assert (se.backend, se.cache_mode, se.topk, se.snippet_chars, se.cache_tools) == (
        HPARAMS.agentic_search_backend,
        HPARAMS.agentic_cache_mode,
        HPARAMS.agentic_search_topk,
        HPARAMS.agentic_search_snippet_chars,
        HPARAMS.agentic_cache_tools,
    )
    assert se.retries == ARPO["agentic_tool_retries"]


def test_tool_command_reads_the_defaults_from_the_dataclass_fields(monkeypatch):
    # the command re-reads the fields each time its parser is built: a changed declaration is picked up, no number
    # of its own can drift from hparams.py
    monkeypatch.setattr(agentic_field("agentic_python_timeout"), "default", 7.5)
    monkeypatch.setattr(agentic_field("agentic_search_topk"), "default", 3)
    assert _parse("tool", "python", "--code", "1").timeout == 7.5
    assert _parse("tool", "search", "--query", "q").topk == 3
