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

"""Tools for agentic rollouts: protocol, registry, python and search tools, the persistent cache and the executor.

Public API (docs/tools.md): `ToolCall`, `ToolResult`, `ToolExecutor`, `build_executor_from_args`;
plus `BaseTool`, `Environment` (per-trajectory state), `register_tool`, `load_tool_config`, `PythonTool`, `SearchTool`, `MCPTool`, `HTTPTool`,
`isolation_level`, `open_cache`, `SQLiteCache`, `RedisCache`, `normalize_search_query`, `format_snippets`.
"""

from .base import BaseTool, BoundedText, ToolCall, ToolError, ToolOutput, ToolResult, TransientToolError
from .cache import CacheEntry, CacheError, RedisCache, SQLiteCache, ToolCache, normalize_search_query, open_cache
from .environment import Environment, EnvironmentTool
from .executor import ToolExecutor, build_executor_from_args
from .http_tool import HTTPTool
from .mcp_tool import MCPTool
from .python_tool import PythonTool
from .registry import load_tool_config, register_tool, resolve_tool_class
from .sandbox.isolation import isolation_level
from .search import SearchTool, format_snippets


__all__ = [
    "BaseTool",
    "BoundedText",
    "CacheEntry",
    "CacheError",
    "Environment",
    "EnvironmentTool",
    "HTTPTool",
    "MCPTool",
    "PythonTool",
    "RedisCache",
    "SQLiteCache",
    "SearchTool",
    "ToolCache",
    "ToolCall",
    "ToolError",
    "ToolExecutor",
    "ToolOutput",
    "ToolResult",
    "TransientToolError",
    "build_executor_from_args",
    "format_snippets",
    "isolation_level",
    "load_tool_config",
    "normalize_search_query",
    "open_cache",
    "register_tool",
    "resolve_tool_class",
]
