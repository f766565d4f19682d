"""Tasks shared by every ingest_* DAG: a source-specific plan task feeds these two."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pendulum
from airflow.sdk import Param

from datamind.settings import Limits
from datamind_airflow import CATALOG_FILES, DAG_DEFAULTS, runtime
from datamind_airflow.forms import form_params
from datamind_airflow.lineage import task

# What every ingest DAG's ``@dag`` has besides its schedule, docs and form.
INGEST_DAG = {"start_date": pendulum.datetime(2026, 1, 1, tz="UTC"), "tags": ["datamind", "ingest"], **DAG_DEFAULTS}


def ingest_form(*sources: object) -> dict[str, Param]:
    """An ingest DAG's form: the acceptance limits (as this deployment set them), then each source form, an
    instance (its values shown) or a class (its defaults)."""
    out = form_params(Limits, defaults=Limits.from_env())
    for source in sources:
        out |= form_params(source) if isinstance(source, type) else form_params(type(source), defaults=source)
    return out


def limits_from_params(params: dict[str, Any]):
    return runtime.settings().limits.with_overrides(
        min_rows=params.get("min_rows"),
        max_rows=params.get("max_rows"),
        max_db_table_rows=params.get("max_db_table_rows"),
    )


def plan_source_files(files, source_name: str, params: dict[str, Any]) -> list[dict]:
    """Hash, dedupe and shard ``files``; files already in the catalog are skipped (reruns are no-ops)."""
    from datamind.ingest.stage import plan_ingest

    shard_size = int(params.get("shard_size") or runtime.settings().shard_size)
    specs = plan_ingest(runtime.data_root(), files, source_name, shard_size, runtime.max_shards())
    runtime.log_summary(
        f"Planned {source_name}",
        {"files listed": len(files), "new files": sum(len(s["files"]) for s in specs), "shards": len(specs)},
    )
    return specs


@task(max_active_tis_per_dagrun=2)
def ingest_shard(spec: dict) -> dict:
    """Load, validate and stage one shard of files; writes one catalog/files shard atomically."""
    from airflow.sdk import get_current_context

    from datamind.ingest.stage import ingest_shard as run_shard

    params = get_current_context()["params"]
    summary = run_shard(runtime.data_root(), spec, limits_from_params(params), runtime.run_id())
    runtime.log_summary(f"Shard {spec.get('shard_id')}", summary)
    return summary


@task(outlets=[CATALOG_FILES])
def publish_catalog(summaries: list[dict], source_name: str) -> dict:
    """Validate this run's catalog rows with Great Expectations, write the report, announce the Asset."""
    from datamind.pipeline import finalize_ingest

    result = finalize_ingest(
        runtime.data_root(), runtime.mapped_results(summaries), source_name, runtime.run_id(), runtime.origin()
    )
    runtime.log_summary(f"Ingest of {source_name}", result)
    runtime.announce(CATALOG_FILES, result)
    return result


def ingest_source(discover: Callable[[dict[str, Any]], list]) -> None:
    """The tasks of an ingest DAG over a source form, inside its ``@dag`` function: ``plan`` (``discover(params)``
    lists the source's files, failing at once on a source that is not there; the new ones are hashed and
    sharded) -> ``ingest_shard`` per shard -> ``publish_catalog``."""

    @task(task_id="plan", doc_md=discover.__doc__)
    def plan() -> list[dict]:
        from airflow.sdk import get_current_context

        params = get_current_context()["params"]
        return plan_source_files(discover(params), params["source_name"], params)

    publish_catalog(ingest_shard.expand(spec=plan()), source_name="{{ params.source_name }}")
