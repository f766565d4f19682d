"""Airflow glue shared by the DAG files: Assets, default arguments, and access to Connections.

This folder and ``dags/`` are the only code that imports Airflow; everything they call lives in
the plain ``datamind`` package. Nothing here does I/O at import time (DAG files are re-parsed
constantly), and heavy libraries are imported inside task bodies.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Asset

from datamind.stages import ASSET_OF, STAGES

ASSETS = {table: Asset(uri) for table, uri in ASSET_OF.items()}
CATALOG_FILES = ASSETS["catalog_files"]
CATALOG_TABLES = ASSETS["catalog_tables"]
QUERIES = ASSETS["queries"]
TRAJECTORIES = ASSETS["trajectories"]
JUDGED = ASSETS["judged"]
DATASET = ASSETS["dataset"]
CHECKPOINTS = ASSETS["checkpoints"]


def wakes_on(dag_id: str) -> list[Asset]:
    """The schedule of an Asset-driven stage: the Asset of the table it reads (stage catalog)."""
    return [ASSETS[STAGES[dag_id].reads]]


def announces(dag_id: str) -> Asset:
    """The Asset a stage emits when it has written new rows of its table (stage catalog)."""
    return ASSETS[STAGES[dag_id].writes]


DEFAULT_ARGS = {
    "owner": "datamind",
    # every task logs its own summary once; Airflow's echo of the returned value (shard specs, summaries)
    # would print it a second time
    "show_return_value_in_logs": False,
    "retries": 2,
    "retry_delay": timedelta(seconds=20),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}

# One active run per DAG: stages plan "input items not yet in the output", and two overlapping
# runs would plan the same items into differently composed shards.
DAG_DEFAULTS = {
    "default_args": DEFAULT_ARGS,
    "max_active_runs": 1,
    "catchup": False,
}


def drop_folder(kind: str, source):
    """(schedule, source) of a watched drop folder for ``ingest_<kind>``: ``source`` (the DAG's source form,
    ``datamind.ingest.params``) with the folder's URI and name, from the deployment's
    environment: ``DATAMIND_DROP_<KIND>_URI`` (a folder or bucket prefix), ``DATAMIND_DROP_<KIND>_SCHEDULE`` (a
    cron expression or preset such as ``@hourly``) and ``DATAMIND_DROP_<KIND>_NAME`` (default ``drop``). Off
    unless both URI and schedule are set: nothing fires by surprise. A scheduled run ingests only files it has
    not seen (the catalog is the memory), and one that finds none wakes nothing."""
    import dataclasses
    import os

    uri = os.environ.get(f"DATAMIND_DROP_{kind.upper()}_URI") or ""
    schedule = os.environ.get(f"DATAMIND_DROP_{kind.upper()}_SCHEDULE") or None
    if uri and schedule:
        name = os.environ.get(f"DATAMIND_DROP_{kind.upper()}_NAME") or "drop"
        return schedule, dataclasses.replace(source, source_uri=uri, source_name=name)
    return None, source
