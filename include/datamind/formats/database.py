"""SQLite databases: opened read-only and immutable, row counts and value sizes checked in SQL before a
table is materialized, keys and foreign keys recorded."""

from __future__ import annotations

import logging
import os
import sqlite3
from contextlib import closing
from urllib.parse import quote

import pandas as pd

from datamind.formats.common import LoadedTable, LoadError, LoadResult
from datamind.settings import Limits

log = logging.getLogger(__name__)


def _primary_key(con, quoted_table: str) -> list[str]:
    """The declared primary key columns of a SQLite table, in key order."""
    cols = con.execute(f"PRAGMA table_info({quoted_table})").fetchall()
    return [r[1] for r in sorted((r for r in cols if r[5]), key=lambda r: r[5])]


def _connect_ro(path: str) -> sqlite3.Connection:
    """Read-only and immutable: what this reads is a private copy (ingest's, or a staged file) that never
    changes, and an immutable open writes nothing beside it (no -shm or -wal, whatever the journal mode)."""
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    con.text_factory = lambda b: b.decode("utf-8", errors="replace")
    return con


def _qident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _load_sqlite(local_path: str, limits: Limits) -> LoadResult:
    try:
        con = _connect_ro(local_path)
    except sqlite3.DatabaseError as exc:
        raise LoadError("unloadable", f"SQLite database cannot be opened: {exc}") from exc
    # A generated column such as zeroblob(200000000) costs nothing on disk; any value past this size
    # fails the query that makes it ("string or blob too big") instead of being materialized.
    value_cap = max(1 << 20, 4 * limits.max_cell_chars)
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, value_cap)
    with closing(con):
        try:
            master = con.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
            ).fetchall()
            encoding = con.execute("PRAGMA encoding").fetchone()[0].lower()
        except sqlite3.DatabaseError as exc:
            raise LoadError("unloadable", f"SQLite database cannot be read: {exc}") from exc
        tables = []
        for name, ddl in master:
            opts = {"format": "sqlite", "table": name}
            q = _qident(name)
            try:
                cols = [r[1] for r in con.execute(f"PRAGMA table_info({q})")]
                fks = [
                    {"from_table": name, "from_column": r[3], "to_table": r[2], "to_column": r[4]}
                    for r in con.execute(f"PRAGMA foreign_key_list({q})")
                ]
                n_rows = con.execute(f"SELECT COUNT(*) FROM {q}").fetchone()[0]
                df = None
                if n_rows <= limits.max_db_table_rows:
                    _check_table_bytes(con, q, cols, limits)
                    df = pd.read_sql_query(f"SELECT * FROM {q}", con)
            except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
                error = str(exc)
                if "too big" in error:
                    error = f"a value is larger than the {value_cap:,}-byte cap (string or blob too big)"
                tables.append(LoadedTable(name, None, 0, 0, opts, ddl=ddl, error=error[:300]))
                continue
            except LoadError as exc:
                tables.append(LoadedTable(name, None, n_rows, len(cols), opts, ddl=ddl, error=exc.message))
                continue
            tables.append(
                LoadedTable(
                    name,
                    df,
                    n_rows,
                    len(cols),
                    opts,
                    raw_columns=[str(c) for c in cols],
                    ddl=ddl,
                    foreign_keys=fks,
                    primary_key=_primary_key(con, q),
                )
            )
    return LoadResult("sqlite", None, encoding, tables)


def _check_table_bytes(con: sqlite3.Connection, q: str, cols: list[str], limits: Limits) -> None:
    """Sum the table's value sizes in SQL (streaming, no rows kept) before reading it into memory."""
    if not cols:
        return
    total = " + ".join(f"total(length({_qident(c)}))" for c in cols)
    size = con.execute(f"SELECT {total} FROM {q}").fetchone()[0] or 0
    if size > limits.max_uncompressed_bytes:
        raise LoadError(
            "unloadable",
            f"the table's values add up to {int(size):,} bytes, above the {limits.max_uncompressed_bytes:,}-byte cap",
        )
