"""The acceptance filter (paper section 3.1, made explicit): named rules with stable reason codes.

A table is checked by the rules below in this order; the first that fires is its verdict. A file is
accepted when at least one of its tables passes; its ``table_verdicts`` list every table either way.

Table rules (``check_table``):

=====================  ===============================================================================
``unloadable``         the table could not be read (parser or SQLite error)
``too_many_columns``   more than ``limits.max_cols`` columns
``too_many_rows``      more than ``limits.max_rows`` data rows (default 1,000); for a table inside a
                       database, more than ``limits.max_db_table_rows`` (default 200,000)
``empty_table``        no data rows or no columns at all
``too_few_rows``       fewer than ``limits.min_rows`` data rows (default 20); not applied to tables
                       inside a database, where small lookup tables are normal (see database rules)
``duplicate_header``   two header cells carry the same name (compared trimmed and case-insensitively)
``unnamed_header``     no header row was found, or more than half of the columns have no name
``binary_blob``        a column holds binary data (bytes values, or text with NUL/control characters)
                       in more than half of its non-null cells
``absurd_width``       a column whose median cell is longer than ``limits.max_cell_chars`` characters
                       (documents or blobs stuffed into cells; a single long cell is fine)
``null_dominated``     more than half of the columns are entirely empty
``constant_dominated`` more than half of the columns are empty or hold a single distinct value
                       (judged only on tables with at least 2 rows)
``mixed_types``        more than half of the columns mix numbers and text: 20-80% of a text column's
                       non-null cells are numeric (typical of a mis-parsed or shifted file)
=====================  ===============================================================================

File rules (``check_file``), applied before/after the table rules:

=====================  ===============================================================================
``file_too_large``     the file is above ``limits.max_file_bytes`` and is never read
``unsafe_path``        a symlink in a source folder that points outside it (never followed), a link that
                       appeared on a file's path after listing (every file is opened once, with
                       O_NOFOLLOW on each part of its real path), or a zip member whose name is absolute
                       or climbs out with ``..`` (never extracted)
``source_changed``     the bytes read at ingestion hash differently from those planned: the catalog
                       keeps only what it staged; the next run plans the new content under its own id
``unreadable_entry``   a folder entry the listing cannot stat: a dangling or looping symlink (never read)
``not_a_regular_file`` a FIFO, socket or device named like a data file (never opened: reading one blocks)
``undecodable_name``   a file name that is not valid UTF-8 (recorded with its bytes escaped, never read)
``name_too_long``      a file name longer than ``sources.MAX_NAME_BYTES`` (its staged copy would not fit)
``duplicate_member``   a zip member with the name of an earlier one (the archive can give only one by name)
``sqlite_wal_pending`` a SQLite database whose ``-wal`` file beside it still holds committed rows: the
                       main file alone is not the database (checkpoint it at the source and ingest again);
                       sources are read as copies, never opened in place, so nothing is written beside them
``unsafe_xml``         a workbook part that declares a DTD or XML entities (``<!ENTITY``): OOXML never
                       does, and expanding them is the "billion laughs" bomb
``archive_bomb``       an archive member (zip, xlsx part, gzip) decompresses past
                       ``limits.max_uncompressed_bytes``, whatever its header declares
``unsupported_format`` the content is not delimited text, xlsx or SQLite (the extension is ignored): JSON
                       documents, SQL scripts, legacy xls, images, parquet, nested archives ...
``not_tabular``        text that no delimiter splits into a consistent number (>= 2) of fields on at
                       least 60% of its first lines (prose, licences, single-column lists)
``unloadable``         the file cannot be parsed at all (corrupt workbook, truncated zip container,
                       broken SQLite header, text with NUL bytes, ...)
``parse_limit``        parsing the file in its child process hit the per-file memory or CPU cap
                       (``limits.parse_memory_mb``, ``limits.parse_cpu_s``) or crashed the reader; the
                       reason names the signal and the reader's last words
``no_tables``          the file parsed but holds no table (empty file, workbook without sheets,
                       database without user tables)
``no_valid_tables``    every table was rejected, for different reasons (the same reason everywhere is
                       reported as that reason, e.g. ``too_many_rows``)
``duplicate_content``  the same bytes as a file earlier in the batch or already accepted (stage.py)
``benchmark_overlap``  the file's bytes, or one of its tables (same schema, >= 90% of rows, whatever the
                       row/column order, encoding or CSV/XLSX format), belong to a configured benchmark
                       (``DATAMIND_BENCHMARKS``; datamind.decontamination): the reason names the benchmark item
=====================  ===============================================================================

Database rules (SQLite): the table rules apply per table, except ``too_few_rows`` and with the database
row cap (``max_db_table_rows``) in place of ``max_rows``; the database is
accepted when at least one table passes and its passing tables hold at least ``limits.min_rows`` rows
together (else ``too_few_rows`` at database level).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from datamind.formats import LoadedTable, LoadResult
from datamind.settings import Limits

ACCEPTED = "accepted"
REJECTED = "rejected"

RULES: dict[str, str] = {
    "unloadable": "the file or table cannot be parsed",
    "too_many_columns": "more columns than allowed",
    "too_many_rows": "more rows than allowed",
    "empty_table": "no data rows or no columns",
    "too_few_rows": "fewer rows than required",
    "duplicate_header": "two columns share a name",
    "unnamed_header": "no header row, or most columns unnamed",
    "binary_blob": "a column holds binary data",
    "absurd_width": "a column holds document-sized cells",
    "null_dominated": "most columns are entirely empty",
    "constant_dominated": "most columns are empty or constant",
    "mixed_types": "most columns mix numbers and text",
    "file_too_large": "the file exceeds the size limit",
    "archive_bomb": "decompressed size exceeds the cap",
    "unsafe_path": "a symlink leaving the source folder, or an archive member named outside the archive",
    "unreadable_entry": "a dangling or looping symlink, or an entry the listing cannot stat",
    "not_a_regular_file": "a FIFO, socket or device (never opened)",
    "undecodable_name": "a file name that is not valid UTF-8",
    "name_too_long": "a file name too long to stage",
    "duplicate_member": "a second zip member with the same name",
    "source_changed": "the file's bytes changed between planning and ingestion",
    "sqlite_wal_pending": "a SQLite database with committed rows still in its write-ahead log",
    "unsafe_xml": "a workbook part declaring XML entities (an entity-expansion bomb)",
    "unsupported_format": "not delimited text, xlsx or SQLite",
    "not_tabular": "text without a consistent delimiter",
    "parse_limit": "parsing hit the per-file memory or CPU cap, or crashed the reader",
    "no_tables": "the file holds no table",
    "no_valid_tables": "every table was rejected",
    "duplicate_content": "same bytes as another file",
    "benchmark_overlap": "the file or one of its tables is a configured benchmark's (decontamination)",
}

_UNNAMED = re.compile(r"^(Unnamed: \d+)?$")
_NUMERIC = r"\s*[-+]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?%?\s*"
_CONTROL = r"[\x00-\x08\x0e-\x1f]"


@dataclass(frozen=True)
class Verdict:
    status: str
    reason_code: str | None = None
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.status == ACCEPTED

    @classmethod
    def reject(cls, code: str, reason: str) -> Verdict:
        assert code in RULES, code
        return cls(REJECTED, code, reason)


OK = Verdict(ACCEPTED)


def _is_text(s: pd.Series) -> bool:
    return s.dtype == object or isinstance(s.dtype, pd.StringDtype)


def _binary_share(s: pd.Series) -> float:
    vals = s.dropna()
    if vals.empty:
        return 0.0
    if s.dtype == object:
        n_bytes = sum(isinstance(v, (bytes, bytearray, memoryview)) for v in vals)
        if n_bytes:
            return n_bytes / len(vals)
        vals = vals[[isinstance(v, str) for v in vals]]
        if vals.empty:
            return 0.0
    return float(vals.astype("string").str.contains(_CONTROL, regex=True).mean())


def _numeric_share(s: pd.Series) -> float:
    vals = s.dropna()
    if s.dtype == object:
        vals = vals[[isinstance(v, str) for v in vals]]
    if vals.empty:
        return 0.0
    return float(vals.astype("string").str.fullmatch(_NUMERIC).mean())


def check_table(t: LoadedTable, limits: Limits, in_database: bool = False) -> Verdict:
    if t.error:
        return Verdict.reject("unloadable", f"cannot read table: {t.error}")
    declared = t.read_options.get("dimension")
    unread = f" (as the sheet declares, {declared}; not read)" if declared else ""
    if t.n_cols > limits.max_cols:
        return Verdict.reject(
            "too_many_columns", f"{t.n_cols:,} columns, more than the {limits.max_cols:,} allowed{unread}"
        )
    cap = limits.table_row_cap(in_database)
    if t.n_rows > cap:
        approx = "about " if t.rows_estimated else ""
        return Verdict.reject("too_many_rows", f"{approx}{t.n_rows:,} rows, more than the {cap:,} allowed{unread}")
    if t.n_rows == 0 or t.n_cols == 0:
        return Verdict.reject("empty_table", f"{t.n_rows} data rows and {t.n_cols} columns")
    if not in_database and t.n_rows < limits.min_rows:
        return Verdict.reject("too_few_rows", f"{t.n_rows} rows, fewer than the {limits.min_rows} required")
    raw = [" ".join(str(c).split()).casefold() for c in t.raw_columns]
    dups = sorted(name for name, n in Counter(r for r in raw if r).items() if n > 1)
    if dups:
        return Verdict.reject("duplicate_header", f"repeated column names: {', '.join(dups[:5])}")
    if t.read_options.get("header_rows") == 0:
        return Verdict.reject(
            "unnamed_header", "no header row: the first row holds data, column names would be invented"
        )
    df = t.df
    if df is None:
        return OK  # nothing further can be judged without materializing (never the case under max_rows)
    unnamed = sum(1 for c in df.columns if _UNNAMED.match(str(c)))
    if unnamed * 2 > df.shape[1]:
        return Verdict.reject("unnamed_header", f"{unnamed} of {df.shape[1]} columns have no name")
    text_cols = [c for c in df.columns if _is_text(df[c])]
    for c in text_cols:
        if _binary_share(df[c]) > 0.5:
            return Verdict.reject("binary_blob", f"column {c!r} holds binary data")
    for c in text_cols:
        lengths = df[c].dropna().map(lambda v: len(v) if isinstance(v, str) else 0)
        if len(lengths) and lengths.median() > limits.max_cell_chars:
            return Verdict.reject(
                "absurd_width",
                f"column {c!r} has a median cell of {int(lengths.median()):,} characters "
                f"(limit {limits.max_cell_chars:,})",
            )
    n_cols = df.shape[1]
    all_null = [c for c in df.columns if df[c].isna().all()]
    if len(all_null) * 2 > n_cols:
        return Verdict.reject("null_dominated", f"{len(all_null)} of {n_cols} columns are entirely empty")
    if len(df) >= 2:
        constant = [c for c in df.columns if c not in all_null and df[c].nunique(dropna=True) <= 1]
        if (len(constant) + len(all_null)) * 2 > n_cols:
            return Verdict.reject(
                "constant_dominated", f"{len(constant)} constant and {len(all_null)} empty columns out of {n_cols}"
            )
    mixed = [c for c in text_cols if 0.2 <= _numeric_share(df[c]) <= 0.8]
    if len(mixed) * 2 > n_cols:
        return Verdict.reject(
            "mixed_types", f"{len(mixed)} of {n_cols} columns mix numbers and text: {', '.join(map(str, mixed[:5]))}"
        )
    return OK


def check_tables(result: LoadResult, limits: Limits) -> list[Verdict]:
    in_db = result.format == "sqlite"
    return [check_table(t, limits, in_database=in_db) for t in result.tables]


def check_file(result: LoadResult, verdicts: list[Verdict], limits: Limits) -> Verdict:
    """The file's verdict from its load result and its tables' verdicts (see module docstring)."""
    if result.error_code:
        return Verdict.reject(result.error_code, result.error or RULES[result.error_code])
    if not result.tables:
        return Verdict.reject("no_tables", "the file parsed but holds no table")
    passed = [t for t, v in zip(result.tables, verdicts, strict=True) if v.accepted]
    if result.format == "sqlite" and passed:
        rows = sum(t.n_rows for t in passed)
        if rows < limits.min_rows:
            return Verdict.reject(
                "too_few_rows",
                f"the database's accepted tables hold {rows} rows, fewer than the {limits.min_rows} required",
            )
    if passed:
        return OK
    codes = Counter(v.reason_code for v in verdicts)
    if len(verdicts) == 1:
        return verdicts[0]
    if len(codes) == 1:
        code = next(iter(codes))
        return Verdict.reject(code, f"all {len(verdicts)} tables rejected ({code}); first: {verdicts[0].reason}")
    summary = ", ".join(f"{code} x{n}" for code, n in sorted(codes.items()))
    return Verdict.reject("no_valid_tables", f"all {len(verdicts)} tables rejected: {summary}")
