"""The records every loader returns, and the helpers all formats share: column naming, tidying, the
table-as-columns view (``TableColumns``) profiling reads without a frame."""

from __future__ import annotations

import gzip
import io
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)


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
