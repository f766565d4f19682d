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

from airflow.sdk import dag

from datamind.ingest.params import FilesSource
from datamind_airflow import drop_folder, runtime
from datamind_airflow.ingest_tasks import INGEST_DAG, ingest_form, ingest_source

SCHEDULE, SOURCE = drop_folder("files", FilesSource())


def discover(source: FilesSource, limits) -> list:
    """List the source, hash every file and split the new ones into shards."""
    from datamind.ingest.sources import list_sources

    with runtime.fail_fast_on_permanent_errors("ingest_files cannot list its source"):
        return list_sources([source.source_uri, *source.more_source_uris], limits)


@dag(schedule=SCHEDULE, doc_md=__doc__, params=ingest_form(SOURCE), **INGEST_DAG)
def ingest_files():
    ingest_source(FilesSource, discover)


ingest_files()
