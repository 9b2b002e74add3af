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

"""The SQLite example environment (`examples/sqlite_env`) through its own tool config and the real executor."""

from pathlib import Path

import pytest

from llamafactory_agentic.tools import ToolCall, ToolExecutor
from llamafactory_agentic.tools.registry import ToolConfigError, build_tools, load_tool_config


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sqlite_env"


@pytest.fixture()
def executor(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))  # the user's module on the path, as for any `module:Class` tool
    tools = [t for spec in load_tool_config(EXAMPLE / "tools.yaml").tools for t in build_tools(spec)]
    ex = ToolExecutor(tools)
    yield ex
    ex.close()


def sql(executor, statement, trajectory):
    result = executor.execute([ToolCall("sql", statement, trajectory)])[0]
    return result.text


def test_queries_and_updates_are_per_trajectory_and_reset(executor):
    assert sql(executor, "SELECT name, stock FROM products WHERE id = 2", "a") == "name | stock\nmouse | 25"
    assert sql(executor, "UPDATE products SET stock = stock - 5 WHERE id = 2", "a") == "1 rows changed."
    assert sql(executor, "SELECT stock FROM products WHERE id = 2", "a") == "stock\n20"
    assert sql(executor, "SELECT stock FROM products WHERE id = 2", "b") == "stock\n25"  # b starts from the fixture
    executor.forget_trajectories(["a"])  # a finished: its database is dropped; a new `a` starts from the fixture
    assert sql(executor, "SELECT stock FROM products WHERE id = 2", "a") == "stock\n25"


def test_branch_copies_its_sources_database(executor):
    sql(executor, "INSERT INTO orders VALUES (5, 2, 1, 3)", "src")
    executor.fork_trajectory("src", "branch")
    sql(executor, "DELETE FROM orders WHERE customer_id = 2", "src")  # the source's later change
    assert sql(executor, "SELECT COUNT(*) AS n FROM orders WHERE customer_id = 2", "branch") == "n\n2"
    assert sql(executor, "SELECT COUNT(*) AS n FROM orders WHERE customer_id = 2", "src") == "n\n0"
    metrics = executor.pop_metrics()
    assert metrics["tools/sql/forks_copied"] == 1 and metrics["tools/sql/replayed_calls"] == 0
    assert metrics["tools/sql/cache_hits"] == 0


def test_errors_and_bounds_are_observations(executor):
    assert "no such table: nope" in sql(executor, "SELECT * FROM nope", "a")
    assert "CHECK constraint failed" in sql(executor, "INSERT INTO orders VALUES (9, 1, 1, 0)", "a")
    denied = sql(executor, "ATTACH DATABASE '/etc/passwd' AS x", "a")
    assert denied.startswith("Error: Tool(sql) execution failed") and "not authorized" in denied
    assert "not authorized" in sql(executor, "PRAGMA max_page_count = 1000000", "a")
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    result = executor.execute([ToolCall("sql", endless, "a")])[0]
    assert result.status == "error" and "statement stopped after" in result.text and result.latency_s < 7
    many = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100) SELECT x FROM c"
    assert sql(executor, many, "a").endswith("\n20\n(80 more rows)")
    assert "one statement at a time" in sql(executor, "SELECT 1; SELECT 2", "a")
    assert sql(executor, "SELECT name FROM customers WHERE id = 1", "a") == "name\nAda"  # the state survived


def test_bad_params_are_refused_at_load(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - name: sqlite_env:SQLiteEnvironment\n    params: {fixture: missing.sql}\n")
    with pytest.raises(ToolConfigError, match="`fixture` missing.sql is not a file"):
        build_tools(load_tool_config(config).tools[0])
