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

"""Command line for tools, cache and the local search index.

`add_subcommands(subparsers)` registers, on an argparse sub-parser collection:

* `tool python --code CODE`, `tool search --query Q [--backend B --cache PATH --index DIR]` and `tool run --config FILE
  --tag T --body B` (any tool of a tool config): print the observation exactly as a rollout would insert it (without
  the `<result>` wrapping), status on stderr;
* `cache import FILE --cache PATH`, `cache export --cache PATH --output FILE`, `cache stats --cache PATH`;
* `index build --cache-json FILE --output DIR`: local search corpus + BM25 index from the reference's search cache.

`_standalone_main(argv)` runs them without the project's console script (tests, `python -m
llamafactory_agentic.tools.cli`).
"""

import argparse
import functools
import json
import logging
import math
import sqlite3
import sys
import typing
from types import SimpleNamespace


def _user_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, RuntimeError, sqlite3.Error)
    try:
        import redis

        errors += (redis.RedisError,)
    except ImportError:
        pass
    return errors


def _clean_errors(func):
    r"""Wrap a command so that bad input is one `error:` line on stderr and exit code 1, not a traceback.

    Bad input: a missing or corrupt file, a bad tool config, an unreachable server (for `llamafactory-agentic` and
    `_standalone_main` alike).
    """

    @functools.wraps(func)
    def _run(args: argparse.Namespace) -> int:
        try:
            return int(func(args) or 0)
        except _user_errors() as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            print(f"error: {message}", file=sys.stderr)
            return 1

    return _run


def _positive(kind: type, minimum: float = 0, inclusive: bool = False):
    r"""Argparse type: a number of `kind` above `minimum` (or equal when `inclusive`), with a clear message."""

    def _parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        finite = math.isfinite(value)
        if not finite or not (value >= minimum if inclusive else value > minimum):
            raise argparse.ArgumentTypeError(f"must be {'>=' if inclusive else '>'} {minimum:g}, got {text}")
        return value

    return _parse


@_clean_errors
def _cmd_tool_python(args: argparse.Namespace) -> int:
    from .base import ToolCall
    from .executor import ToolExecutor
    from .python_tool import PythonTool
    from .sandbox.isolation import DEFAULT_MIN_ISOLATION, IsolationError, check_min_isolation, min_isolation_hint

    tool = PythonTool(timeout_s=args.timeout, max_output_chars=args.max_output_chars, isolation=args.isolation)
    report = tool.isolation_report()
    try:  # the same bar as train and eval (agentic_python_min_isolation's default), unless waived explicitly
        check_min_isolation(report, DEFAULT_MIN_ISOLATION, executable=tool.executable)
    except IsolationError:
        if not args.allow_weak_isolation:
            raise IsolationError(
                f"`tool python --isolation {args.isolation}` is refused: the code would run with isolation "
                f"{report.describe()}; train and eval refuse this below `agentic_python_min_isolation: "
                f"{DEFAULT_MIN_ISOLATION}`. Fix: {min_isolation_hint(report, tool.executable)} Or pass "
                "--allow-weak-isolation to run this one command anyway."
            ) from None
        print(f"warning: running with weak isolation (--allow-weak-isolation): {report.describe()}", file=sys.stderr)
    with ToolExecutor([tool], workers=1) as executor:
        result = executor.execute([ToolCall("python", args.code)])[0]
    print(f"[status={result.status} latency={result.latency_s:.3f}s isolation={report.level} ({report.sandbox})]",
          file=sys.stderr)  # fmt: skip
    print(result.text)
    return 0


@_clean_errors
def _cmd_tool_search(args: argparse.Namespace) -> int:
    from .base import ToolCall
    from .executor import build_executor_from_args

    ns = SimpleNamespace(
        agentic_tool_config=args.tool_config,
        agentic_tool_retries=args.retries,
        agentic_tool_workers=1,
        agentic_search_backend=args.backend,
        agentic_search_topk=args.topk,
        agentic_search_snippet_chars=args.snippet_chars,
        agentic_cache_path=args.cache,
        agentic_cache_mode=args.cache_mode,
        agentic_cache_tools=args.cache_tools,
    )
    if args.index:
        import os

        os.environ["AGENTIC_SEARCH_INDEX"] = args.index
    with build_executor_from_args(ns) as executor:
        result = executor.execute([ToolCall("search", args.query)])[0]
    print(f"[status={result.status} cached={result.cached} latency={result.latency_s:.3f}s]", file=sys.stderr)
    print(result.text)
    return 0


@_clean_errors
def _cmd_tool_run(args: argparse.Namespace) -> int:
    r"""One call of any tool of a tool config (a `module:Class` tool, HTTP, MCP, python, search) through the executor.

    The same path as a rollout's call (`build_executor_from_args`: the config's tools, retries, timeouts and cache),
    so what it prints is the observation the model would read between ` <result>` and `</result>`.
    """
    from .base import ToolCall
    from .executor import build_executor_from_args

    ns = SimpleNamespace(
        agentic_tool_config=args.config,
        agentic_tool_workers=1,
        agentic_cache_path=args.cache,
        agentic_search_index=args.index,
    )
    with build_executor_from_args(ns) as executor:
        if args.tag not in executor.tools:
            known = ", ".join(f"<{tag}> ({type(tool).__name__})" for tag, tool in sorted(executor.tools.items()))
            source = args.config or "the built-in tools (no --config)"
            raise ValueError(f"no tool answers <{args.tag}> in {source}; its tags: {known}")
        result = executor.execute([ToolCall(args.tag, args.body)])[0]
    print(f"[tool={args.tag} status={result.status} cached={result.cached} latency={result.latency_s:.3f}s]",
          file=sys.stderr)  # fmt: skip
    print(result.text)
    return 0


@_clean_errors
def _cmd_cache_import(args: argparse.Namespace) -> int:
    from .cache import open_cache

    cache = open_cache(args.cache)
    try:
        counts = cache.import_json(args.file, tool=args.tool)
    finally:
        cache.close()
    print(json.dumps(counts))
    return 0


@_clean_errors
def _cmd_cache_export(args: argparse.Namespace) -> int:
    from .cache import open_cache

    cache = open_cache(args.cache, mode="read_only", on_corrupt="raise")  # never creates, never hides corruption
    try:
        n = cache.export_json(args.output, tool=args.tool)
    finally:
        cache.close()
    print(json.dumps({"exported": n, "output": args.output}))
    return 0


@_clean_errors
def _cmd_cache_stats(args: argparse.Namespace) -> int:
    from .cache import open_cache

    cache = open_cache(args.cache, mode="read_only", on_corrupt="raise")  # never creates, never hides corruption
    try:
        stats = cache.stats()
    finally:
        cache.close()
    print(json.dumps(stats, indent=2))
    return 0


@_clean_errors
def _cmd_index_build(args: argparse.Namespace) -> int:
    from .index import build_corpus_from_cache_json

    print(json.dumps(build_corpus_from_cache_json(args.cache_json, args.output)))
    return 0


def add_subcommands(subparsers: "argparse._SubParsersAction") -> None:
    r"""Register the `tool`, `cache` and `index` commands on `subparsers` (from `parser.add_subparsers()`).

    Each leaf parser sets `func` (called with the parsed namespace, returns the exit code). The defaults of the
    `tool` options are those of the recipe keys they stand for (read from `hparams.AgenticArguments`; `--retries`:
    the `arpo` preset's `agentic_tool_retries`).
    """
    from ..hparams import TOOL_RETRIES, agentic_default, agentic_field

    isolation = agentic_field("agentic_python_isolation")
    cache_mode = agentic_field("agentic_cache_mode")
    tool = subparsers.add_parser("tool", help="Run one tool call and print its observation.")
    tool_sub = tool.add_subparsers(dest="tool_command", required=True)
    py = tool_sub.add_parser("python", help="Run code in the sandboxed Python tool.")
    py.add_argument("--code", required=True, help="Python source to run.")
    timeout = agentic_default("agentic_python_timeout")
    py.add_argument("--timeout", type=_positive(float), default=timeout, help="Wall-clock limit in seconds, > 0 "
                    f"(default {timeout:g}).")  # fmt: skip
    max_chars = agentic_default("agentic_python_max_output_chars")
    py.add_argument("--max-output-chars", type=_positive(int, 2, inclusive=True), default=max_chars,
                    help=f"Output cap in characters, >= 2 (default {max_chars}).")  # fmt: skip
    py.add_argument("--isolation", default=isolation.default, choices=typing.get_args(isolation.type),
                    help=f"Sandbox (default {isolation.default}: the strongest measured one; `llamafactory-agentic "
                    "doctor` lists them).")  # fmt: skip
    py.add_argument("--allow-weak-isolation", action="store_true", help="Run the code even where the measured "
                    "sandbox is below agentic_python_min_isolation's default (e.g. as root, or with network); refused "
                    "otherwise.")  # fmt: skip
    py.set_defaults(func=_cmd_tool_python)
    se = tool_sub.add_parser("search", help="Run one search query through the executor (cache included).")
    se.add_argument("--query", required=True, help="Search query (the body of <search>...</search>).")
    backend = agentic_default("agentic_search_backend")
    se.add_argument("--backend", default=backend, help=f"local, replay, web or retriever (default {backend}).")
    se.add_argument("--cache", default=None, help="Cache: SQLite file or redis:// URL (default none).")
    modes = ", ".join(typing.get_args(cache_mode.type))
    se.add_argument("--cache-mode", default=cache_mode.default, help=f"{modes} (default {cache_mode.default}).")
    se.add_argument("--index", default=None, help="Local backend: folder with corpus.jsonl (from `index build`).")
    se.add_argument("--tool-config", default=None, help="Tool config YAML (backend params such as API keys).")
    topk, snippet_chars = agentic_default("agentic_search_topk"), agentic_default("agentic_search_snippet_chars")
    se.add_argument("--topk", type=_positive(int), default=topk, help=f"Snippets per query (default {topk}).")
    se.add_argument("--snippet-chars", type=_positive(int), default=snippet_chars,
                    help=f"Characters per snippet (default {snippet_chars}).")  # fmt: skip
    se.add_argument("--retries", type=_positive(int, 1, inclusive=True), default=TOOL_RETRIES,
                    help=f"Attempts per call, >= 1 (default {TOOL_RETRIES}).")  # fmt: skip
    se.set_defaults(func=_cmd_tool_search, cache_tools=agentic_default("agentic_cache_tools"))
    run = tool_sub.add_parser(
        "run",
        help="Run one call of any configured tool (your module:Class tool, HTTP, MCP, python, search) through the "
        "executor, as a rollout would.",
    )
    run.add_argument("--config", default=None, help="Tool config YAML (agentic_tool_config); default: the built-in "
                     "python and search tools.")  # fmt: skip
    run.add_argument("--tag", required=True, help="The tool's tag, e.g. convert for <convert>...</convert>.")
    run.add_argument("--body", required=True, help="What the model writes between the tags.")
    run.add_argument("--cache", default=None, help="Cache: SQLite file or redis:// URL (default none).")
    run.add_argument("--index", default=None, help="Local search backend: folder with corpus.jsonl.")
    run.set_defaults(func=_cmd_tool_run)

    cache = subparsers.add_parser("cache", help="Import, export and inspect the tool cache.")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    imp = cache_sub.add_parser("import", help="Import a reference {query: result} JSON cache.")
    imp.add_argument("file", help="JSON file, e.g. ARPO's search_cache.json.")
    imp.add_argument("--cache", required=True, help="SQLite file or redis:// URL.")
    imp.add_argument("--tool", default="search", help="Tool the entries belong to (default search).")
    imp.set_defaults(func=_cmd_cache_import)
    exp = cache_sub.add_parser("export", help="Export the cache to the reference {query: result} JSON format.")
    exp.add_argument("--cache", required=True, help="SQLite file or redis:// URL.")
    exp.add_argument("--output", required=True, help="JSON file to write.")
    exp.add_argument("--tool", default="search", help="Tool whose entries are exported (default search).")
    exp.set_defaults(func=_cmd_cache_export)
    st = cache_sub.add_parser("stats", help="Entries, size and hit rate of a cache (read-only: creates nothing; a "
                              "missing, corrupt or unreachable cache exits 1).")  # fmt: skip
    st.add_argument("--cache", required=True, help="SQLite file or redis:// URL.")
    st.set_defaults(func=_cmd_cache_stats)

    index = subparsers.add_parser("index", help="Build the local search corpus and BM25 index.")
    index_sub = index.add_subparsers(dest="index_command", required=True)
    build = index_sub.add_parser("build", help="Corpus + BM25 index from a reference search_cache.json.")
    build.add_argument("--cache-json", required=True, help="Reference cache {query: 'Page 1: ...'}.")
    build.add_argument("--output", required=True, help="Folder for corpus.jsonl and the bm25s/ index.")
    build.set_defaults(func=_cmd_index_build)


def _standalone_main(argv: list[str] | None = None) -> int:
    r"""Parse `argv` with only this module's commands and run the chosen one; returns the exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="llamafactory-agentic", description="Agentic tools, cache and index.")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(_standalone_main())
