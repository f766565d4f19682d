"""The SQL tools the agent calls in SQL mode: read-only, time-limited access to one SQLite database.

Three independent guards keep the database unmodified: the connection is opened ``mode=ro`` (SQLite
refuses every write), ``PRAGMA query_only`` is set, and an authorizer denies every action that is not a
read. A progress handler aborts any statement that runs longer than the time limit.
"""

from __future__ import annotations

import csv
import os
import sqlite3
import time
import urllib.parse

_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
# Read-only pragmas the tools themselves need; everything else (journal_mode, writable_schema...) is denied.
_ALLOWED_PRAGMAS = {"table_info", "table_xinfo", "foreign_key_list", "index_list", "index_info", "index_xinfo"}
_PROGRESS_EVERY = 10_000  # SQLite VM instructions between deadline checks


class SqlToolError(RuntimeError):
    pass


class ReadOnlyDatabase:
    def __init__(self, path: str | None, timeout_s: float = 10.0) -> None:
        if not path:
            raise SqlToolError("this session has no database file")
        self.path = path
        self.timeout_s = timeout_s
        self._deadline = float("inf")
        uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro&immutable=1"
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._conn.execute("PRAGMA query_only = ON")
        self._conn.set_authorizer(self._authorize)
        self._conn.set_progress_handler(self._over_time, _PROGRESS_EVERY)

    def close(self) -> None:
        self._conn.close()

    def _authorize(self, action, arg1, arg2, db_name, trigger):  # noqa: ANN001 - sqlite3 callback
        if action in _ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _ALLOWED_PRAGMAS:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    def _over_time(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def _run(self, sql: str, params=()):  # noqa: ANN001
        self._deadline = time.monotonic() + self.timeout_s
        try:
            cursor = self._conn.execute(sql, params)
            rows = cursor.fetchall()
            return [d[0] for d in (cursor.description or [])], rows
        except sqlite3.ProgrammingError as exc:  # a placeholder without its value, or a value SQLite cannot bind
            raise SqlToolError(f"SQL parameters: {exc}") from None
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise SqlToolError(f"SQL statement exceeded the {self.timeout_s:g} s time limit") from None
            raise SqlToolError(f"SQL error: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise SqlToolError(f"SQL error: {exc} (the database is read-only)") from None
        finally:
            self._deadline = float("inf")

    def get_db_info(self) -> str:
        """Tables with their columns, types, keys and row counts."""
        _, tables = self._run(
            "SELECT name FROM sqlite_master WHERE type IN ('table','view') AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
        parts = [f"Database: {os.path.basename(self.path)}"]
        for (name,) in tables:
            quoted = '"' + name.replace('"', '""') + '"'
            _, cols = self._run(f"PRAGMA table_info({quoted})")
            _, count = self._run(f"SELECT COUNT(*) FROM {quoted}")
            _, fks = self._run(f"PRAGMA foreign_key_list({quoted})")
            parts.append(f"\nTable {name} ({count[0][0]} rows)")
            for _cid, col, ctype, notnull, _default, pk in cols:
                flags = " PRIMARY KEY" if pk else ""
                flags += " NOT NULL" if notnull and not pk else ""
                parts.append(f"  - {col} {ctype or 'ANY'}{flags}")
            for fk in fks:
                parts.append(f"  foreign key {fk[3]} -> {fk[2]}.{fk[4]}")
        return "\n".join(parts)

    def query(self, sql: str) -> tuple[list[str], list[tuple]]:
        """(column names, rows) of one read-only statement, under the same rules as ``execute_sql``."""
        if not isinstance(sql, str) or not sql.strip():
            raise SqlToolError("a query needs a non-empty SQL string")
        return self._run(sql)

    def execute_sql(self, sql: str, output_path: str, params=None) -> str:  # noqa: ANN001
        """Run one read-only query and write its result as CSV to `output_path` (inside the working dir).
        ``params``: values bound to the query's ``?`` or ``:name`` placeholders (a sequence or a mapping), so a
        value from an earlier step goes in as a value, never pasted into the SQL text."""
        if not isinstance(sql, str) or not sql.strip():
            raise SqlToolError("execute_sql needs a non-empty SQL string")
        if params is not None and not isinstance(params, (dict, list, tuple)):
            raise SqlToolError(f"params must be a tuple, list or dict, got {type(params).__name__}")
        target = os.path.realpath(output_path)
        cwd = os.path.realpath(os.getcwd())
        if not target.startswith(cwd + os.sep):
            raise SqlToolError(f"output_path must be a file inside the working directory, got {output_path!r}")
        columns, rows = self._run(sql, _plain(params) if params is not None else ())
        with open(target, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(columns)
            writer.writerows(rows)
        return f"{len(rows)} rows x {len(columns)} columns written to {output_path}"


def _plain(params):  # noqa: ANN001, ANN202
    """``params`` with numpy scalars as the Python numbers they hold (SQLite binds int, float, str, bytes, None:
    a count read back by pandas is a numpy integer)."""

    def plain(v):  # noqa: ANN001, ANN202
        item = getattr(v, "item", None)
        return item() if callable(item) and type(v).__module__ == "numpy" else v

    if isinstance(params, dict):
        return {k: plain(v) for k, v in params.items()}
    return tuple(plain(v) for v in params)
