"""Stage finalizers the DAGs call once all shards of a run are written.

Each reads back the rows this run wrote (by ``run_id``; for a table whose rows do not name their run, the judged
rows, from the shard files the run wrote), plus the rows of earlier runs that never reported (killed before their
quality check), validates them with the stage's Great Expectations suite, writes the
report under ``reports/<stage>/<run_id>/`` (naming the runs it covered) and returns a short summary for the
task log. A run that wrote nothing new (a rerun) still reports, with zero rows.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
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

    Tables without a run_id column (a release folder) are returned whole.
    """
    return rows_to_validate(root, table, run_id, rel_dir, reported=None)[0]


def rows_to_validate(
    root: DataRoot,
    table: str,
    run_id: str,
    rel_dir: str | None,
    reported: set[str] | None,
    scope: tuple[str, str] | None = None,
    written: list[str] | None = None,
) -> tuple[Any, list[str]]:
    """(rows of ``run_id`` plus rows of runs that no report has validated, those other run ids).

    A run killed before its quality check never reports; its rows are checked by the next run of the stage
    instead of never. ``reported=None`` selects this run's rows only. ``scope`` (column, value) limits both to
    the rows the stage owns in a shared table: an ingest run reports on its own source's rows, never on another
    source's. A table whose rows do not name their run (the judged rows) is read from ``written``, the shard
    files this run wrote (None: everything under ``rel_dir`` is this run's, as a release folder is); its runs
    killed before their report cannot be told apart, so they are not covered."""
    schema = schemas.ALL[table]
    if written is not None and "run_id" not in schema.schema.names:
        # the whole judged table is every release's rows so far: a run's counts and checks are its own files
        return read_table(root, schema, rel_dir or assets.DIRS[table], paths=written), []
    data = read_table(root, schema, rel_dir or assets.DIRS[table])
    if scope is not None and scope[0] in data.column_names and data.num_rows:
        data = data.filter(pc.fill_null(pc.equal(data.column(scope[0]), scope[1]), False))
    if "run_id" not in data.column_names or not data.num_rows:
        return data, []
    runs = data.column("run_id")
    mine = pc.equal(runs, run_id)
    if reported is None:
        return data.filter(mine), []
    orphans = sorted({r for r in pc.unique(runs).to_pylist() if r is not None and r != run_id} - reported)
    if orphans:
        mine = pc.or_(mine, pc.is_in(runs, value_set=pa.array(orphans, type=pa.string())))
    return data.filter(pc.fill_null(mine, False)), orphans


def finalize_stage(
    root: DataRoot,
    table: str,
    stage: str,
    summaries: list[dict[str, Any]],
    run_id: str,
    *,
    rel_dir: str | None = None,
    raise_on_failure: bool = False,
    origin: dict[str, str] | None = None,
    release: dict[str, Any] | None = None,
    scope: tuple[str, str] | None = None,
    written: list[str] | None = None,
) -> dict[str, Any]:
    """Validate and report (see the module docstring); ``origin`` names the DAG and task for the report,
    ``release`` is a dataset release's audit and promotion, shown first in its report; ``scope`` (column,
    value): the stage's own rows of a table other stages write too; ``written``: the shard files this run wrote,
    which are its rows where the table's rows do not name their run (see ``rows_to_validate``)."""
    from datamind.quality.validate import reported_runs, validate_table

    data, orphans = rows_to_validate(root, table, run_id, rel_dir, reported_runs(root, stage), scope, written)
    result: dict[str, Any] = {"stage": stage, "table": table, "new_rows": data.num_rows}
    if orphans:
        result["unreported_runs_covered"] = orphans
    result.update(merge_summaries(summaries))
    if data.num_rows == 0:
        result["quality"] = "no new rows to validate"
        return result
    result["rejected"] = rejected_by_reason(root, table, data, run_id)
    counts = {k: v for k, v in result.items() if k not in ("stage", "table")}
    report = validate_table(
        root,
        table,
        data.to_pandas(),
        run_id=run_id,
        stage=stage,
        covers_runs=orphans,
        counts=counts,
        origin=origin,
        release=release,
    )
    log.info("%s", report.summary_text)
    result["quality_success"] = report.success
    result["quality_report"] = report.location
    result["report_path"] = report.report_dir
    if raise_on_failure and not report.success:
        raise RuntimeError(f"{stage}: quality checks failed, see {report.location}")
    return result


def finalize_ingest(
    root: DataRoot, summaries: list[dict[str, Any]], source_name: str, run_id: str, origin: dict | None = None
) -> dict[str, Any]:
    """Validate this ingest run's catalog rows. The catalog is shared by every source: the report covers this
    run's rows, and rows of this source's earlier runs that never reported, never another source's."""
    return finalize_stage(
        root, "catalog_files", f"ingest_{source_name}", summaries, run_id, origin=origin, scope=("source", source_name)
    )


# The count a stage's shards report for the items they took in, per output table.
_ROWS_IN = {
    "catalog_files": "files",
    "catalog_tables": "files",
    "queries": "n_tables",
    "trajectories": "n_queries",
    "dataset": "n_queries",
}


def rejected_by_reason(root: DataRoot, table: str, data, run_id: str) -> dict[str, int]:
    """What this run dropped, by reason: rejected catalog rows for ingestion, else its ``rejections`` rows."""
    if table == "catalog_files":
        rows = data.filter(pc.equal(data.column("status"), "rejected")) if data.num_rows else data
        codes = rows.column("reason_code").to_pylist() if rows.num_rows else []
    else:
        rej = read_table(root, schemas.REJECTIONS, assets.DIRS["rejections"], columns=["reason_code", "run_id"])
        codes = rej.filter(pc.equal(rej.column("run_id"), run_id)).column("reason_code").to_pylist()
    counts: dict[str, int] = {}
    for code in codes:
        counts[code or "unknown"] = counts.get(code or "unknown", 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def asset_event_extra(result: dict[str, Any], *, version: str, report_url: str | None) -> dict[str, Any]:
    """What an Asset event carries for a person and for the next DAG: the version it announces, rows in and
    out of the run, drops by reason and where the quality report is served."""
    rows_in = result.get(_ROWS_IN.get(result.get("table", ""), ""), result.get("rows_in"))
    return {
        "version": version,
        "rows_in": rows_in,
        "rows_out": result.get("new_rows", 0),
        "rejected": result.get("rejected", {}),
        "report_url": report_url if result.get("quality_report") else None,
    }
