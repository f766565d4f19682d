"""
### Ingest BIRD / OmniSQL databases

Reads a directory or archive in the BIRD layout — `<db_id>/<db_id>.sqlite`, optional
`<db_id>/database_description/*.csv` column descriptions (any encoding), optional question JSON —
samples `sample_size` databases (deterministic for a given `seed`), and catalogs each one, accepted
or rejected with a reason. Table rules mirror the CSV rules (anomalous types, at most 1,000 rows by
default), except that small lookup tables are normal in a database: instead of each table, the
accepted tables together must hold at least `min_rows` rows.

Column descriptions travel with the file into `catalog/tables` (`description` fields), where the
synthesis prompts read them. New catalog rows trigger **profile_files** via the `catalog/files` Asset.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, get_current_context

from datamind.ingest.params import BirdSource
from datamind_airflow import DAG_DEFAULTS, drop_folder, runtime
from datamind_airflow.ingest_tasks import ingest_form, ingest_shard, plan_source_files, publish_catalog
from datamind_airflow.lineage import task

SCHEDULE, SOURCE = drop_folder("bird", BirdSource())


@dag(
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "ingest"],
    params=ingest_form(SOURCE),
    **DAG_DEFAULTS,
)
def ingest_bird():
    @task
    def plan() -> list[dict]:
        """Discover and sample the databases, hash them and shard the new ones."""
        from datamind.ingest.bird import discover_bird

        params = get_current_context()["params"]
        with runtime.fail_fast_on_permanent_errors(f"cannot read BIRD source {params['source_uri']!r}"):
            files = discover_bird(params["source_uri"], sample_size=params.get("sample_size"), seed=params["seed"])
        return plan_source_files(files, params["source_name"], params)

    summaries = ingest_shard.expand(spec=plan())
    publish_catalog(summaries, source_name="{{ params.source_name }}")


ingest_bird()
