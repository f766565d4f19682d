"""
### Profile files: the metadata every later stage reads

Runs whenever `catalog/files` changes (any ingest DAG) and profiles each accepted file not yet
profiled: per table (CSV = one, XLSX = one per sheet, SQLite = one per table, with DDL and foreign
keys) it records head rows, columns, types, ranges, capped unique values, row and column counts and
a description. The compact `meta_info` JSON is exactly what the query-synthesis prompts consume.

Output: `catalog/tables/*.parquet`; quality report under `reports/profile_files/<run>/`.
New rows trigger **synthesize_queries** via the `catalog/tables` Asset.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from datamind_airflow import CATALOG_FILES, CATALOG_TABLES, DAG_DEFAULTS
from datamind_airflow import runtime


@dag(
    schedule=[CATALOG_FILES],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "profile"],
    params={
        "shard_size": Param(50, type="integer", minimum=1, maximum=1000, title="Files per task instance"),
    },
    **DAG_DEFAULTS,
)
def profile_files():
    @task
    def plan() -> list[dict]:
        """Accepted files without a catalog/tables row yet, split into shards."""
        from datamind.profile.stage import plan_profile

        params = get_current_context()["params"]
        specs = plan_profile(runtime.data_root(), int(params["shard_size"]))
        runtime.log_summary("Profile plan", {"shards": len(specs), "files": sum(len(s["files"]) for s in specs)})
        return specs

    @task(max_active_tis_per_dagrun=2)
    def profile_shard(spec: dict) -> dict:
        from datamind.profile.stage import profile_shard as run_shard

        summary = run_shard(runtime.data_root(), spec, runtime.run_id())
        runtime.log_summary(f"Shard {spec.get('shard_id')}", summary)
        return summary

    @task(outlets=[CATALOG_TABLES])
    def publish(summaries: list[dict]) -> dict:
        """Validate this run's catalog/tables rows and announce the Asset."""
        from datamind.pipeline import finalize_stage

        result = finalize_stage(runtime.data_root(), "catalog_tables", "profile_files", list(summaries), runtime.run_id())
        runtime.log_summary("Profiling", result)
        return result

    publish(profile_shard.expand(spec=plan()))


profile_files()
