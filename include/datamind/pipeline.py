"""Stage finalizers the DAGs call once all shards of a run are written.

Each reads back exactly the rows this run wrote (by ``run_id``), validates them with the stage's
Great Expectations suite, writes the report under ``reports/<stage>/<run_id>/`` and returns a
short summary for the task log. A run that wrote nothing new (a rerun) still reports, with zero rows.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pyarrow.compute as pc

from datamind import assets, schemas
from datamind.shards import read_table
from datamind.storage import DataRoot

log = logging.getLogger(__name__)


def merge_summaries(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum numeric fields and merge count dicts across shard summaries."""
    total: dict[str, Any] = {}
    for summary in summaries:
        for key, value in (summary or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
                continue
            if isinstance(value, dict):
                total[key] = dict(Counter(total.get(key, {})) + Counter({k: v for k, v in value.items() if isinstance(v, (int, float))}))
            else:
                total[key] = total.get(key, 0) + value
    return total


def rows_of_run(root: DataRoot, table: str, run_id: str):
    schema = schemas.ALL[table]
    rel_dir = assets.DIRS[table]
    data = read_table(root, schema, rel_dir)
    if "run_id" in data.column_names and data.num_rows:
        data = data.filter(pc.equal(data.column("run_id"), run_id))
    return data


def finalize_stage(
    root: DataRoot,
    table: str,
    stage: str,
    summaries: list[dict[str, Any]],
    run_id: str,
    *,
    raise_on_failure: bool = False,
) -> dict[str, Any]:
    from datamind.quality.validate import validate_table

    data = rows_of_run(root, table, run_id)
    result: dict[str, Any] = {"stage": stage, "table": table, "new_rows": data.num_rows}
    result.update(merge_summaries(summaries))
    if data.num_rows == 0:
        result["quality"] = "no new rows to validate"
        return result
    report = validate_table(root, table, data.to_pandas(), run_id=run_id, stage=stage)
    log.info("%s", report.summary_text)
    result["quality_success"] = report.success
    result["quality_report"] = report.location
    if raise_on_failure and not report.success:
        raise RuntimeError(f"{stage}: quality checks failed, see {report.location}")
    return result


def finalize_ingest(root: DataRoot, summaries: list[dict[str, Any]], source_name: str, run_id: str) -> dict[str, Any]:
    result = finalize_stage(root, "catalog_files", f"ingest_{source_name}", summaries, run_id)
    data = rows_of_run(root, "catalog_files", run_id)
    if data.num_rows:
        result["status"] = dict(Counter(data.column("status").to_pylist()))
        result["rejected_by_reason"] = dict(
            Counter(c for c, s in zip(data.column("reason_code").to_pylist(), data.column("status").to_pylist()) if s == "rejected")
        )
    return result
