"""Turn one file into tables, and record for each table the ``read_options`` that reload it identically.

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
counts come from ``COUNT(*)`` and a table above ``max_db_table_rows`` is never materialized. The ingest
stage also runs this module in a capped child process (``parse_worker.py``) for what these bounds miss.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import logging
import os
import re
import sqlite3
import zipfile
import zlib
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import quote

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from datamind.ingest import sniff
from datamind.settings import Limits

try:  # what DataFrame.map applies to each mapped column; _cells_frame does the same without a call per cell
    from pandas._libs.lib import maybe_convert_objects as _maybe_convert_objects
except ImportError:  # pragma: no cover - a pandas without it: DataFrame.map itself
    _maybe_convert_objects = None

log = logging.getLogger(__name__)

FORMATS = ("csv", "xlsx", "sqlite")  # what load_tables turns into tables
_SHEET_SLACK = 100  # rows of titles/footers tolerated above max_rows before a sheet counts as huge


class LoadError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class TableColumns(NamedTuple):
    """A table as the arrays a DataFrame of it holds (``column_values``), without building the frame."""

    names: list[str]
    values: list[Any]
    n_rows: int


def _primary_key(con, quoted_table: str) -> list[str]:
    """The declared primary key columns of a SQLite table, in key order."""
    cols = con.execute(f"PRAGMA table_info({quoted_table})").fetchall()
    return [r[1] for r in sorted((r for r in cols if r[5]), key=lambda r: r[5])]


@dataclass
class LoadedTable:
    name: str
    df: pd.DataFrame | None  # None when too large to materialize or unloadable (or held as ``columns``)
    n_rows: int
    n_cols: int
    read_options: dict[str, Any]
    raw_columns: list[str] = field(default_factory=list)  # header cells as written (before naming fixes)
    ddl: str | None = None
    foreign_keys: list[dict[str, str]] = field(default_factory=list)
    primary_key: list[str] = field(default_factory=list)  # declared primary key columns (SQLite)
    error: str | None = None  # table-level load failure
    rows_estimated: bool = False  # n_rows from sheet dimensions, not from a parse
    columns: TableColumns | None = None  # the table without a frame (``load_recorded(frames=False)``)

    def as_columns(self) -> TableColumns:
        return self.columns if self.columns is not None else frame_columns(self.df)


@dataclass
class LoadResult:
    format: str
    declared_format: str | None
    encoding: str | None
    tables: list[LoadedTable]
    error: str | None = None
    error_code: str | None = None


# -- entry points ------------------------------------------------------------------------------
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
        if fmt == "csv":
            result = _load_csv(data, limits, _stem(filename or local_path))
        elif fmt == "xlsx":
            result = _load_workbook(local_path, data, fmt, limits)
        elif fmt == "xls":
            # Downstream stages (and the agents' sandboxes) handle csv, xlsx and SQLite only.
            raise LoadError(
                "unsupported_format",
                "legacy Excel 97-2003 (OLE2) workbook, or a password-protected xlsx: save it as xlsx",
            )
        elif fmt == "sqlite":
            result = _load_sqlite(local_path, limits)
        elif fmt == "zip":
            raise LoadError(
                "unsupported_format", "a zip archive inside the source: point source_uri at the archive itself"
            )
        elif fmt in ("json", "sql"):
            raise LoadError("unsupported_format", f"content is a {fmt.upper()} document, not a table")
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
    fmt = read_options["format"]
    if fmt == "csv":
        data = _csv_file_bytes(local_path, read_options)
        fast = _read_csv_bytes(data, read_options)
        if fast is not None:
            return fast[0]
        return read_csv_text(decode_text(data, read_options["encoding"]), read_options)[0]
    if fmt == "xlsx":
        from python_calamine import CalamineWorkbook

        wb = CalamineWorkbook.from_path(local_path)
        return _sheet_frame(wb.get_sheet_by_name(read_options["sheet"]), read_options)[0]
    if fmt == "sqlite":
        with closing(_connect_ro(local_path)) as con:
            return pd.read_sql_query(f"SELECT * FROM {_qident(read_options['table'])}", con)
    raise ValueError(f"unknown table format {fmt!r}")


def _csv_file_bytes(local_path: str, read_options: dict[str, Any]) -> bytes:
    with open(local_path, "rb") as fh:
        data = fh.read()
    return gzip.decompress(data) if read_options.get("compression") == "gzip" else data


def load_recorded(local_path: str, read_options: list[dict[str, Any]], frames: bool = True) -> list[LoadedTable]:
    """Reload several tables of one file from their recorded options, reading the file once.

    No detection runs: this is what profiling and later stages use, so they see exactly the tables
    ingestion judged (SQLite tables also get their DDL and foreign keys back). ``frames=False``: a
    delimited table with recorded ``column_types`` comes back as ``columns`` (Arrow's reader, no frame)."""
    if not read_options:
        return []
    fmt = read_options[0]["format"]
    out: list[LoadedTable] = []
    if fmt == "csv":
        for opts in read_options:
            name = opts.get("table", "data")
            if not frames and opts.get("column_types"):
                columns = _recorded_csv_columns(local_path, opts)
                if columns is not None:
                    out.append(LoadedTable(name, None, columns.n_rows, len(columns.values), opts, columns=columns))
                    continue
            df = load_table(local_path, opts)
            out.append(LoadedTable(name, df, len(df), df.shape[1], opts))
    elif fmt == "xlsx":
        from python_calamine import CalamineWorkbook

        wb = CalamineWorkbook.from_path(local_path)
        for opts in read_options:
            df = _sheet_frame(wb.get_sheet_by_name(opts["sheet"]), opts)[0]
            out.append(LoadedTable(opts["sheet"], df, len(df), df.shape[1], opts))
    elif fmt == "sqlite":
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
    else:
        raise ValueError(f"unknown table format {fmt!r}")
    return out


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


# -- helpers shared by all formats -------------------------------------------------------------
def _gunzip(data: bytes, cap: int) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
        while chunk := gz.read(1 << 20):
            out.write(chunk)
            if out.tell() > cap:
                raise LoadError("archive_bomb", f"gzip content decompresses past the {cap:,}-byte cap")
    return out.getvalue()


# The dtype pandas infers for a list of names (its default string dtype, Arrow-backed where pyarrow is).
_NAMES_DTYPE = pd.Index(["name"]).dtype


def name_index(names: list[str]) -> pd.Index:
    """``pd.Index(names)``, built from an Arrow array where that is how pandas stores it: inferring the
    dtype and converting the list cost more than the rest of naming a small table's columns."""
    if names and getattr(_NAMES_DTYPE, "storage", None) == "pyarrow":
        return pd.Index(pd.arrays.ArrowStringArray(pa.array(names, pa.large_string()), dtype=_NAMES_DTYPE))
    return pd.Index(names)


def column_names(raw: list[str]) -> list[str]:
    """Unique, non-empty names: empty -> ``Unnamed: i`` and repeats -> ``name.1`` (pandas' conventions)."""
    out: list[str] = []
    seen: Counter[str] = Counter()
    for i, name in enumerate(raw):
        name = name.strip() or f"Unnamed: {i}"
        base = name
        while name in seen:
            name = f"{base}.{seen[base]}"
            seen[base] += 1
        seen[name] += 1
        out.append(name)
    return out


def column_values(df: pd.DataFrame, j: int):
    """The j-th column's array without building a Series (pandas makes that cost ~50us per column,
    which dominates the profile of a small table); falls back to the public route."""
    try:
        return df._get_column_array(j)
    except AttributeError:  # pragma: no cover - older/newer pandas without the helper
        return df.iloc[:, j].array


def frame_columns(df: pd.DataFrame) -> TableColumns:
    """The frame's names as text and its columns' arrays."""
    return TableColumns(index_names(df.columns), [column_values(df, j) for j in range(df.shape[1])], len(df))


def index_names(columns: pd.Index) -> list[str]:
    """Column names as text. An index of pandas strings is listed through Arrow: iterating it boxes each
    name separately, which costs more than the rest of a small table's bookkeeping."""
    if isinstance(columns.dtype, pd.StringDtype):
        names = pa.array(columns.array).to_pylist()
        if None not in names:
            return names
    return [str(c) for c in columns]


def arrow_kernel(name: str, options: pc.FunctionOptions | None = None):
    """A compute function bound to fixed options and called directly. ``pyarrow.compute``'s wrappers build
    an options object and check their arguments on every call, which costs as much as the kernel itself
    on columns of a few hundred values (profiling makes several such calls per column)."""
    fn = pc.get_function(name)
    return lambda *args: fn.call(args, options)


_TRIM = arrow_kernel("utf8_trim_whitespace")
_EQUAL = arrow_kernel("equal")
_IF_ELSE = arrow_kernel("if_else")


def _strip_text(values):
    """Stripped text column (empty -> missing), or None when nothing needs stripping."""
    if isinstance(values, np.ndarray):
        if values.dtype != object:
            return None
        if not any(isinstance(v, str) and (v[:1].isspace() or v[-1:].isspace() or not v) for v in values):
            return None
        return np.array([(v.strip() or None) if isinstance(v, str) else v for v in values], dtype=object)
    if not isinstance(values.dtype, pd.StringDtype):
        return None
    arr = pa.array(values)
    trimmed = _TRIM(arr)  # one pass in C++: cheaper than looking at each cell's edges from Python
    # pandas already turns empty cells into missing values, so unchanged lengths mean nothing to do.
    if _text_bytes(arr) == _text_bytes(trimmed):
        return None
    cleaned = _IF_ELSE(_EQUAL(trimmed, pa.scalar("", trimmed.type)), pa.scalar(None, trimmed.type), trimmed)
    if isinstance(values, pd.arrays.ArrowStringArray):  # the same array pd.array builds, without its checks
        return pd.arrays.ArrowStringArray(cleaned, dtype=values.dtype)
    return pd.array(cleaned, dtype=values.dtype)


def _text_bytes(arr) -> int:
    """Bytes between a string array's first and last offsets (no pass over the data). A null's slot is
    counted too: where it holds text the answer is only too large, and callers compare it with the text
    of the same cells trimmed, in which nulls hold nothing, so a slot can only make them see a change."""
    width = 8 if pa.types.is_large_string(arr.type) else 4 if pa.types.is_string(arr.type) else 0
    if isinstance(arr, pa.Array) and width and len(arr):
        starts = np.frombuffer(arr.buffers()[1], f"<i{width}", 1, arr.offset * width)
        ends = np.frombuffer(arr.buffers()[1], f"<i{width}", 1, (arr.offset + len(arr)) * width)
        return int(ends[0]) - int(starts[0])
    return pc.sum(pc.binary_length(arr)).as_py() or 0


class _Tidying(NamedTuple):
    keep: list[int] | None  # the columns kept, when some empty unnamed ones go
    values: list[Any]  # the kept columns' arrays, text stripped
    stripped: list[int]  # the (kept) columns whose text was stripped
    drop_rows: bool  # whether the rows missing every value go
    raw: list[str]  # the kept raw names

    def decisions(self) -> dict[str, Any]:
        return {"strip_columns": self.stripped, "drop_empty_rows": self.drop_rows}


def _tidying(
    values: list[Any], raw: list[str], n_rows: int, drop_empty_rows=True, recorded: dict[str, Any] | None = None
) -> _Tidying:
    """What tidying a table's columns (``column_values`` arrays) does: drop empty unnamed columns, strip
    text, and whether to drop empty rows. ``drop_empty_rows`` may be a callable deciding it, asked only
    when the table can hold an empty row. ``recorded``: the options of an earlier load of the same table;
    what they hold is done, not decided (only the recorded columns are stripped; empty rows are dropped
    as recorded)."""
    recorded = recorded or {}
    keep = None
    if any(not r.strip() for r in raw):
        kept = [j for j, r in enumerate(raw) if r.strip() or pd.notna(values[j]).any()]
        if len(kept) < len(values):
            keep, raw = kept, [raw[j] for j in kept]
            values = [values[j] for j in kept]
    values = list(values)
    stripped = []
    strip = recorded.get("strip_columns")
    for j in range(len(values)) if strip is None else sorted(strip):
        cleaned = _strip_text(values[j])
        if cleaned is not None:
            values[j] = cleaned
            stripped.append(j)
    drop = recorded.get("drop_empty_rows", drop_empty_rows)
    if callable(drop):
        # Dropping is a no-op when some column is never missing, so the (costly) decision can be skipped.
        drop = not _some_column_complete(values, n_rows) and drop()
    return _Tidying(keep, values, stripped, bool(drop), raw)


def _tidy(
    df: pd.DataFrame, raw: list[str], drop_empty_rows=True, recorded: dict[str, Any] | None = None
) -> tuple[pd.DataFrame, list[str], dict[str, Any]]:
    """``_tidying`` applied to a frame: the frame, the kept raw names and what was decided, as the
    ``read_options`` that let a reload skip deciding it again: ``strip_columns`` (the positions of the
    columns whose text was stripped) and ``drop_empty_rows``."""
    done = _tidying([column_values(df, j) for j in range(df.shape[1])], raw, len(df), drop_empty_rows, recorded)
    if done.keep is not None:
        df = df.take(done.keep, axis=1)
    # the frame is this function's own (pandas copies on write where it shares data)
    for j in done.stripped:
        df.isetitem(j, done.values[j])
    if done.drop_rows:
        df = df.dropna(how="all").reset_index(drop=True)
    return df, done.raw, done.decisions()


def _tidy_columns(table: TableColumns, raw: list[str], recorded: dict[str, Any]) -> TableColumns:
    """``_tidy`` of a table held as columns, replaying the recorded decisions: the columns a frame would
    hold after ``_tidy``."""
    done = _tidying(table.values, raw, table.n_rows, recorded=recorded)
    names = table.names if done.keep is None else [table.names[j] for j in done.keep]
    values, n_rows = done.values, table.n_rows
    if done.drop_rows and values:
        filled = ~np.logical_and.reduce([np.asarray(pd.isna(v)) for v in values])
        if not filled.all():
            values, n_rows = [v[filled] for v in values], int(filled.sum())
    return TableColumns(names, values, n_rows)


def _some_column_complete(values: list[Any], n_rows: int) -> bool:
    """Whether some column has no missing value (then no row is entirely missing); cheap checks first."""
    if n_rows == 0:
        return True
    if any(isinstance(a, np.ndarray) and a.dtype.kind in "iub" for a in values):  # stops at the first
        return True
    for a in values:
        if isinstance(a, np.ndarray):
            if a.dtype.kind == "f" and not np.isnan(a).any():
                return True
        elif not a.isna().any():
            return True
    return False


# -- delimited text ----------------------------------------------------------------------------
def decode_text(data: bytes, encoding: str) -> str:
    """Decoded text with every line ending turned into ``\n`` (old Mac files end lines with a bare CR)."""
    text = data.decode(encoding)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _stem(path: str) -> str:
    """A delimited file's one table is named after the file (``sales.csv.gz`` -> ``sales``)."""
    name = os.path.basename(path)
    for _ in range(2):
        stem, dot, ext = name.rpartition(".")
        if dot and stem and ext.lower() in ("csv", "tsv", "txt", "tab", "psv", "gz", "xlsx", "xls", "dat"):
            name = stem
    return name or "data"


def _load_csv(data: bytes, limits: Limits, name: str = "data") -> LoadResult:
    _check_first_line_width(data, limits)
    encoding = sniff.detect_encoding(data)
    text = decode_text(data, encoding)
    dialect = sniff.sniff_dialect(text)
    if not dialect.tabular:
        raise LoadError(
            "not_tabular",
            f"text without a consistent delimiter: best split gives {dialect.fields} field(s) on "
            f"{dialect.consistency:.0%} of lines (needs >= 2 fields on {sniff.MIN_CONSISTENCY:.0%})",
        )
    head_rows = sniff.parse_rows(sniff.sample_lines(text, 25, 50_000), dialect.delimiter, dialect.quotechar)
    spec = sniff.detect_header(head_rows)
    options: dict[str, Any] = {
        "format": "csv",
        "table": name,
        "encoding": encoding,
        "sep": dialect.delimiter,
        "quotechar": dialect.quotechar,
        "decimal": dialect.decimal,
        "thousands": dialect.thousands,
        "header_start": spec.start,
        "header_rows": spec.n_rows,
        "repair_rows": False,
    }
    try:
        df, raw, tidied = read_csv_text(text, options)
    except _NeedsRepair:
        options["repair_rows"] = True
        df, raw, tidied = read_csv_text(text, options)
    types = tidied.pop("column_types")
    options.update(tidied)
    # A table past the row limit is rejected, never profiled: no second parse for it.
    if (
        None not in types
        and len(df) <= limits.max_rows
        and (verified := _verified_column_types(data, options, types, df))
    ):
        options["column_types"] = verified
    table = LoadedTable(name, df, len(df), df.shape[1], options, raw_columns=raw)
    return LoadResult("csv", None, encoding, [table])


_QUOTED = re.compile(rb'"[^"]*"')
_FIRST_LINE_SCAN = 1 << 23


def _check_first_line_width(data: bytes, limits: Limits) -> None:
    """Refuse a file whose first line alone has more fields than allowed, before decoding or parsing it
    (a few MB of delimiters would otherwise cost gigabytes of parser state)."""
    head = data[:_FIRST_LINE_SCAN]
    ends = [i for i in (head.find(b"\n"), head.find(b"\r")) if i >= 0]  # old Mac exports end lines with CR
    end = min(ends) if ends else -1
    line = head[:end] if end >= 0 else head
    if len(line) <= limits.max_cols:
        return  # cannot hold more than max_cols delimiters
    line = _QUOTED.sub(b"", line) if b'"' in line else line
    counts = {sep: line.count(sep.encode()) for sep in (",", ";", "\t", "|")}
    sep, n = max(counts.items(), key=lambda kv: kv[1])
    if n + 1 > limits.max_cols:
        raise LoadError(
            "too_many_columns",
            f"the first line alone has {'at least ' if end < 0 else ''}{n + 1:,} fields separated by {sep!r}, "
            f"more than the {limits.max_cols:,} allowed (refused before parsing)",
        )


class _NeedsRepair(Exception):
    pass


def _skip_records(text: str, n: int, delimiter: str, quotechar: str) -> tuple[list[list[str]], str]:
    """First ``n`` csv records and the text after them (quote-aware, so multi-line cells are fine)."""
    if n == 0:
        return [], text
    lines = io.StringIO(text)
    reader = csv.reader(lines, delimiter=delimiter, quotechar=quotechar)
    records = []
    for _ in range(n):
        try:
            records.append(next(reader))
        except StopIteration:
            break
    consumed = reader.line_num
    pos = 0
    for _ in range(consumed):
        nl = text.find("\n", pos)
        if nl < 0:
            return records, ""
        pos = nl + 1
    return records, text[pos:]


def read_csv_text(text: str, opts: dict[str, Any]) -> tuple[pd.DataFrame, list[str], dict[str, Any]]:
    sep, quote_ = opts["sep"], opts.get("quotechar", '"')
    start, n_header = int(opts.get("header_start", 0)), int(opts.get("header_rows", 1))
    header_records, body = _skip_records(text, start + n_header, sep, quote_)
    header_records = header_records[start:]
    if opts.get("repair_rows"):
        body = _repair_body(body, header_records, opts)
    # Only a line made of delimiters and blanks can become an all-missing row; skip the costly check otherwise.
    empty_line = re.compile(rf"\n[{re.escape(sep)} \t\"]*\n")  # a literal first char keeps the scan fast
    return _frame(
        io.StringIO(body), header_records, opts, lambda: bool(empty_line.search("\n" + body.rstrip("\n") + "\n"))
    )


def _frame(
    source, header_records: list[list[str]], opts: dict[str, Any], has_blank_line, encoding: str | None = None
) -> tuple[pd.DataFrame, list[str], dict[str, Any]]:
    """Parse the body (text or bytes handle) under the already-split header records."""
    sep, quote_ = opts["sep"], opts.get("quotechar", '"')
    n_header = int(opts.get("header_rows", 1))
    kwargs = dict(
        sep=sep,
        quotechar=quote_,
        decimal=opts.get("decimal", "."),
        thousands=opts.get("thousands"),
        header=None,
        skip_blank_lines=True,
        low_memory=False,
    )
    if encoding:
        kwargs["encoding"] = encoding
    try:
        df = pd.read_csv(source, **kwargs)
    except pd.errors.EmptyDataError:
        df = pd.DataFrame()
    except pd.errors.ParserError as exc:
        if opts.get("repair_rows"):
            raise
        raise _NeedsRepair() from exc
    ncols = df.shape[1]
    raw = _header_cells(header_records, ncols, n_header)
    if n_header and not opts.get("repair_rows"):
        hdr_width = max((len(r) for r in header_records), default=0)
        if ncols > hdr_width or _misaligned_tail(df, raw):
            raise _NeedsRepair()
    df.columns = name_index(column_names(raw))
    # The parsed columns' types: what ingestion records if Arrow's reader reproduces the table with them.
    parsed = [_column_type(column_values(df, j)) for j in range(ncols)]
    df, raw, decisions = _tidy(df, raw, lambda: bool(ncols and has_blank_line()), opts)
    return df, raw, {**decisions, "column_types": parsed}


def _header_cells(header_records: list[list[str]], ncols: int, n_header: int) -> list[str]:
    """Each parsed column's header text as written (the header records combined; blank without a header)."""
    return sniff.combine_header(header_records, ncols) if n_header else [""] * ncols


_BOM = b"\xef\xbb\xbf"


def _read_csv_bytes(data: bytes, opts: dict[str, Any]) -> tuple[pd.DataFrame, list[str], dict[str, Any]] | None:
    """``read_csv_text`` without decoding the whole file to text first, or None where that could differ.

    For UTF-8 (and pure ASCII) files without repaired rows, the bytes pandas parses are exactly
    the bytes ``read_csv_text`` would re-encode from the decoded text, so the frame is the same; only the
    header records are decoded here. Saves a decode, a copy of the text and pandas' re-encoding."""
    body = _csv_body(data, opts)
    if body is None:
        return None
    data, header_records, pos = body
    handle = io.BytesIO(data)
    handle.seek(pos)
    return _frame(handle, header_records, opts, lambda: _has_blank_line(data, pos, opts["sep"]), "utf-8")


def _csv_body(data: bytes, opts: dict[str, Any]) -> tuple[bytes, list[list[str]], int] | None:
    """(the file's bytes with LF line ends, its header records, where the body starts) for a file whose body
    parses as bytes exactly as the text route parses it (``_read_csv_bytes``), else None."""
    enc = opts.get("encoding")
    sep, quote_ = opts["sep"], opts.get("quotechar", '"')
    if opts.get("repair_rows") or not (enc in ("utf-8", "utf-8-sig") or (enc == "ascii" and data.isascii())):
        return None
    if len(sep) != 1 or not sep.isascii():
        return None
    if b"\r" in data:  # as decode_text does; a CR byte is never part of a multi-byte UTF-8 character
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    pos = len(_BOM) if enc == "utf-8-sig" and data.startswith(_BOM) else 0
    start, n_header = int(opts.get("header_start", 0)), int(opts.get("header_rows", 1))
    header_records, pos = _skip_byte_records(data, pos, start + n_header, sep, quote_)
    if data.startswith(_BOM, pos):  # pandas would drop a BOM the text route keeps as a character
        return None
    return data, header_records[start:], pos


# -- the same tables through Arrow's CSV reader ------------------------------------------------
# Profiling needs a table's columns, not a DataFrame: Arrow's reader, told each column's type, parses a
# file in about half the time pandas' parser takes and hands the columns over without a frame (building
# one costs about a fifth of a parse on small tables). Ingestion records those types (``column_types``)
# only for a table the route reproduces exactly, checked against the frame pandas parsed; a reload for
# profiling then takes it (``load_recorded(frames=False)``).
try:
    from pandas._libs.parsers import STR_NA_VALUES as _PANDAS_NA  # the cells pandas' parser reads as missing
except ImportError:  # pragma: no cover - a pandas that moved it: every table keeps the pandas route
    _PANDAS_NA = None

# pandas' names for the dtypes the reader can be told to produce, and the Arrow types that give them.
_ARROW_CSV_TYPES = {
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "str": pa.large_string(),
}


def _column_type(values) -> str | None:
    """The ``_ARROW_CSV_TYPES`` name of a parsed column's dtype, None where the reader has none."""
    if isinstance(values, np.ndarray):
        name = values.dtype.name
    elif isinstance(values, pd.arrays.ArrowStringArray) and values.dtype == _NAMES_DTYPE:
        name = "str"
    else:
        return None
    return name if name in _ARROW_CSV_TYPES else None


def _arrow_csv_columns(data: bytes, opts: dict[str, Any], types: list[str]) -> TableColumns | None:
    """The table ``read_csv_text`` gives under ``opts`` (tidied as they record), parsed by Arrow with each
    column's ``types``, as columns; None where the route does not apply."""
    if _PANDAS_NA is None or opts.get("thousands") or "drop_empty_rows" not in opts:
        return None
    body = _csv_body(data, opts)
    if body is None:
        return None
    data, header_records, pos = body
    fields = [f"f{j}" for j in range(len(types))]
    quote_ = opts.get("quotechar", '"')
    table = pcsv.read_csv(
        pa.BufferReader(pa.py_buffer(memoryview(data)[pos:])),
        read_options=pcsv.ReadOptions(
            use_threads=False, column_names=fields, block_size=min(max(len(data) - pos, 1 << 16) + 1, 1 << 30)
        ),
        parse_options=pcsv.ParseOptions(
            delimiter=opts["sep"],
            quote_char=quote_ or False,
            # only a quoted cell can hold a line break; without quotes the reader is spared that search
            newlines_in_values=bool(quote_) and data.find(quote_.encode(), pos) >= 0,
            ignore_empty_lines=True,
        ),
        convert_options=pcsv.ConvertOptions(
            column_types={f: _ARROW_CSV_TYPES[t] for f, t in zip(fields, types, strict=True)},
            null_values=sorted(_PANDAS_NA),
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            true_values=["True", "TRUE", "true"],
            false_values=["False", "FALSE", "false"],
            decimal_point=opts.get("decimal") or ".",
            check_utf8=False,  # _csv_body admits only text that decoded as UTF-8 (or ASCII) at ingestion
        ),
    )
    values = [_held(table.column(j), t) for j, t in enumerate(types)]
    raw = _header_cells(header_records, len(types), int(opts.get("header_rows", 1)))
    return _tidy_columns(TableColumns(column_names(raw), values, table.num_rows), raw, opts)


def _held(column: pa.ChunkedArray, type_name: str):
    """A column of the reader's table as a DataFrame of it holds it."""
    arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if type_name == "str":
        return pd.arrays.ArrowStringArray(arr, dtype=_NAMES_DTYPE)
    return arr.to_numpy(zero_copy_only=False)


def _verified_column_types(data: bytes, opts: dict[str, Any], types: list[str], df: pd.DataFrame) -> list[str] | None:
    """``types`` (those of the parsed columns, before tidying) when Arrow's reader given them reproduces
    ``df`` exactly (names, dtypes, values, missing cells), else None: the ``column_types`` to record."""
    try:
        columns = _arrow_csv_columns(data, opts, types)
    except (pa.ArrowException, ValueError, TypeError):
        return None
    return types if columns is not None and _same_columns(columns, frame_columns(df)) else None


def _same_columns(a: TableColumns, b: TableColumns) -> bool:
    """Whether two tables hold the same names and columns: array types, dtypes, values, missing cells and
    the signs of zeros."""
    if a.names != b.names or a.n_rows != b.n_rows or len(a.values) != len(b.values):
        return False
    for x, y in zip(a.values, b.values, strict=True):
        if type(x) is not type(y) or x.dtype != y.dtype:
            return False
        if isinstance(x, np.ndarray):
            if x.dtype.kind == "f":
                if not (np.array_equal(x, y, equal_nan=True) and np.array_equal(np.signbit(x), np.signbit(y))):
                    return False
            elif x.dtype.kind not in "iub" or not np.array_equal(x, y):
                return False
        elif not _arrow_of(x).equals(_arrow_of(y)):
            return False
    return True


def _arrow_of(values) -> pa.Array:
    arr = pa.array(values)
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _skip_byte_records(data: bytes, pos: int, n: int, sep: str, quote_: str) -> tuple[list[list[str]], int]:
    """``_skip_records`` on bytes: the first ``n`` records from ``pos`` and the offset of the line after them."""
    if n == 0:
        return [], pos

    def lines():
        at = pos
        while at < len(data):
            nl = data.find(b"\n", at)
            end = len(data) if nl < 0 else nl + 1
            yield data[at:end].decode("utf-8")
            at = end

    reader = csv.reader(lines(), delimiter=sep, quotechar=quote_)
    records = []
    for _ in range(n):
        try:
            records.append(next(reader))
        except StopIteration:
            break
    for _ in range(reader.line_num):
        nl = data.find(b"\n", pos)
        if nl < 0:
            return records, len(data)
        pos = nl + 1
    return records, pos


def _has_blank_line(data: bytes, pos: int, sep: str) -> bool:
    """The text route's test, ``\\n[sep blanks quotes]*\\n`` in "\\n" + body.rstrip("\\n") + "\\n", on the bytes
    in place (no copies): whether a line of ``data[pos:end]`` is made only of those characters."""
    end = len(data)
    while end > pos and data[end - 1] == 0x0A:
        end -= 1
    cls = re.escape(sep).encode() + b' \t"'
    only = re.compile(b"[" + cls + b"]*")
    first = data.find(b"\n", pos, end)
    if first < 0:
        return only.fullmatch(data, pos, end) is not None
    last = data.rfind(b"\n", pos, end)
    return (
        only.fullmatch(data, pos, first) is not None
        or only.fullmatch(data, last + 1, end) is not None
        or re.compile(b"\n[" + cls + b"]*\n").search(data, pos, end) is not None
    )


def _misaligned_tail(df: pd.DataFrame, raw: list[str]) -> bool:
    """A trailing unnamed column that is empty on most rows but not all: some rows hold an extra field."""
    if not raw or raw[-1].strip() or df.shape[1] < 2 or len(df) == 0:
        return False
    filled = int(df.iloc[:, -1].notna().sum())
    return 0 < filled <= max(1, len(df) // 10)


def _repair_body(body: str, header_records: list[list[str]], opts: dict[str, Any]) -> str:
    sep, quote_ = opts["sep"], opts.get("quotechar", '"')
    rows = [r for r in csv.reader(io.StringIO(body), delimiter=sep, quotechar=quote_) if r]
    if header_records:
        width = max(len(r) for r in header_records)
        last_empty = all(not (r[-1].strip() if len(r) == width else "") for r in header_records)
    else:
        width = Counter(len(r) for r in rows).most_common(1)[0][0] if rows else 0
        last_empty = False
    if last_empty and width > 1:
        # A trailing delimiter on every line: the empty last field is not data.
        width -= 1
        rows = [r[:-1] if len(r) > width and not r[-1].strip() else r for r in rows]
    good = [r for r in rows if len(r) == width]
    numeric = [
        sum(sniff.cell_kind(r[j]) == "num" for r in good) > 0.5 * max(1, sum(bool(r[j].strip()) for r in good))
        for j in range(width)
    ]
    fixed = []
    for r in rows:
        if len(r) > width:
            r = _merge_extra(r, width, numeric, sep)
        elif len(r) < width:
            r = r + [""] * (width - len(r))
        fixed.append(r)
    out = io.StringIO()
    csv.writer(out, delimiter=sep, quotechar=quote_, lineterminator="\n").writerows(fixed)
    return out.getvalue()


def _merge_extra(row: list[str], width: int, numeric: list[bool], sep: str) -> list[str]:
    extra = len(row) - width
    best, best_score = None, -1
    for j in range(width):
        cand = row[:j] + [sep.join(row[j : j + extra + 1])] + row[j + extra + 1 :]
        score = sum((sniff.cell_kind(v) == "num") == numeric[k] or not v.strip() for k, v in enumerate(cand))
        if score > best_score:
            best, best_score = cand, score
    return best or row[:width]


# -- workbooks ---------------------------------------------------------------------------------
_DTD = re.compile(rb"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)


def _check_zip_members(data: bytes, limits: Limits) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            total = sum(i.file_size for i in zf.infolist())
            for info in zf.infolist():
                # A DTD comes before the root element: the head of each part is enough to find one.
                if info.filename.endswith((".xml", ".rels")) and _DTD.search(_zip_head(zf, info)):
                    raise LoadError(
                        "unsafe_xml",
                        f"workbook part {info.filename} declares a DTD or XML entities (<!ENTITY ...>), the shape of "
                        "an entity-expansion ('billion laughs') bomb; spreadsheet parts never declare one",
                    )
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise LoadError("unloadable", f"a damaged or truncated xlsx (zip) container: {exc}") from exc
    if total > limits.max_uncompressed_bytes:
        raise LoadError(
            "archive_bomb",
            f"xlsx parts decompress to {total:,} bytes, above the {limits.max_uncompressed_bytes:,}-byte cap",
        )


def _zip_head(zf: zipfile.ZipFile, info: zipfile.ZipInfo, n: int = 1 << 16) -> bytes:
    with zf.open(info) as fh:
        return fh.read(n)


def _load_workbook(local_path: str, data: bytes, fmt: str, limits: Limits) -> LoadResult:
    from python_calamine import CalamineWorkbook

    if fmt == "xlsx":
        _check_zip_members(data, limits)
    try:
        wb = CalamineWorkbook.from_filelike(io.BytesIO(data))
    except Exception as exc:
        raise LoadError("unloadable", f"workbook cannot be opened: {type(exc).__name__}: {exc}"[:500]) from exc
    dimensions = sniff.sheet_dimensions(data) if fmt == "xlsx" else {}
    tables = []
    for name in wb.sheet_names:
        declared = dimensions.get(name)
        if declared and _oversized_sheet(declared, limits):
            # The reader would allocate the whole declared rectangle (a 1.5 KB file can declare A1:XFD1048576).
            n_rows, n_cols, ref = declared
            opts = {"format": fmt, "sheet": name, "dimension": ref}
            tables.append(LoadedTable(name, None, n_rows, n_cols, opts, rows_estimated=True))
            continue
        try:
            sheet = wb.get_sheet_by_name(name)
        except Exception as exc:
            tables.append(LoadedTable(name, None, 0, 0, {"format": fmt, "sheet": name}, error=str(exc)[:300]))
            continue
        opts: dict[str, Any] = {"format": fmt, "sheet": name}
        if sheet.height > limits.max_rows + _SHEET_SLACK:
            tables.append(_huge_sheet(sheet, opts))
            continue
        try:
            df, raw, opts = _sheet_frame(sheet, opts)
        except Exception as exc:
            tables.append(LoadedTable(name, None, 0, 0, opts, error=f"{type(exc).__name__}: {exc}"[:300]))
            continue
        tables.append(LoadedTable(name, df, len(df), df.shape[1], opts, raw_columns=raw))
    # xlsx parts are XML in UTF-8; legacy xls text encoding is per workbook and not exposed by the reader.
    return LoadResult(fmt, None, "utf-8" if fmt == "xlsx" else None, tables)


_MAX_SHEET_CELLS = 20_000_000  # a dense rectangle the reader may allocate (about 0.6 GB of cells)


def _oversized_sheet(declared: tuple[int, int, str], limits: Limits) -> bool:
    n_rows, n_cols, _ = declared
    return n_cols > limits.max_cols or n_rows * max(n_cols, 1) > _MAX_SHEET_CELLS


def _huge_sheet(sheet, opts: dict[str, Any]) -> LoadedTable:
    """Row count from the sheet's dimensions; only the top rows are read, to find the header."""
    top = [list(r) for r in sheet.to_python(skip_empty_area=False, nrows=60)]
    spec = _sheet_header(top, _fill_merged(top, getattr(sheet, "merged_cell_ranges", None)))
    ncols = max((len(r) for r in top), default=0)
    raw = sniff.combine_header(top[spec.start : spec.start + spec.n_rows], ncols)
    opts.update(header_start=spec.start, header_rows=spec.n_rows)
    n_rows = max(0, sheet.height - spec.start - spec.n_rows)
    return LoadedTable(opts["sheet"], None, n_rows, ncols, opts, raw_columns=raw, rows_estimated=True)


def _sheet_header(rows: list[list[Any]], grouped: list[tuple[int, int]]) -> sniff.HeaderSpec:
    """Header detection for a sheet; a merge that starts on the header row and runs down extends it."""
    spec = sniff.detect_header(rows, multi_row=bool(grouped))
    if spec.n_rows:
        down = [r1 for r0, r1 in grouped if r0 == spec.start and r1 > r0]
        if down:
            return sniff.HeaderSpec(spec.start, max(spec.n_rows, min(max(down) - spec.start + 1, 3)))
    return spec


def _fill_merged(rows: list[list[Any]], ranges) -> list[tuple[int, int]]:
    """Give every cell of a merged range its value, except banners (titles, notes) spanning the whole
    width; returns the (first row, last row) of the other merges (grouped headers)."""
    width = max((len(r) for r in rows), default=0)
    grouped = []
    for (r0, c0), (r1, c1) in ranges or []:
        if r0 >= len(rows) or (r0 == r1 and c0 == 0 and c1 >= width - 1):
            continue
        grouped.append((r0, r1))
        value = rows[r0][c0] if c0 < len(rows[r0]) else ""
        for r in range(r0, min(r1, len(rows) - 1) + 1):
            row = rows[r]
            if len(row) <= c1:
                row.extend([""] * (c1 + 1 - len(row)))
            for c in range(c0, c1 + 1):
                if sniff.cell_kind(row[c]) == "empty":
                    row[c] = value
    return grouped


def _sheet_frame(sheet, opts: dict[str, Any]) -> tuple[pd.DataFrame, list[str], dict[str, Any]]:
    rows = [list(r) for r in sheet.to_python(skip_empty_area=False)]
    grouped = _fill_merged(rows, getattr(sheet, "merged_cell_ranges", None))
    if "header_start" not in opts:
        spec = _sheet_header(rows, grouped)
        opts = {**opts, "header_start": spec.start, "header_rows": spec.n_rows, "trim_footer": True}
    start, n = int(opts["header_start"]), int(opts["header_rows"])
    ncols = max((len(r) for r in rows), default=0)
    raw = sniff.combine_header(rows[start : start + n], ncols)
    body = [r + [""] * (ncols - len(r)) for r in rows[start + n :]]
    body = [r for r in body if any(sniff.cell_kind(v) != "empty" for v in r)]
    if opts.get("trim_footer") and ncols >= 3:
        while body and sum(sniff.cell_kind(v) != "empty" for v in body[-1]) <= 1:
            body.pop()
    df = _cells_frame(body, ncols)
    df.columns = name_index(column_names(raw))
    df, raw, tidied = _tidy(df, raw, recorded=opts)
    opts = {**tidied, **opts}  # what this load decided, unless the options already said
    return _infer_sheet_types(df), raw, opts


def _cells_frame(body: list[list[Any]], ncols: int, per_cell: bool = False) -> pd.DataFrame:
    """The sheet's cells as columns, blank text as missing, each column converted as ``DataFrame.map`` does
    (numbers, booleans and text get their dtype, anything else stays object) -- column by column, without
    a Python call per cell (``per_cell``: through ``DataFrame.map`` itself, the route this one equals)."""
    if per_cell or not body or _maybe_convert_objects is None:
        df = pd.DataFrame(body, columns=range(ncols), dtype=object)
        return df.map(lambda v: None if isinstance(v, str) and not v.strip() else v)
    columns = {}
    for j, cells in enumerate(zip(*body, strict=True)):
        values = np.empty(len(cells), dtype=object)
        values[:] = [None if isinstance(v, str) and not v.strip() else v for v in cells]
        columns[j] = _maybe_convert_objects(values)
    return pd.DataFrame(columns, index=pd.RangeIndex(len(body)))


def _cell_kinds(s: pd.Series) -> set[type]:
    """The Python types of a column's present cells; read off the dtype where it settles them."""
    if isinstance(s.dtype, pd.StringDtype):  # (text columns come back as pandas' string dtype)
        return {str} if bool(s.notna().any()) else set()
    kind = s.dtype.kind if isinstance(s.dtype, np.dtype) else None
    if kind in ("f", "i", "b"):
        present = bool(s.notna().any()) if kind == "f" else len(s) > 0
        return {{"f": float, "i": int, "b": bool}[kind]} if present else set()
    return {type(v) for v in s.dropna()}


def _infer_sheet_types(df: pd.DataFrame) -> pd.DataFrame:
    """Sheet cells arrive as python objects; give homogeneous columns a proper dtype, leave mixed ones as object."""
    out = {}
    for c in df.columns:
        s = df[c]
        kinds = _cell_kinds(s)
        if not kinds:
            out[c] = s.astype("float64")
        elif kinds <= {float, int}:
            num = pd.to_numeric(s)
            if num.notna().all() and (num % 1 == 0).all():
                num = num.astype("int64")
            out[c] = num
        elif kinds <= {bool}:
            out[c] = s.astype("boolean")
        elif kinds <= {dt.date, dt.datetime}:
            out[c] = pd.to_datetime(s)
        elif kinds <= {str}:
            out[c] = s.astype("string")
        else:
            out[c] = s
    return pd.DataFrame(out, index=df.index)


# -- SQLite ------------------------------------------------------------------------------------
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
