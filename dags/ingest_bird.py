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

from airflow.sdk import dag

from datamind.ingest.params import BirdSource
from datamind_airflow import drop_folder, runtime
from datamind_airflow.ingest_tasks import INGEST_DAG, ingest_form, ingest_source

SCHEDULE, SOURCE = drop_folder("bird", BirdSource())


def discover(source: BirdSource, limits) -> list:
    """Discover and sample the databases, hash them and shard the new ones."""
    from datamind.ingest.bird import discover_bird

    with runtime.fail_fast_on_permanent_errors(f"cannot read BIRD source {source.source_uri!r}"):
        return discover_bird(source.source_uri, sample_size=source.sample_size, seed=source.seed)


@dag(schedule=SCHEDULE, doc_md=__doc__, params=ingest_form(SOURCE), **INGEST_DAG)
def ingest_bird():
    ingest_source(BirdSource, discover)


ingest_bird()
