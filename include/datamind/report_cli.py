"""Print where a pipeline's outputs and quality reports are: ``python -m datamind.report_cli [DATA_ROOT]``."""

from __future__ import annotations

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
    lines.append(f"Query them with duckdb, e.g.: duckdb -c \"SELECT * FROM '{root.uri('catalog/files')}/**/*.parquet'\"")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    root = DataRoot(argv[1] if len(argv) > 1 else Settings.from_env().data_root)
    print(describe(root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
