"""Work out what a file really is from its bytes, never from its name.

* ``detect_format``: magic bytes. SQLite header; zip holding ``xl/workbook.xml`` = xlsx (any other zip
  is ``zip``); OLE2 compound file = xls (legacy Excel, also what encrypted xlsx look like); gzip; text
  (no NUL bytes in the head, or a UTF-16/32 BOM) = csv, unless it opens like a JSON document or an SQL
  script (json / sql); anything else (parquet, pdf, images) = unknown.
* ``detect_encoding``: BOM first, then strict UTF-8, then charset-normalizer on a sample, preferring
  cp1252 among equally plausible single-byte code pages (Western exports are the common case), and
  latin-1 as the decoder of last resort (it never fails, so nothing is rejected for its encoding).
* ``sniff_dialect``: delimiter chosen by field-count consistency over a quoted-aware parse of the first
  lines (``csv.Sniffer`` picks letters and spaces too often); decimal comma only where the delimiter is
  not a comma and comma-decimals clearly outnumber dot-decimals; thousands separators only from
  unambiguous patterns.
* ``detect_header``: skips title rows (too few filled cells), finds multi-row headers where the caller
  saw grouped (merged) header cells (a row holding text in a column whose body is numeric belongs to the
  header), and spots header-less data (numbers and no text where the names should be).
"""

from __future__ import annotations

import codecs
import csv
import datetime as dt
import io
import math
import re
import zipfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SQLITE_MAGIC = b"SQLite format 3\x00"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ZIP_MAGIC = b"PK\x03\x04"
GZIP_MAGIC = b"\x1f\x8b"

_EXT_FORMAT = {
    "csv": "csv", "tsv": "csv", "txt": "csv", "tab": "csv", "psv": "csv",
    "xlsx": "xlsx", "xlsm": "xlsx", "xls": "xls",
    "sqlite": "sqlite", "sqlite3": "sqlite", "db": "sqlite",
    "gz": "gzip", "zip": "zip",
}  # fmt: skip

_BOMS = [
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
]
_WESTERN = ("cp1252", "latin_1", "iso8859_15")
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13))
# JSON documents and SQL scripts are text with commas too; recognise them by how they open.
_SQL_OR_JSON_NEXT = re.compile(rb"^\s*([\[{\"\]}]|-?\d|true|false|null)")
_SQL_START = re.compile(rb"^(create|insert|begin|pragma|drop|alter|select|--|/\*)\b", re.IGNORECASE)


def declared_format(filename: str) -> str | None:
    name = filename.lower()
    if "." not in name:
        return None
    ext = name.rsplit(".", 1)[1]
    return _EXT_FORMAT.get(ext, ext)


def _bom_encoding(head: bytes) -> str | None:
    for bom, enc in _BOMS:
        if head.startswith(bom):
            return enc
    return None


def detect_format(data: bytes) -> str:
    """csv | xlsx | xls | sqlite | gzip | zip | json | sql | unknown, from content alone."""
    head = data[:8]
    if data.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head.startswith(ZIP_MAGIC):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                names = set(zf.namelist())
        except zipfile.BadZipFile:
            # A truncated or damaged workbook still shows its part names in the local headers.
            return "xlsx" if b"xl/" in data[:65536] else "unknown"
        return "xlsx" if "xl/workbook.xml" in names else "zip"
    if head.startswith(OLE_MAGIC):
        return "xls"
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if not data:
        return "unknown"
    if _bom_encoding(data[:4]) in ("utf-16", "utf-32"):
        return "csv"
    sample = data[:65536]
    if b"\x00" in sample:
        return "unknown"
    # Text files have almost no C0 control bytes besides tab/CR/LF/FF.
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    if controls > len(sample) * 0.01:
        return "unknown"
    start = sample.lstrip(b"\xef\xbb\xbf \t\r\n")
    if start[:1] in (b"{", b"[") and _SQL_OR_JSON_NEXT.match(start[1:40]):
        return "json"
    if _SQL_START.match(start[:40]):
        return "sql"
    return "csv"


def describe_unknown(data: bytes) -> tuple[str, str]:
    """(reason code, message) for content ``detect_format`` called unknown: say what it looks like."""
    if data.startswith(ZIP_MAGIC):
        return "unloadable", "a damaged or truncated zip container (xlsx workbook or zip archive): it cannot be opened"
    sample = data[:65536]
    nuls = sample.count(b"\x00")
    if nuls and nuls <= len(sample) * 0.01 and _mostly_text(sample.replace(b"\x00", b"")):
        where = sample.index(b"\x00")
        return (
            "unloadable",
            f"text with {nuls:,} NUL byte(s) in its first {len(sample):,} bytes (first at byte {where:,}): "
            "a corrupt or truncated export; remove the NUL bytes and ingest it again",
        )
    return "unsupported_format", "content is not delimited text, xlsx or SQLite"


def _mostly_text(sample: bytes) -> bool:
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return bool(sample) and controls <= len(sample) * 0.01


_DIMENSION = re.compile(rb"<(?:\w+:)?dimension\s+ref=\"([A-Z]{1,3})?(\d+)?(?::([A-Z]{1,3})(\d+))?\"")
_SHEET_ENTRY = re.compile(rb"<(?:\w+:)?sheet\b[^>]*>")
_ATTR = re.compile(rb'([\w:]+)="([^"]*)"')
_RELATION = re.compile(rb"<(?:\w+:)?Relationship\b[^>]*>")
_PART_HEAD = 1 << 16  # <dimension> comes right after the sheet's properties


def sheet_dimensions(data: bytes) -> dict[str, tuple[int, int, str]]:
    """Sheet name -> (rows, columns, ref) as each worksheet part declares it, read from the part's first
    bytes without parsing the workbook (a reader allocates this rectangle). Sheets without a readable
    declaration are left out; a lying declaration is caught by the parse's own memory cap."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            book = _read_head(zf, "xl/workbook.xml", 1 << 20)
            rels = _read_head(zf, "xl/_rels/workbook.xml.rels", 1 << 20)
            targets = {}
            for tag in _RELATION.findall(rels):
                attrs = dict(_ATTR.findall(tag))
                if b"Id" in attrs and b"Target" in attrs:
                    targets[attrs[b"Id"]] = attrs[b"Target"].decode("utf-8", "replace")
            out = {}
            for tag in _SHEET_ENTRY.findall(book):
                attrs = dict(_ATTR.findall(tag))
                rid = next((v for k, v in attrs.items() if k.endswith(b":id")), None)
                target = targets.get(rid)
                if b"name" not in attrs or not target:
                    continue
                part = target.lstrip("/") if target.startswith("/") else "xl/" + target
                match = _DIMENSION.search(_read_head(zf, part, _PART_HEAD))
                if match:
                    name = _xml_unescape(attrs[b"name"].decode("utf-8", "replace"))
                    out[name] = _rectangle(match)
            return out
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, EOFError):
        return {}


def _read_head(zf: zipfile.ZipFile, name: str, n: int) -> bytes:
    with zf.open(name) as fh:
        return fh.read(n)


def _xml_unescape(text: str) -> str:
    for ent, ch in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&")):
        text = text.replace(ent, ch)
    return text


def _column_number(letters: bytes) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + (ch - 64)
    return n


def _rectangle(match: re.Match) -> tuple[int, int, str]:
    c0, r0, c1, r1 = match.groups()
    ref = match.group(0).split(b'"')[1].decode()
    if c1 is None:  # a single cell, e.g. "A1"
        return (1 if r0 else 0), (1 if c0 else 0), ref
    rows = int(r1) - int(r0 or 1) + 1
    cols = _column_number(c1) - _column_number(c0 or b"A") + 1
    return max(rows, 0), max(cols, 0), ref


def detect_encoding(data: bytes) -> str:
    bom = _bom_encoding(data[:4])
    if bom:
        return bom
    try:
        data.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError:
        pass
    choice = None
    try:
        from charset_normalizer import from_bytes

        results = list(from_bytes(data[:200_000]))
        if results:
            best = results[0]
            near = [
                e for r in results if r.chaos <= best.chaos + 0.01 for e in (r.could_be_from_charset or [r.encoding])
            ]
            choice = next((e for e in _WESTERN if e in near), best.encoding)
    except Exception:  # a detector crash must not lose the file: fall through to the safe decoders
        choice = None
    for enc in (choice, "cp1252"):
        if enc:
            try:
                data.decode(enc)
                return codecs.lookup(enc).name
            except (UnicodeDecodeError, LookupError):
                continue
    return "latin-1"


# -- delimited text ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Dialect:
    delimiter: str = ","
    quotechar: str = '"'
    decimal: str = "."
    thousands: str | None = None
    fields: int = 1  # modal number of fields per line
    consistency: float = 1.0  # share of sampled non-blank lines with that many fields

    @property
    def tabular(self) -> bool:
        return self.fields >= 2 and self.consistency >= MIN_CONSISTENCY


_DELIMS = [",", ";", "\t", "|"]
MIN_CONSISTENCY = 0.6
_COMMA_DEC = re.compile(r"^[-+]?\d+,\d+$")
_DOT_DEC = re.compile(r"^[-+]?\d+\.\d+$")
_THOUSANDS_COMMA = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d+)?$")
_THOUSANDS_DOT = re.compile(r"^[-+]?\d{1,3}(\.\d{3})+(,\d+)?$")


def sample_lines(text: str, max_lines: int = 200, max_chars: int = 200_000) -> str:
    chunk = text[:max_chars]
    lines = chunk.splitlines(keepends=True)
    if len(chunk) == max_chars and len(lines) > 1:
        lines = lines[:-1]  # drop the cut-off last line
    return "".join(lines[:max_lines])


def parse_rows(sample: str, delimiter: str, quotechar: str = '"') -> list[list[str]]:
    """Quote-aware split of a text sample into rows (empty when the sample is not valid CSV)."""
    try:
        return list(csv.reader(io.StringIO(sample), delimiter=delimiter, quotechar=quotechar))
    except csv.Error:
        return []


def sniff_dialect(text: str) -> Dialect:
    sample = sample_lines(text, max_lines=40, max_chars=50_000)
    best: tuple[float, int, int] | None = None
    for i, delim in enumerate(_DELIMS):
        if delim not in sample:
            continue
        rows = [r for r in parse_rows(sample, delim) if any(c.strip() for c in r)]
        if not rows:
            continue
        counts = Counter(len(r) for r in rows)
        modal, freq = counts.most_common(1)[0]
        if modal < 2:
            continue
        consistency = freq / len(rows)
        # Consistency first, then more fields, then the conventional order of delimiters.
        key = (round(consistency, 2), modal, -i)
        if best is None or key > best:
            best = key
    delimiter = _DELIMS[-best[2]] if best else ","
    decimal, thousands = ".", None
    # With a comma delimiter, commas inside numbers can only occur in quoted cells.
    if delimiter != "," or '"' in sample:
        rows = parse_rows(sample, delimiter)[1:]
        cells = [c.strip() for r in rows for c in r if c.strip()]
        comma_dec = sum(1 for c in cells if _COMMA_DEC.match(c))
        dot_dec = sum(1 for c in cells if _DOT_DEC.match(c))
        decimal = "," if delimiter != "," and comma_dec > max(3, 2 * dot_dec) else "."
        if decimal == "," and sum(1 for c in cells if _THOUSANDS_DOT.match(c) and (c.count(".") >= 2 or "," in c)) >= 3:
            thousands = "."
        elif decimal == "." and sum(1 for c in cells if _THOUSANDS_COMMA.match(c)) >= 3:
            thousands = ","
    fields, consistency = (best[1], best[0]) if best else (1, 0.0)
    return Dialect(delimiter=delimiter, decimal=decimal, thousands=thousands, fields=fields, consistency=consistency)


# -- header rows -------------------------------------------------------------------------------
_NUM = re.compile(r"^[-+]?(\d+([.,]\d*)?|[.,]\d+)([eE][-+]?\d+)?%?$")


def cell_kind(value: Any) -> str:
    """empty | num | date | text for a raw cell (string from CSV, python value from a sheet)."""
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "num"
    if isinstance(value, (int, float)):
        return "empty" if isinstance(value, float) and math.isnan(value) else "num"
    if isinstance(value, (dt.date, dt.datetime, dt.time, dt.timedelta)):
        return "date"
    s = str(value).strip()
    if not s:
        return "empty"
    return "num" if _NUM.match(s.replace(" ", "")) else "text"


@dataclass(frozen=True)
class HeaderSpec:
    start: int  # index of the first header row (rows before it are titles)
    n_rows: int  # header rows (0 = no header: data starts at ``start``)


def _filled(row: Sequence[Any]) -> int:
    return sum(1 for v in row if cell_kind(v) != "empty")


def detect_header(rows: Sequence[Sequence[Any]], max_header_rows: int = 3, multi_row: bool = False) -> HeaderSpec:
    """Locate the header in the first rows of a table-like grid (see module docstring).

    ``multi_row`` allows headers of several rows; callers enable it only where the grid shows grouped
    headers (merged cells in a sheet), because a messy first data row (text in a numeric column) would
    otherwise be swallowed into the header.
    """
    rows = [list(r) for r in rows[:25]]
    if not rows:
        return HeaderSpec(0, 1)
    kinds = [[cell_kind(v) for v in r] for r in rows]
    filled = [sum(k != "empty" for k in r) for r in kinds]
    width = max(filled)
    if width == 0:
        return HeaderSpec(0, 1)
    need = 1 if width == 1 else max(2, math.ceil(width * 0.5))
    start = next((i for i, n in enumerate(filled) if n >= need), 0)
    ncols = max(len(r) for r in rows)

    def kind(i: int, j: int) -> str:
        return kinds[i][j] if j < len(kinds[i]) else "empty"

    def numeric_cols(from_row: int) -> list[int]:
        out = []
        for j in range(ncols):
            ks = [kind(i, j) for i in range(from_row, len(rows))]
            ks = [k for k in ks if k != "empty"]
            if len(ks) >= 3 and sum(k in ("num", "date") for k in ks) >= 0.8 * len(ks):
                out.append(j)
        return out

    num_cols = numeric_cols(start + 1)

    def data_like(i: int) -> bool:
        return any(kind(i, j) == "num" for j in num_cols) and all(kind(i, j) != "text" for j in num_cols)

    if start > 0 and num_cols and data_like(start) and filled[start - 1] > 0:
        # The "header" has numbers where the body has numbers: it is data, and the sparse row above it
        # (mostly unnamed columns) is the real header, not a title.
        start -= 1
        num_cols = numeric_cols(start + 1)
    if start + 1 < len(rows) and num_cols:
        header_has_text = any(kind(start, j) == "text" for j in range(ncols))
        if not header_has_text and any(kind(start, j) == "num" for j in num_cols):
            # Numbers where names should be and no text anywhere in the row: there is no header row.
            return HeaderSpec(start, 0)
    n = 1
    while multi_row and n < max_header_rows and start + n < len(rows) - 1:
        i = start + n
        if filled[i] == 0:
            break
        if any(kind(i, j) == "text" for j in numeric_cols(i + 1)):
            n += 1
            continue
        break
    return HeaderSpec(start, n)


def header_text(value: Any) -> str:
    if type(value) is str:  # a CSV's cells: blank ones join to "" (what cell_kind calls empty)
        return " ".join(value.split())
    if cell_kind(value) == "empty":
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime) and value.time() == dt.time(0):
        return value.date().isoformat()
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    return " ".join(str(value).split())


def combine_header(header_rows: Sequence[Sequence[Any]], ncols: int) -> list[str]:
    """One name per column from one or more header rows (parts joined, repeats from merged cells once)."""
    names = []
    for j in range(ncols):
        parts: list[str] = []
        for r in header_rows:
            t = header_text(r[j]) if j < len(r) else ""
            if t and (not parts or parts[-1] != t):
                parts.append(t)
        names.append(" ".join(parts))
    return names
