"""Helpers shared by the synthesis tests: catalog rows built by the real ingest loader and profiler."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from datamind.formats import load_tables
from datamind.ids import stable_id
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


# A census sheet as the Census Bureau lays it out: the country, its 4 regions, then the states. Every region
# outweighs any state, the regions sum to the country, and the states sum to it too.
REGIONS = {
    "Northeast": [("Maine", 1344), ("New York", 19450), ("Vermont", 624)],
    "Midwest": [("Iowa", 3155), ("Kansas", 2913), ("Ohio", 11690)],
    "South": [("Florida", 21480), ("Georgia", 10620), ("Texas", 28990)],
    "West": [("California", 39510), ("Oregon", 4218), ("Utah", 3206)],
}


def census_csv(path: Path) -> Path:
    regions = [(r, sum(p for _, p in ss), sum(p + 7 for _, p in ss)) for r, ss in REGIONS.items()]
    lines = ["Geographic Area,pop2019,pop2020"]
    lines.append(f"United States,{sum(r[1] for r in regions)},{sum(r[2] for r in regions)}")
    lines += [f"{r},{a},{b}" for r, a, b in regions]
    lines += sorted(f"{s},{p},{p + 7}" for ss in REGIONS.values() for s, p in ss)
    path.write_text("\n".join(lines) + "\n")
    return path
