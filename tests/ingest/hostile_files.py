"""The bad-file corpus: crafted hostile and broken inputs, generated on demand (bombs are never committed).

Each entry names the file, writes it, and says what ingest must record for it. Run as a script to get the
folder for a manual try (``python tests/ingest/hostile_files.py /tmp/bad``) or an Airflow run of
``ingest_files`` on it.
"""

from __future__ import annotations

import sqlite3
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ingest_builders import table_rows, write_csv, xlsx_bytes


@dataclass(frozen=True)
class BadFile:
    name: str
    write: Callable[[Path], None]
    reasons: tuple[str, ...]  # acceptable reason codes
    says: str  # a phrase the recorded reason must contain (lower case)


def _far_corner_xlsx(path: Path) -> None:
    """A 1.5 KB workbook declaring A1:XFD1048576: a reader that trusts it allocates ~550 GB."""
    path.write_bytes(xlsx_bytes({"Sheet1": [["a", "b"], [1, 2]]}))
    with zipfile.ZipFile(path) as zf:
        parts = {n: zf.read(n) for n in zf.namelist()}
    sheet = parts["xl/worksheets/sheet1.xml"].decode()
    if "<dimension" in sheet:
        head, rest = sheet.split("<dimension", 1)
        sheet = head + '<dimension ref="A1:XFD1048576"/>' + rest.split("/>", 1)[1]
    else:
        sheet = sheet.replace("<sheetData", '<dimension ref="A1:XFD1048576"/><sheetData', 1)
    sheet = sheet.replace("</sheetData>", '<row r="1048576"><c r="XFD1048576"><v>1</v></c></row></sheetData>', 1)
    parts["xl/worksheets/sheet1.xml"] = sheet.encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)


def _far_corner_undeclared_xlsx(path: Path) -> None:
    """The same far cell with no <dimension>: only the parse's own memory cap can stop the reader."""
    _far_corner_xlsx(path)
    with zipfile.ZipFile(path) as zf:
        parts = {n: zf.read(n) for n in zf.namelist()}
    parts["xl/worksheets/sheet1.xml"] = parts["xl/worksheets/sheet1.xml"].replace(
        b'<dimension ref="A1:XFD1048576"/>', b""
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)


def _wide_csv(path: Path) -> None:
    """Two lines of ten million columns (40 MB): parser state of gigabytes before any column check."""
    row = b"1," * 9_999_999 + b"1\n"
    path.write_bytes(row + row)


def _zeroblob_sqlite(path: Path) -> None:
    """An 8 KB database whose generated column is a 200 MB blob per row (30 rows: 6 GB if materialized)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (id INTEGER, name TEXT, big BLOB GENERATED ALWAYS AS (zeroblob(200000000)) VIRTUAL)")
    con.executemany("INSERT INTO t (id, name) VALUES (?, ?)", [(i, f"n{i}") for i in range(30)])
    con.commit()
    con.close()


def _truncated_xlsx(path: Path) -> None:
    data = xlsx_bytes({"Sheet1": table_rows(40)})
    path.write_bytes(data[: len(data) // 3])


def _nul_csv(path: Path) -> None:
    write_csv(path, 40)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] = 0
    path.write_bytes(bytes(data))


def _gibberish(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 64)


CORPUS: tuple[BadFile, ...] = (
    BadFile(
        "far_corner.xlsx",
        _far_corner_xlsx,
        ("too_many_columns",),
        "16,384 columns, more than the 200 allowed (as the sheet declares, a1:xfd1048576; not read)",
    ),
    BadFile("far_corner_undeclared.xlsx", _far_corner_undeclared_xlsx, ("parse_limit", "too_many_columns"), ""),
    BadFile("ten_million_columns.csv", _wide_csv, ("too_many_columns",), "fields separated by"),
    BadFile("zeroblob.sqlite", _zeroblob_sqlite, ("unloadable",), "byte cap"),
    BadFile("truncated.xlsx", _truncated_xlsx, ("unloadable",), "truncated"),
    BadFile("one_nul_byte.csv", _nul_csv, ("unloadable",), "nul byte"),
    BadFile("gibberish.bin", _gibberish, ("unsupported_format",), "not delimited text"),
)


def write_corpus(folder: Path) -> list[BadFile]:
    folder.mkdir(parents=True, exist_ok=True)
    for bad in CORPUS:
        bad.write(folder / bad.name)
    return list(CORPUS)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "bad-files")
    for bad in write_corpus(target):
        print(f"{target / bad.name}: expect {'/'.join(bad.reasons)}")
