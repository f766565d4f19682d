"""Helpers shared by the synthesis tests: catalog rows built by the real ingest loader and profiler."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from datamind.ids import stable_id
from datamind.ingest.loaders import load_tables
from datamind.profile.stage import profile_rows
from datamind.schemas import CATALOG_TABLES
from datamind.shards import write_shard
from datamind.storage import DataRoot


def catalog_rows(path: Path, source: str = "test", max_rows: int = 1000) -> list[dict]:
    res = load_tables(str(path))
    assert res.error is None, res.error
    file_row = {
        "file_id": stable_id("file", str(path)),
        "source": source,
        "format": res.format,
        "staged_uri": str(path),
    }
    now = dt.datetime.now(dt.UTC)
    tables = [t for t in res.tables if t.df is not None and 1 <= t.n_rows <= max_rows]
    return profile_rows([(file_row, tables, {})], "test-run", now)[0]


def write_catalog(root: DataRoot, rows: list[dict]) -> None:
    write_shard(
        root, CATALOG_TABLES, "catalog/tables", rows, f"part-{stable_id([r['table_id'] for r in rows])}.parquet"
    )


# Sales table: region is a group, units/price measures, day a date. Values chosen for hand arithmetic.
SMALL_CSV = """region,units,price,day,note
north,10,2.0,2023-01-05,a
north,20,4.0,2023-02-10,b
north,30,6.0,2024-01-15,c
south,5,1.0,2024-02-20,d
south,15,3.0,2024-03-25,e
south,25,5.0,2024-04-30,f
east,40,8.0,2024-05-05,g
east,60,12.0,2024-06-10,h
"""
