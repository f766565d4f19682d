"""Turn one file into tables, and record for each table the ``read_options`` that reload it identically.

The file formats, below every stage: ingestion loads a file here, and profiling and synthesis reload what it
recorded through the same code (``sniff`` names the format from the bytes, one module per format beside
``common``, and ``parse_worker`` runs all of it in a capped child process).

``load_tables`` decides (format, encoding, dialect, header rows, repairs) once; ``load_table`` replays a
table from its ``read_options`` without guessing again, so ingestion, profiling and every later stage
see exactly the same DataFrame.

What the loaders repair rather than reject (each repair is recorded in ``read_options``):
* title rows above the header and multi-row headers (``header_start``, ``header_rows``);
* merged header cells in sheets (their value fills the whole range);
* footnote rows under a sheet's table (rows with at most one filled cell after the last data row);
* a trailing delimiter on every line (the empty last column is dropped);
* rows with an unquoted delimiter inside a value (``repair_rows``: the extra fields are merged at the
  position that best matches the column types of the well-formed rows);
* fully empty rows and fully empty unnamed columns are dropped; text cells are stripped (the columns
  that needed it are recorded as ``strip_columns``, and whether rows were dropped as ``drop_empty_rows``,
  so a reload does what was decided without deciding it again).

Profiling reloads a delimited table through Arrow's CSV reader instead of pandas' parser where ingestion
checked that the reader, told each column's type, gives exactly the frame pandas gave; those types are
recorded as ``column_types`` (``load_recorded(frames=False)``; no frame is built on that route).

Memory guards, all before a full parse: files are never read past ``limits.max_file_bytes``; xlsx members
are checked against ``limits.max_uncompressed_bytes`` before decompressing, and a sheet whose declared
dimensions are wider than ``max_cols`` or larger than the cell cap is never handed to the reader; a csv whose
first line alone has more than ``max_cols`` fields is refused unparsed; SQLite values past a size cap fail
their query (``SQLITE_LIMIT_LENGTH``), a table's total value bytes are summed in SQL before it is read, row
counts come from ``COUNT(*)`` and a table above ``max_db_table_rows`` is never materialized. Every stage
that reads an untrusted file runs this module in a capped child process (``parse_worker``) for what these
bounds miss.
"""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from datamind.formats import sniff
from datamind.formats.arrow_csv import _arrow_csv_columns
from datamind.formats.common import LoadedTable, LoadError, LoadResult, TableColumns, _gunzip
from datamind.formats.database import _connect_ro, _load_sqlite, _primary_key, _qident
from datamind.formats.delimited import _load_csv, _read_csv_bytes, read_csv_text
from datamind.formats.text import _stem, decode_text
from datamind.formats.workbook import _load_workbook, _sheet_frame
from datamind.settings import Limits

log = logging.getLogger(__name__)


def load_tables(
    local_path: str, limits: Limits | None = None, data: bytes | None = None, filename: str | None = None
) -> LoadResult:
    """Detect, load and describe every table of the file at ``local_path`` (``data``: its bytes, if already read)."""
    limits = limits or Limits.from_env()
    declared = sniff.declared_format(filename or os.path.basename(local_path))
    if data is None:
        size = os.path.getsize(local_path)
        if size > limits.max_file_bytes:
            return LoadResult(
                "unknown",
                declared,
                None,
                [],
                f"file is {size:,} bytes, above the {limits.max_file_bytes:,}-byte limit",
                "file_too_large",
            )
        with open(local_path, "rb") as fh:
            data = fh.read()
    if not data:
        return LoadResult("unknown", declared, None, [], "empty file", "no_tables")
    fmt = sniff.detect_format(data)
    try:
        if fmt == "gzip":
            inner = _gunzip(data, min(limits.max_uncompressed_bytes, limits.max_file_bytes))
            if sniff.detect_format(inner) != "csv":
                raise LoadError("unsupported_format", "gzip archives are read only when they hold delimited text")
            result = _load_csv(inner, limits, _stem(filename or local_path))
            for t in result.tables:
                t.read_options["compression"] = "gzip"
            result.declared_format = declared
            return result
        if fmt in FORMATS:
            result = FORMATS[fmt].load(local_path, data, limits, _stem(filename or local_path))
        elif fmt in _REFUSED:
            raise LoadError("unsupported_format", _REFUSED[fmt])
        else:
            raise LoadError(*sniff.describe_unknown(data))
    except LoadError as exc:
        return LoadResult(fmt, declared, None, [], exc.message, exc.code)
    except MemoryError:
        message = f"parsing needed more than the {limits.parse_memory_mb:,} MB memory cap"
        return LoadResult(fmt, declared, None, [], message, "parse_limit")
    except Exception as exc:  # any parser crash is a property of the file, recorded, never raised
        return LoadResult(fmt, declared, None, [], f"{type(exc).__name__}: {exc}"[:500], "unloadable")
    result.declared_format = declared
    return result


def load_table(local_path: str, read_options: dict[str, Any]) -> pd.DataFrame:
    """Reload exactly one table from the ``read_options`` recorded by ``load_tables`` (deterministic)."""
    return _format(read_options["format"]).reload(local_path, read_options)


def load_recorded(local_path: str, read_options: list[dict[str, Any]], frames: bool = True) -> list[LoadedTable]:
    """Reload several tables of one file from their recorded options, reading the file once.

    No detection runs: this is what profiling and later stages use, so they see exactly the tables
    ingestion judged (SQLite tables also get their DDL and foreign keys back). ``frames=False``: a
    delimited table with recorded ``column_types`` comes back as ``columns`` (Arrow's reader, no frame)."""
    if not read_options:
        return []
    return _format(read_options[0]["format"]).reload_all(local_path, read_options, frames)


# -- the formats ----------------------------------------------------------------------------------------------
def _csv_reload(local_path: str, read_options: dict[str, Any]) -> pd.DataFrame:
    data = _csv_file_bytes(local_path, read_options)
    fast = _read_csv_bytes(data, read_options)
    if fast is not None:
        return fast[0]
    return read_csv_text(decode_text(data, read_options["encoding"]), read_options)[0]


def _csv_file_bytes(local_path: str, read_options: dict[str, Any]) -> bytes:
    with open(local_path, "rb") as fh:
        data = fh.read()
    return gzip.decompress(data) if read_options.get("compression") == "gzip" else data


def _csv_reload_all(local_path: str, read_options: list[dict[str, Any]], frames: bool) -> list[LoadedTable]:
    out: list[LoadedTable] = []
    for opts in read_options:
        name = opts.get("table", "data")
        if not frames and opts.get("column_types"):
            columns = _recorded_csv_columns(local_path, opts)
            if columns is not None:
                out.append(LoadedTable(name, None, columns.n_rows, len(columns.values), opts, columns=columns))
                continue
        df = _csv_reload(local_path, opts)
        out.append(LoadedTable(name, df, len(df), df.shape[1], opts))
    return out


def _xlsx_reload(local_path: str, read_options: dict[str, Any]) -> pd.DataFrame:
    return _xlsx_reload_all(local_path, [read_options], True)[0].df


def _xlsx_reload_all(local_path: str, read_options: list[dict[str, Any]], frames: bool) -> list[LoadedTable]:
    from python_calamine import CalamineWorkbook

    wb = CalamineWorkbook.from_path(local_path)
    out: list[LoadedTable] = []
    for opts in read_options:
        df = _sheet_frame(wb.get_sheet_by_name(opts["sheet"]), opts)[0]
        out.append(LoadedTable(opts["sheet"], df, len(df), df.shape[1], opts))
    return out


def _sqlite_reload(local_path: str, read_options: dict[str, Any]) -> pd.DataFrame:
    with closing(_connect_ro(local_path)) as con:
        return pd.read_sql_query(f"SELECT * FROM {_qident(read_options['table'])}", con)


def _sqlite_reload_all(local_path: str, read_options: list[dict[str, Any]], frames: bool) -> list[LoadedTable]:
    out: list[LoadedTable] = []
    with closing(_connect_ro(local_path)) as con:
        for opts in read_options:
            name = opts["table"]
            q = _qident(name)
            ddl = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
            fks = [
                {"from_table": name, "from_column": r[3], "to_table": r[2], "to_column": r[4]}
                for r in con.execute(f"PRAGMA foreign_key_list({q})")
            ]
            df = pd.read_sql_query(f"SELECT * FROM {q}", con)
            out.append(
                LoadedTable(
                    name,
                    df,
                    len(df),
                    df.shape[1],
                    opts,
                    ddl=ddl[0] if ddl else None,
                    foreign_keys=fks,
                    primary_key=_primary_key(con, q),
                )
            )
    return out


@dataclass(frozen=True)
class Format:
    """One table format, in one entry: ``sniff.detect_format`` names it from a file's bytes, ``load`` detects
    and loads its tables at ingestion (path, bytes, limits, file stem -> ``LoadResult`` with each table's
    ``read_options``), ``reload`` replays one table from those options and ``reload_all`` several tables of one
    file (what profiling and later stages read; ``frames=False`` may return columns instead of a frame)."""

    name: str
    load: Callable[[str, bytes, Limits, str], LoadResult]
    reload: Callable[[str, dict[str, Any]], pd.DataFrame]
    reload_all: Callable[[str, list[dict[str, Any]], bool], list[LoadedTable]]


# What load_tables turns into tables. A new format is a module beside these and one entry here.
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("csv", lambda path, data, limits, stem: _load_csv(data, limits, stem), _csv_reload, _csv_reload_all),
        Format(
            "xlsx",
            lambda path, data, limits, stem: _load_workbook(path, data, "xlsx", limits),
            _xlsx_reload,
            _xlsx_reload_all,
        ),
        Format(
            "sqlite",
            lambda path, data, limits, stem: _load_sqlite(path, limits),
            _sqlite_reload,
            _sqlite_reload_all,
        ),
    )
}
# Formats detection names that are refused, with why. Downstream stages (and the agents' sandboxes) handle
# csv, xlsx and SQLite only.
_REFUSED = {
    "xls": "legacy Excel 97-2003 (OLE2) workbook, or a password-protected xlsx: save it as xlsx",
    "zip": "a zip archive inside the source: point source_uri at the archive itself",
    "json": "content is a JSON document, not a table",
    "sql": "content is a SQL document, not a table",
}


def _format(name: str) -> Format:
    if name not in FORMATS:
        raise ValueError(f"unknown table format {name!r}")
    return FORMATS[name]


def _recorded_csv_columns(local_path: str, opts: dict[str, Any]) -> TableColumns | None:
    """A delimited table through Arrow's reader with its recorded ``column_types``; None (the caller takes
    the pandas route) if that fails, which ingestion's check makes a bug, never a lost table: it is logged."""
    try:
        return _arrow_csv_columns(_csv_file_bytes(local_path, opts), opts, opts["column_types"])
    except (pa.ArrowException, ValueError, TypeError, KeyError) as exc:
        log.warning(
            "table %r: its recorded column_types no longer parse with Arrow's reader (%s: %s); "
            "profiling it with pandas instead",
            opts.get("table", "data"),
            type(exc).__name__,
            str(exc)[:200],
        )
        return None
