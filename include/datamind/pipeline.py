"""Stage finalizers the DAGs call once all shards of a run are written.

Each reads back exactly the rows this run wrote (by ``run_id``), validates them with the stage's
Great Expectations suite, writes the report under ``reports/<stage>/<run_id>/`` and returns a
short summary for the task log. A run that wrote nothing new (a rerun) still reports, with zero rows.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow.compute as pc

from datamind import assets, schemas
from datamind.shards import read_table
from datamind.storage import DataRoot

log = logging.getLogger(__name__)


# Summary fields that describe the run rather than count something: kept from the first shard, never summed.
_DESCRIPTIVE = {"params", "shard_id", "path", "source", "outputs"}


def merge_summaries(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum counts across shard summaries, recursively through nested count dicts."""
    total: dict[str, Any] = {}
    for summary in summaries:
        _merge_into(total, summary or {})
    return total


def _merge_into(total: dict[str, Any], summary: dict[str, Any]) -> None:
    for key, value in summary.items():
        if key in _DESCRIPTIVE:
            continue
        if isinstance(value, dict):
            _merge_into(total.setdefault(key, {}), value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def rows_of_run(root: DataRoot, table: str, run_id: str, rel_dir: str | None = None):
    """Rows of ``table`` (under ``rel_dir``, default its own directory) written by ``run_id``.

    Tables without a run_id column (the judged/published dataset) are returned whole.
    """
    schema = schemas.ALL[table]
    data = read_table(root, schema, rel_dir or assets.DIRS[table])
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
    rel_dir: str | None = None,
    raise_on_failure: bool = False,
) -> dict[str, Any]:
    from datamind.quality.validate import validate_table

    data = rows_of_run(root, table, run_id, rel_dir)
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
    return finalize_stage(root, "catalog_files", f"ingest_{source_name}", summaries, run_id)
