"""Profiling throughput over the DABench tables, against one plain pandas parse per file (CSV and XLSX).

Usage: .venv/bin/python scripts/bench_profile.py [--repeats 7] [--data ../shared/data]

It ingests the 52 DABench CSVs into a temporary data root twice over: with the default limits (32 files
accepted) and with ``max_rows`` lifted so all 52 are accepted. For each set it then times, as medians
over the repeats:
  * baseline: ``pd.read_csv(path)`` once per staged file (what "just parsing" costs); for the workbooks
    (the same tables written as XLSX) ``pd.read_excel(path, engine="calamine")``;
  * load: ``load_recorded`` of every accepted table (the parse profiling starts from, repairs included);
  * profile (core): one read + parse (recorded read_options, no detection; Arrow's CSV reader where
    ingestion recorded the column types that reproduce pandas' frame) + profile of every accepted table
    (``profile_files``, as a profiling shard runs them: no catalog or Parquet I/O);
  * profile (stage): ``plan_profile`` + ``profile_shard``, catalog reads and the Parquet write included;
  * load + Arrow kernels: the load, then only the Arrow kernels the statistics rest on, one call per column
    and statistic (a conversion and a hash count per column, mean and standard deviation per number
    column) and nothing else: a reference for what a profile built from per-column kernel calls costs
    (profiling skips the hash count where a sort settles it, so on large tables it can cost less).
and prints files/second and the ratio to the baseline (target: profile within 2x of one plain parse),
with the machine's load average before and after (the machine is shared: compare ratios, not times).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from datamind.assets import DIRS
from datamind.formats import load_recorded
from datamind.formats.common import column_values
from datamind.ingest.sources import list_source_files
from datamind.ingest.stage import ingest_shard, plan_ingest
from datamind.profile.stage import plan_profile, profile_files, profile_shard
from datamind.schemas import CATALOG_FILES
from datamind.settings import REPO_ROOT, Limits
from datamind.shards import read_rows
from datamind.storage import DataRoot


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): CPU time is what other users of a shared machine
    disturb least, so the ratios are computed on it; wall time is printed alongside."""
    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def bench(tables_dir: Path, limits: Limits, repeats: int, label: str) -> None:
    with tempfile.TemporaryDirectory(prefix="datamind-bench-") as tmp:
        root = DataRoot(tmp)
        for spec in plan_ingest(root, list_source_files(str(tables_dir), limits), "dabench", 100):
            ingest_shard(root, spec, limits, "bench")
        rows = [r for r in read_rows(root, CATALOG_FILES, DIRS["catalog_files"]) if r["status"] == "accepted"]
        paths = [r["staged_uri"] for r in rows]
        now = dt.datetime.now(dt.UTC)

        def baseline() -> None:
            for p in paths:
                if p.endswith(".xlsx"):
                    pd.read_excel(p, sheet_name=None, engine="calamine")  # the fastest plain XLSX parse pandas has
                else:
                    pd.read_csv(p)

        recorded = [
            [json.loads(v["read_options"]) for v in r["table_verdicts"] if v["status"] == "accepted"] for r in rows
        ]

        def load() -> None:
            for p, opts in zip(paths, recorded, strict=True):
                load_recorded(p, opts)

        def core() -> None:
            for _ in profile_files(root, rows, "bench", now):
                pass

        def kernels() -> None:
            for p, opts in zip(paths, recorded, strict=True):
                for t in load_recorded(p, opts):
                    for j in range(t.df.shape[1]):
                        values = column_values(t.df, j)
                        numbers = isinstance(values, np.ndarray) and values.dtype.kind in "iuf"
                        arr = pa.array(values, from_pandas=True) if numbers else pa.array(values)
                        pc.value_counts(arr)
                        if numbers:
                            pc.mean(arr)
                            pc.stddev(arr, ddof=1)

        def stage() -> None:
            root.remove(DIRS["catalog_tables"])
            for spec in plan_profile(root, 100):
                profile_shard(root, spec, "bench")

        timed = (baseline, load, core, stage, kernels)
        for fn in timed:  # warm the page cache and imports
            fn()
        # Interleaved rounds: on a shared machine the load changes minute to minute, so each round's
        # ratio compares runs taken under the same conditions; we report medians over rounds.
        load_before = os.getloadavg()
        rounds = [tuple(_timed(fn) for fn in timed) for _ in range(repeats)]
        load_after = os.getloadavg()
        n = len(paths)
        print(
            f"{label}: {n} files, {sum(r['n_rows'] for r in rows):,} rows, medians of {repeats} interleaved rounds; "
            f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}"
        )
        print(f"  {'':26s} {'wall ms':>9s} {'files/s':>9s} {'CPU ms':>9s} {'CPU ratio':>10s}")
        for i, name in enumerate(
            (
                "baseline pandas read",
                "load (recorded options)",
                "profile (core)",
                "profile (stage, parquet)",
                "load + Arrow kernels",
            )
        ):
            wall = statistics.median(r[i][0] for r in rounds)
            cpu = statistics.median(r[i][1] for r in rounds)
            ratio = statistics.median(r[i][1] / r[0][1] for r in rounds)
            print(f"  {name:26s} {wall * 1000:9.1f} {n / wall:9.1f} {cpu * 1000:9.1f} {ratio:9.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--data", default=str(REPO_ROOT.parent / "shared" / "data"))
    args = ap.parse_args()
    tables = Path(args.data) / "dabench" / "da-dev-tables"
    if not tables.is_dir():
        print(f"DABench tables not found under {tables}", file=sys.stderr)
        return 2
    bench(tables, Limits(), args.repeats, "CSV, default limits (20-1,000 rows)")
    bench(tables, Limits(max_rows=10**7), args.repeats, "CSV, all DABench tables (max_rows lifted)")
    with tempfile.TemporaryDirectory(prefix="datamind-bench-xlsx-") as tmp:
        written = set()
        for csv in sorted(tables.glob("*.csv")):  # the same tables as workbooks, one sheet each
            df = pd.read_csv(csv)
            if len(df) > Limits().max_rows:  # the ones default limits accept; writing big workbooks is slow
                continue
            # Two DABench files hold one table (titanic, titanic_train): their workbooks are byte-identical
            # when written within the same second (a workbook stores its save time to the second), and
            # ingestion then rejects one as a duplicate. One workbook per table keeps the set the same.
            table = df.to_csv(index=False)
            if table in written:
                continue
            written.add(table)
            with warnings.catch_warnings():
                # One DABench table has a cell longer than a sheet cell may be (32,767 characters); its
                # workbook copy holds the cut text, as Excel itself would, which is all a timing needs.
                warnings.filterwarnings("ignore", "Cell contents too long", UserWarning)
                df.to_excel(Path(tmp) / f"{csv.stem}.xlsx", index=False)
        bench(Path(tmp), Limits(), args.repeats, "XLSX (the same tables), default limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
