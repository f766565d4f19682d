"""The same delimited tables through Arrow's CSV reader: profiling's route where ingestion checked that
the reader, told each column's type, gives exactly the frame pandas gave (``column_types``)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pcsv

from datamind.formats.common import _NAMES_DTYPE, TableColumns, _tidy_columns, column_names, frame_columns
from datamind.formats.text import _csv_body, _header_cells

log = logging.getLogger(__name__)


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
