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

"""Example environment: a small SQLite database per trajectory that the agent queries and updates.

`<sql>SELECT name FROM products WHERE stock < 5</sql>` -> a text table; `<sql>UPDATE ...</sql>` -> `2 rows changed.`.
Every trajectory starts from the rows of `fixture` (a SQL script, `shop.sql` by default) in its own in-memory
database; an ARPO branch gets a copy of its source's database (`sqlite3.Connection.backup`, no replay). Bounds: one
statement per call, stopped at the call's deadline (a progress handler), the database at most `max_mb` MiB
(`PRAGMA max_page_count`), at most `max_rows` rows and `max_output_chars` characters shown; no ATTACH, PRAGMA or
extension loading (an authorizer), so a call reaches no file. Tool config: `examples/sqlite_env/tools.yaml`
(docs/tools.md "Environments").
"""

import os
import sqlite3
import time
from pathlib import Path

from llamafactory_agentic.tools import ToolError, ToolOutput
from llamafactory_agentic.tools.base import STATUS_EMPTY, truncate_middle
from llamafactory_agentic.tools.environment import Environment


FIXTURE = Path(__file__).with_name("shop.sql")
_DENIED = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH, sqlite3.SQLITE_PRAGMA}


def _authorize(action, *_):
    return sqlite3.SQLITE_DENY if action in _DENIED else sqlite3.SQLITE_OK


class SQLiteEnvironment(Environment):
    r"""One in-memory SQLite database per trajectory, loaded from `fixture`.

    Args:
        fixture: SQL script creating and filling the tables (default `shop.sql` next to this file).
        max_rows: rows shown per query (the count of the others is given).
        max_output_chars: cap on the observation.
        max_mb: largest database in MiB.

    Raises:
        ValueError: a missing fixture file or a bad bound (at tool build time, `check_params`).
    """

    name = "sql"
    default_tag = "sql"

    def __init__(self, fixture: str | None = None, max_rows: int = 20, max_output_chars: int = 2000, max_mb: int = 16):
        """Create the trajectory's database from the fixture."""
        self.check_params({"fixture": fixture, "max_rows": max_rows, "max_output_chars": max_output_chars,
                           "max_mb": max_mb})  # fmt: skip
        self.max_rows, self.max_output_chars, self.max_mb = int(max_rows), int(max_output_chars), int(max_mb)
        self.conn = self._connect()
        self.conn.executescript(Path(fixture or FIXTURE).read_text(encoding="utf-8"))
        self._guard()

    @classmethod
    def check_params(cls, params):
        """Names and values of the tool config's `params` (raises `ValueError` naming the bad one)."""
        super().check_params(params)
        fixture = params.get("fixture")
        if fixture is not None and not os.path.isfile(fixture):
            raise ValueError(f"`fixture` {fixture} is not a file: give the path of a SQL script")
        for key in ("max_rows", "max_output_chars", "max_mb"):
            value = params.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{key}` must be a positive integer, got {value!r}")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)

    def _guard(self) -> None:
        page = self.conn.execute("PRAGMA page_size").fetchone()[0]
        self.conn.execute(f"PRAGMA max_page_count = {max(1, self.max_mb * 1024 * 1024 // page)}")
        self.conn.set_authorizer(_authorize)

    def step(self, call: str, timeout_s: float) -> ToolOutput:
        """Run one SQL statement; a query gives a text table, a change the number of rows changed."""
        if not sqlite3.complete_statement(call.rstrip().rstrip(";") + ";"):
            raise ToolError("incomplete SQL statement")
        deadline = time.monotonic() + timeout_s
        self.conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        try:
            cursor = self.conn.execute(call)
            rows = cursor.fetchmany(self.max_rows + 1) if cursor.description else []
            more = sum(1 for _ in cursor) if cursor.description and len(rows) > self.max_rows else 0
        except sqlite3.ProgrammingError as exc:  # e.g. two statements in one call
            raise ToolError(str(exc)) from None
        except sqlite3.Error as exc:
            if time.monotonic() > deadline:
                raise ToolError(f"statement stopped after {timeout_s:.3g} seconds") from None
            raise ToolError(f"{type(exc).__name__}: {exc}") from None
        finally:
            self.conn.set_progress_handler(None, 0)
        if cursor.description is None:
            return ToolOutput(f"{cursor.rowcount} rows changed." if cursor.rowcount >= 0 else "Done.")
        if not rows:
            return ToolOutput("No rows.", STATUS_EMPTY)
        header = " | ".join(d[0] for d in cursor.description)
        shown = rows[: self.max_rows]
        lines = [header] + [" | ".join("NULL" if v is None else str(v) for v in row) for row in shown]
        extra = len(rows) - len(shown) + more
        if extra:
            lines.append(f"({extra} more rows)")
        return ToolOutput(truncate_middle("\n".join(lines), self.max_output_chars))

    def fork(self) -> "SQLiteEnvironment":
        """A copy of the database as it is now (`sqlite3.Connection.backup`)."""
        twin = object.__new__(SQLiteEnvironment)
        twin.max_rows, twin.max_output_chars, twin.max_mb = self.max_rows, self.max_output_chars, self.max_mb
        twin.conn = twin._connect()
        self.conn.backup(twin.conn)
        twin._guard()
        return twin

    def close(self) -> None:
        """Drop the database."""
        self.conn.close()
