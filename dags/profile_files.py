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
from airflow.sdk import dag

from datamind.profile.params import ProfileParams
from datamind_airflow import DAG_DEFAULTS, deployment, wakes_on
from datamind_airflow.forms import form_params
from datamind_airflow.stages import sharded_stage


def plan(root, params: ProfileParams, max_shards):
    """Accepted files without a catalog/tables row yet, split into shards."""
    from datamind.profile.stage import plan_profile

    return plan_profile(root, params.shard_size, max_shards)


def process(root, spec, params: ProfileParams, run_id, llm_client):
    from datamind.profile.stage import profile_shard

    return profile_shard(root, spec, run_id)


@dag(
    schedule=wakes_on("profile_files"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=deployment.doc("profile_files", __doc__),
    tags=["datamind", "profile"],
    params=deployment.stage_form("profile_files", form_params(ProfileParams)),
    **DAG_DEFAULTS,
)
def profile_files():
    sharded_stage("profile_files", ProfileParams, plan=plan, process=process)


profile_files()
