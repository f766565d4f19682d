"""
### Ingest files: backfill any new file source

Point it at a **local directory, a glob, a `.zip` archive or any fsspec URL** (`s3://`, `gs://`, ...)
holding CSV, XLSX or SQLite files. Every file lands exactly once in `catalog/files` under the data
root, **accepted** or **rejected with a reason** (unloadable, too few/many rows, anomalous types,
duplicate content, ...). Accepted files are staged under `raw/<source>/<file_id>/`.

Re-running over the same files changes nothing: files already in the catalog are skipped.
When new rows land, the `catalog/files` Asset triggers **profile_files**.

Outputs: `catalog/files/*.parquet`; quality report under `reports/ingest_<source>/<run>/`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, get_current_context

from datamind.ingest.params import FilesSource
from datamind_airflow import DAG_DEFAULTS, drop_folder, runtime
from datamind_airflow.ingest_tasks import (
    ingest_form,
    ingest_shard,
    limits_from_params,
    plan_source_files,
    publish_catalog,
)
from datamind_airflow.lineage import task

SCHEDULE, SOURCE = drop_folder("files", FilesSource())


@dag(
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "ingest"],
    params=ingest_form(SOURCE),
    **DAG_DEFAULTS,
)
def ingest_files():
    @task
    def plan() -> list[dict]:
        """List the source, hash every file and split the new ones into shards."""
        from datamind.ingest.sources import list_sources

        params = get_current_context()["params"]
        uris = [params["source_uri"], *(params.get("more_source_uris") or [])]
        with runtime.fail_fast_on_permanent_errors(f"cannot list source {', '.join(map(repr, uris))}"):
            files = list_sources(uris, limits_from_params(params))
        return plan_source_files(files, params["source_name"], params)

    summaries = ingest_shard.expand(spec=plan())
    publish_catalog(summaries, source_name="{{ params.source_name }}")


ingest_files()
