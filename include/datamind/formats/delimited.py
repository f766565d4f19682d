"""Delimited text (CSV, TSV, ...) through pandas' parser: sniffed dialects and headers, title rows, and rows
repaired where an unquoted delimiter split a value."""

from __future__ import annotations

import csv
import io
import logging
import re
from collections import Counter
from typing import Any

import pandas as pd

from datamind.formats import sniff
from datamind.formats.arrow_csv import _column_type, _verified_column_types
from datamind.formats.common import (
    LoadedTable,
    LoadError,
    LoadResult,
    _tidy,
    column_names,
    column_values,
    name_index,
)
from datamind.formats.text import (
    _check_first_line_width,
    _csv_body,
    _has_blank_line,
    _header_cells,
    _skip_records,
    decode_text,
)
from datamind.settings import Limits

log = logging.getLogger(__name__)


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


class _NeedsRepair(Exception):
    pass


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
