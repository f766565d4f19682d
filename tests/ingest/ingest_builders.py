"""Builders for real, hand-crafted input files (each test writes them into its tmp_path)."""

from __future__ import annotations

import io
import sqlite3
import zipfile
from pathlib import Path

from openpyxl import Workbook


def csv_rows(n: int, start: int = 0) -> str:
    """A plain numeric/categorical table body: id, city, amount, day."""
    cities = ["Lyon", "Porto", "Graz", "Turin"]
    return "".join(f"{i},{cities[i % 4]},{i * 1.5:.1f},2024-01-{i % 28 + 1:02d}\n" for i in range(start, start + n))


def write_csv(path: Path, n: int = 30, header: str = "id,city,amount,day\n", encoding: str = "utf-8") -> Path:
    path.write_bytes((header + csv_rows(n)).encode(encoding))
    return path


def xlsx_bytes(sheets: dict[str, list[list]], merges: dict[str, list[str]] | None = None) -> bytes:
    wb = Workbook()
    wb.remove(wb.active)
    for name, rows in sheets.items():
        ws = wb.create_sheet(name)
        for r in rows:
            ws.append(r)
        for rng in (merges or {}).get(name, []):
            ws.merge_cells(rng)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def table_rows(n: int) -> list[list]:
    return [[i, ["Lyon", "Porto", "Graz"][i % 3], round(i * 2.5, 1)] for i in range(n)]


def make_sqlite(path: Path, tables: dict[str, tuple[str, list[tuple]]]) -> Path:
    """tables: name -> (column DDL inside parentheses, rows)."""
    con = sqlite3.connect(path)
    for name, (cols, rows) in tables.items():
        con.execute(f'CREATE TABLE "{name}" ({cols})')
        if rows:
            marks = ",".join("?" * len(rows[0]))
            con.executemany(f'INSERT INTO "{name}" VALUES ({marks})', rows)
    con.commit()
    con.close()
    return path


def zip_with(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path
