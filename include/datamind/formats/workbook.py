"""Workbooks (XLSX, XLS, ODS): members and declared sheet sizes checked before any cell is read, headers
and merged cells, footnotes trimmed, column types as a sheet reader sees them."""

from __future__ import annotations

import datetime as dt
import io
import logging
import re
import zipfile
import zlib
from typing import Any

import numpy as np
import pandas as pd

from datamind.formats import sniff
from datamind.formats.common import LoadedTable, LoadError, LoadResult, _tidy, column_names, name_index
from datamind.settings import Limits

log = logging.getLogger(__name__)


try:  # what DataFrame.map applies to each mapped column; _cells_frame does the same without a call per cell
    from pandas._libs.lib import maybe_convert_objects as _maybe_convert_objects
except ImportError:  # pragma: no cover - a pandas without it: DataFrame.map itself
    _maybe_convert_objects = None


_SHEET_SLACK = 100  # rows of titles/footers tolerated above max_rows before a sheet counts as huge


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
