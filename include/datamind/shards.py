"""Parquet shards under the data root: deterministic names, atomic writes, schema-checked reads.

A stage writes each output shard under a name derived from the ids it contains, so a retry or a
rerun over the same input rewrites the same file (never a second copy) and a partial run leaves
only whole shards behind.
"""

from __future__ import annotations

import contextlib
import io
import logging
import posixpath
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datamind.ids import stable_id
from datamind.schemas import TableSchema
from datamind.storage import DataRoot

log = logging.getLogger(__name__)
# Airflow's core.max_map_length when the deployment does not set it: the most shards one plan may map.
AIRFLOW_MAX_MAP_LENGTH = 1024


def chunk(items: Sequence, size: int, max_chunks: int | None = None) -> list[list]:
    """Split ``items`` into consecutive lists of at most ``size`` (order preserved), and into at most
    ``max_chunks`` of them, raising the size as ``fit_shard_size`` does."""
    size = fit_shard_size([len(items)], size, max_chunks)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def fit_shard_size(counts: Sequence[int], size: int, max_shards: int | None) -> int:
    """``size``, raised just enough that lists of ``counts`` items, each chunked by it, make at most
    ``max_shards`` shards in all. Airflow fails a task whose mapped list is longer than ``core.max_map_length``
    (1,024 by default), which a season of crawling reaches at any fixed shard size."""
    if size < 1:
        raise ValueError("shard size must be >= 1")
    if max_shards is None:
        return size
    n_shards = lambda s: sum(-(-c // s) for c in counts)  # noqa: E731
    if n_shards(size) <= max_shards:
        return size
    lo, hi = size, max(counts)  # n_shards(lo) > max_shards; at hi every list is one shard
    if n_shards(hi) > max_shards:
        raise ValueError(f"{sum(1 for c in counts if c)} lists cannot make at most {max_shards} shards")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if n_shards(mid) <= max_shards else (mid, hi)
    log.info(
        "shard size raised from %d to %d: %d items would make %d shards, more than the %d a mapping may have "
        "(Airflow's core.max_map_length)", size, hi, sum(counts), n_shards(size), max_shards,
    )  # fmt: skip
    return hi


def shard_name(ids: Iterable[str], prefix: str = "part") -> str:
    return f"{prefix}-{stable_id(sorted(ids))}.parquet"


def table_to_parquet_bytes(table: pa.Table, row_group_size: int | None = None) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", row_group_size=row_group_size)
    return buf.getvalue()


def write_shard(root: DataRoot, schema: TableSchema, rel_dir: str, rows: list[dict], name: str) -> str | None:
    """Atomically write ``rows`` as ``rel_dir/name``; returns the path, or None for no rows."""
    if not rows:
        return None
    table = schema.to_table(rows)
    return root.write_bytes(posixpath.join(rel_dir, name), table_to_parquet_bytes(table))


def shard_paths(root: DataRoot, rel_dir: str) -> list[str]:
    return root.glob(rel_dir, "**", "*.parquet") if root.exists(rel_dir) else []


@contextlib.contextmanager
def parquet_source(root: DataRoot, path: str) -> Iterator[Any]:
    """What pyarrow reads the shard at ``path`` from. A local shard is handed over by its path, so Arrow reads
    it with its own I/O. Given a Python file object instead, Arrow's I/O threads call back into Python to read
    it, and some of that work (the file's release) can run after the read returned: when it runs while the
    interpreter exits, the thread is ended as it takes the GIL and the process aborts ("terminate called
    without an active exception", a short-lived planner process once; apache/arrow#33975). A shard of another
    filesystem is read through fsspec's file object."""
    if root.is_local:
        yield path
    else:
        with root.open(path) as fh:
            yield fh


def read_table(
    root: DataRoot,
    schema: TableSchema,
    rel_dir: str,
    columns: list[str] | None = None,
    where: tuple[str, Iterable[str]] | None = None,
    paths: Iterable[str] | None = None,
) -> pa.Table:
    """All shards under ``rel_dir`` as one table (empty table with the schema when none); ``paths`` limits the
    read to those shards (a planner that knows where a task's rows are hands them over).

    ``where=(column, values)`` keeps the rows whose ``column`` is one of ``values``, reading that column
    first and the other columns only of shards that hold a match: a task that needs its own few rows of a
    large table pays for one column of it, not for every row's payload."""
    wanted = pa.array(sorted(set(where[1])), type=pa.string()) if where else None
    tables = []
    for path in shard_paths(root, rel_dir) if paths is None else sorted(set(paths)):
        with parquet_source(root, path) as source:
            if wanted is None:
                t = pq.read_table(source, columns=columns)
            else:
                pf = pq.ParquetFile(source)
                mask = pc.is_in(pf.read(columns=[where[0]]).column(0), value_set=wanted)
                if not pc.any(mask).as_py():
                    continue
                t = pf.read(columns=columns).filter(mask)
        schema.check(t, where=path)
        if columns is None:
            t = (
                t.select(schema.schema.names).cast(schema.schema)
                if set(schema.schema.names) <= set(t.column_names)
                else t
            )
        tables.append(t)
    if not tables:
        empty = schema.schema.empty_table()
        return empty.select(columns) if columns else empty
    return pa.concat_tables(tables, promote_options="default")


def read_rows(
    root: DataRoot,
    schema: TableSchema,
    rel_dir: str,
    columns: list[str] | None = None,
    where: tuple[str, Iterable[str]] | None = None,
) -> list[dict]:
    return read_table(root, schema, rel_dir, columns, where).to_pylist()


def column_counts(table: pa.Table, column: str) -> dict:
    """How many rows hold each value of ``column`` (None: null), counted in Arrow: no Python object per row."""
    return {c["values"]: c["counts"] for c in pc.value_counts(table[column]).to_pylist()}
