"""Print where a pipeline's outputs and quality reports are: ``python -m datamind.report_cli [DATA_ROOT]``."""

from __future__ import annotations

import argparse
import os
import sys

from datamind import assets, schemas
from datamind.settings import Settings
from datamind.shards import read_table, shard_paths
from datamind.storage import DataRoot


def describe(root: DataRoot) -> str:
    lines = [f"Outputs under {root.uri()}:"]
    for table, schema in schemas.ALL.items():
        rel = assets.DIRS.get(table)
        if not rel:
            continue
        paths = shard_paths(root, rel)
        if not paths:
            continue
        n = read_table(root, schema, rel, columns=[schema.schema.names[0]]).num_rows
        lines.append(f"  {table:<15} {n:>6} rows in {len(paths):>3} shard(s)  {root.uri(rel)}/")
    index = root.uri(assets.DIRS["reports"], "index.html")
    if root.exists(assets.DIRS["reports"], "index.html"):
        lines.append(f"Quality reports (open in a browser): {index}")
    lines.append(
        f"Query them with duckdb, e.g.: duckdb -c \"SELECT * FROM '{root.uri('catalog/files')}/**/*.parquet'\""
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m datamind.report_cli",
        description="List every table under a data root (rows, shards, folder) and where the quality reports are.",
    )
    parser.add_argument("data_root", nargs="?", default=None, help="data root (default: DATAMIND_DATA_ROOT)")
    args = parser.parse_args(argv[1:])
    root = DataRoot(args.data_root or Settings.from_env().data_root)
    print(describe(root))
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    # Skip interpreter teardown: Arrow's reader threads can abort the process while it unwinds
    # ("terminate called without an active exception"), turning a finished listing into exit 134.
    os._exit(code)
