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

"""Bad tool configs, `agentic_*` keys and command-line values are clear errors (issue 8 items 4 and 5).

Each message names the file, the entry and the fix (or the recipe key); nothing surfaces as a raw traceback from
the command line, and `llamafactory-cli train` stops before loading a model.
"""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamafactory_agentic.tools import PythonTool, SearchTool, ToolExecutor, build_executor_from_args
from llamafactory_agentic.tools.registry import ToolConfigError, load_tool_config


REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _write(tmp_path, text, name="tools.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "entry,expected",
    [
        ("  - name: python\n    timeout: -5\n", r"tools\[0\] \(python\): `timeout` must be a number > 0, got -5"),
        ("  - name: python\n    timeout: 0\n", r"`timeout` must be a number > 0, got 0"),
        ("  - name: python\n    timeout: soon\n", r"`timeout` must be a number > 0, got a string"),
        ("  - name: search\n    retries: 0\n", r"tools\[0\] \(search\): `retries` must be a whole number >= 1"),
        ("  - name: search\n    call_limit: -1\n", r"`call_limit` must be a whole number >= 0 or null"),
        ("  - name: search\n    dedup: maybe\n", r"`dedup` must be true or false"),
        ("  - name: search\n    tag: two words\n", r"`tag` must be a word"),
        ("  - name: search\n    params: [1, 2]\n", r"`params` must be a mapping"),
        ("  - name: python\n    colour: red\n", r"1 unknown key \(not named.*go under `params:`"),
        ("  - name: pyhton\n", r"tools\[0\] \(pyhton\): unknown tool `pyhton`: did you mean `python`\?"),
        ("  - name: no_such_module_xyz:Tool\n", r"cannot import module `no_such_module_xyz`.*PYTHONPATH"),
        ("  - name: json:NoSuchClass\n", r"module `json` has no `NoSuchClass`"),
        ("  - name: json:JSONDecoder\n", r"`json:JSONDecoder` is not a BaseTool subclass"),
        ("  - name: python\n    params: {max_output_char: 10}\n",
         r"unknown params \['max_output_char'\] \(`max_output_char`: did you mean `max_output_chars`\?\)"),
        ("  - name: search\n    params: {backend: local, index_dirr: x}\n",
         r"unknown params \['index_dirr'\].*did you mean `index_dir`"),
        ("  - 42\n", r"tools\[0\] needs a `name`"),
    ],
)  # fmt: skip
def test_bad_entries_name_the_file_the_entry_and_the_fix(tmp_path, entry, expected):
    path = _write(tmp_path, "tools:\n" + entry)
    with pytest.raises(ToolConfigError, match=expected) as info:
        load_tool_config(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "cache,expected",
    [
        ("{mode: sometimes}", r"cache `mode` must be one of read_write, read_only, offline"),
        ("{ttl: 5}", r"`cache` has unknown keys \['ttl'\]"),
        ("{ttl_s: -1}", r"cache `ttl_s` must be a number > 0"),
        ("[a]", r"`cache` must be a mapping"),
    ],
)
def test_bad_cache_section(tmp_path, cache, expected):
    path = _write(tmp_path, f"tools: [python]\ncache: {cache}\n")
    with pytest.raises(ToolConfigError, match=expected):
        load_tool_config(path)


def test_unparsable_and_missing_files(tmp_path):
    with pytest.raises(ToolConfigError, match="not valid YAML"):
        load_tool_config(_write(tmp_path, "tools: [python\n"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tool_config(tmp_path / "missing.yaml")
    with pytest.raises(ToolConfigError, match=r"unknown top-level keys \['tool'\] \(`tool`: did you mean `tools`\?\)"):
        load_tool_config(_write(tmp_path, "tool: [python]\n"))


@pytest.mark.parametrize(
    "text,expected",
    [
        # issue 34 high 4: /etc/shadow parsed as YAML and came back line by line in "unknown top-level keys [...]"
        ("root:$6$saltsalt$hashhash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
         r"2 unknown top-level keys \(not named"),
        # a YAML syntax error quoted the line
        ("tools: [python]\nDB_PASSWORD: hunter2: extra\n", r"not valid YAML at line 2, column 21"),
        ("DB_PASSWORD: hunter2\ntool: [python]\n", r"unknown top-level keys \['tool'\].* and 1 other unknown top-level key"),
        ("hunter2 hunter2\n", r"expected a mapping with a `tools` list .*got a string"),
        ("tools:\n  - {name: python, DB_PASSWORD: hunter2}\n", r"tools\[0\] \(python\) has 1 unknown key \(not named"),
        ("tools:\n  - {name: python, tag: 'hunter2 x'}\n", r"`tag` must be a word"),
        ("tools:\n  - {name: python, timeout: hunter2}\n", r"`timeout` must be a number > 0, got a string"),
        ("tools:\n  - {name: python, dedup: hunter2}\n", r"`dedup` must be true or false, got a string"),
        ("tools:\n  - {name: python, params: hunter2}\n", r"`params` must be a mapping .*got a string"),
        ("tools:\n  - {name: python, params: {hunter2: 1}}\n", r"1 unknown param \(not named"),
        ("tools:\n  - [hunter2]\n", r"needs a `name` .*got a list of 1 item"),
        ("tools: [python]\ncache: {mode: hunter2}\n", r"cache `mode` must be one of"),
        ("tools: [python]\ncache: {hunter2: 1}\n", r"`cache` has 1 unknown key \(not named"),
        ("tools: [python]\ncache: {tools: 5}\n", r"cache `tools` must be a list of tool names, got a number"),
        ("mcp_servers:\n  - [hunter2]\n", r"needs a `name` \(a label for the server\), got a list of 1 item"),
        ("mcp_servers:\n  - {name: s, command: python, env: hunter2}\n", r"`env` must be a mapping .*got a string"),
        ("http_tools:\n  - {name: x, url: 'ftp://hunter2'}\n", r"`url` must be an http:// or https:// endpoint, got a string"),
        ("http_tools:\n  - [hunter2]\n", r"needs a `name` .*got a list of 1 item"),
        ("\xff\xfe hunter2", r"not a text file"),
    ],
)  # fmt: skip
def test_loader_errors_never_echo_the_files_content(tmp_path, text, expected):
    path = tmp_path / "tools.yaml"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ToolConfigError, match=expected) as info:
        load_tool_config(path)
    for secret in ("hunter2", "DB_PASSWORD", "saltsalt", "daemon"):
        assert secret not in str(info.value), str(info.value)


def test_loader_refuses_a_huge_file_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("tools: [python]\n" + "# hunter2\n" * 200_000)
    with pytest.raises(ToolConfigError, match="bytes is not a tool config"):
        load_tool_config(path)


@pytest.mark.parametrize(
    "params,expected",
    [
        ("{max_output_chars: lots}", r"`max_output_chars` must be a whole number >= 2, got 'lots'"),
        ("{memory_mb: -1}", r"`memory_mb` must be a whole number > 0 or null"),
        ("{isolation: chroot}", r"`isolation` must be auto or one of bwrap, unshare, rlimits-only"),
        ("{backend: cloud}", r"unknown python backend 'cloud'"),
    ],
)
def test_bad_values_are_named_when_the_tool_is_built(tmp_path, params, expected):
    path = _write(tmp_path, f"tools:\n  - name: python\n    params: {params}\n")
    args = SimpleNamespace(agentic_tool_config=str(path), agentic_cache_path=None)
    with pytest.raises(ToolConfigError, match=expected) as info:
        build_executor_from_args(args)
    assert f"{path}: tools[0] (python)" in str(info.value)


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("agentic_python_timeout", -5, r"recipe key `agentic_python_timeout` must be a number > 0, got -5"),
        ("agentic_python_timeout", 0, r"`agentic_python_timeout` must be a number > 0, got 0"),
        ("agentic_python_max_output_chars", 0, r"`agentic_python_max_output_chars` must be a whole number >= 2"),
        ("agentic_tool_retries", 0, r"`agentic_tool_retries` must be a whole number >= 1"),
        ("agentic_tool_workers", 0, r"`agentic_tool_workers` must be a whole number >= 1"),
        ("agentic_search_topk", -1, r"`agentic_search_topk` must be a whole number > 0"),
        ("agentic_search_snippet_chars", 0, r"`agentic_search_snippet_chars` must be a whole number > 0"),
        ("agentic_python_isolation", "chroot", r"`agentic_python_isolation` must be one of auto, bwrap"),
        ("agentic_python_min_isolation", "max", r"`agentic_python_min_isolation` must be one of none, unprivileged"),
        ("agentic_cache_mode", "sometimes", r"`agentic_cache_mode` must be one of read_write"),
    ],
)
def test_bad_recipe_keys_are_named(key, value, expected):
    args = SimpleNamespace(agentic_tool_config=None, agentic_cache_path=None, **{key: value})
    with pytest.raises(ValueError, match=expected):
        build_executor_from_args(args)


def test_constructors_reject_bad_limits():
    with pytest.raises(ValueError, match="`timeout_s` must be a number > 0, got -1"):
        PythonTool(timeout_s=-1)
    with pytest.raises(ValueError, match="`retries` must be a whole number >= 1"):
        PythonTool(retries=0)
    with pytest.raises(ValueError, match="`topk` must be a whole number > 0"):
        SearchTool(backend="replay", topk=0)
    with pytest.raises(ValueError, match="`workers` must be a whole number >= 1"):
        ToolExecutor([], workers=0)


def _cli(*argv):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([str(BIN / "llamafactory-agentic"), *argv], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["tool", "python", "--code", "1", "--timeout", "-1"], "argument --timeout: must be > 0, got -1"),
        (["tool", "python", "--code", "1", "--timeout", "0"], "argument --timeout: must be > 0, got 0"),
        (["tool", "python", "--code", "1", "--timeout", "nan"], "argument --timeout: must be > 0, got nan"),
        (["tool", "python", "--code", "1", "--max-output-chars", "0"], "--max-output-chars: must be >= 2"),
        (["tool", "search", "--query", "q", "--topk", "0"], "argument --topk: must be > 0, got 0"),
        (["tool", "search", "--query", "q", "--retries", "0"], "argument --retries: must be >= 1, got 0"),
    ],
)
@pytest.mark.slow
def test_cli_rejects_non_positive_limits(argv, expected):
    proc = _cli(*argv)
    assert proc.returncode == 2 and expected in proc.stderr, proc.stderr


@pytest.mark.slow
def test_cli_tool_config_error_is_one_line(tmp_path):
    path = _write(tmp_path, "tools:\n  - name: search\n  - name: my_missing_pkg:Tool\n")
    proc = _cli("tool", "search", "--query", "q", "--tool-config", str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: {path}: tools[1] (my_missing_pkg:Tool): cannot import module")


@pytest.mark.slow
def test_read_only_cache_commands_create_nothing_and_report_corruption(tmp_path):
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(os.urandom(8192))
    before = corrupt.read_bytes()
    for argv in (["cache", "stats", "--cache", str(corrupt)],
                 ["cache", "export", "--cache", str(corrupt), "--output", str(tmp_path / "out.json")]):  # fmt: skip
        proc = _cli(*argv)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "is not a usable SQLite database" in proc.stderr
    assert corrupt.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.sqlite"]
    typo = tmp_path / "typo" / "cahce.sqlite"
    for argv in (["cache", "stats", "--cache", str(typo)],
                 ["cache", "export", "--cache", str(typo), "--output", str(tmp_path / "out.json")],
                 ["tool", "search", "--query", "q", "--backend", "replay", "--cache", str(typo),
                  "--cache-mode", "offline"]):  # fmt: skip
        proc = _cli(*argv)
        assert proc.returncode == 1 and "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "typo").exists()
    other = tmp_path / "other.db"
    import sqlite3

    sqlite3.connect(other).execute("CREATE TABLE notes (x)")
    proc = _cli("cache", "stats", "--cache", str(other))
    assert proc.returncode == 1 and "not a tool cache" in proc.stderr


@pytest.mark.slow
def test_llamafactory_cli_train_stops_before_loading_a_model(tmp_path, tiny_model_dir):
    """A bad tool config, and (when this machine gives `full` only through a named sandbox) a sandbox below
    `agentic_python_min_isolation`, stop `llamafactory-cli train` with the message, before any model is loaded."""
    bad = _write(tmp_path, "tools:\n  - name: python\n    timeout: -5\n")
    cmd = [str(BIN / "llamafactory-cli"), "train", str(REPO / "recipes" / "tiny" / "arpo_cpu.yaml"),
           f"model_name_or_path={tiny_model_dir}", f"output_dir={tmp_path / 'out'}",
           f"agentic_cache_path={tmp_path / 'cache.sqlite'}", "dataset_dir=/nonexistent"]  # fmt: skip
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    proc = subprocess.run([*cmd, f"agentic_tool_config={bad}"], capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip
    assert proc.returncode != 0
    assert f"{bad}: tools[0] (python): `timeout` must be a number > 0, got -5" in proc.stderr, proc.stderr[-3000:]
    proc = subprocess.run([*cmd, "agentic_python_isolation=rlimits-only", "agentic_python_min_isolation=confined"],
                          capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert proc.returncode != 0  # rlimits-only writes world-writable host folders at best: below `confined` anywhere
    assert "is below `agentic_python_min_isolation: confined`" in proc.stderr, proc.stderr[-3000:]
    assert "host write POSSIBLE" in proc.stderr and "agentic_python_min_isolation:" in proc.stderr
