"""Delimited bytes before any parser: decoding, the first line's width, header records, and where the
body starts; both CSV routes (pandas' and Arrow's) frame a file with these."""

from __future__ import annotations

import csv
import io
import logging
import os
import re
from itertools import islice
from typing import Any

from datamind.formats import sniff
from datamind.formats.common import LoadError
from datamind.settings import Limits

log = logging.getLogger(__name__)


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


def _skip_records(text: str, n: int, delimiter: str, quotechar: str) -> tuple[list[list[str]], str]:
    """First ``n`` csv records and the text after them (quote-aware, so multi-line cells are fine)."""
    if n == 0:
        return [], text
    lines = io.StringIO(text)
    reader = csv.reader(lines, delimiter=delimiter, quotechar=quotechar)
    records = list(islice(reader, n))
    consumed = reader.line_num
    pos = 0
    for _ in range(consumed):
        nl = text.find("\n", pos)
        if nl < 0:
            return records, ""
        pos = nl + 1
    return records, text[pos:]


def _header_cells(header_records: list[list[str]], ncols: int, n_header: int) -> list[str]:
    """Each parsed column's header text as written (the header records combined; blank without a header)."""
    return sniff.combine_header(header_records, ncols) if n_header else [""] * ncols


_BOM = b"\xef\xbb\xbf"


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
    records = list(islice(reader, n))
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
