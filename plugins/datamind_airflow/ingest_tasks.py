"""Tasks shared by every ingest_* DAG: a source-specific plan task feeds these two.

A run's form is read once, by the plan task (``read_form``): the acceptance limits and each source class built
with ``StageParams.from_form``, and a key none of them declares refused there."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pendulum
from airflow.sdk import Param

from datamind.settings import Limits
from datamind.stage_params import StageParams, form_schema
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


def read_limits(params: Mapping[str, Any]) -> Limits:
    """The acceptance limits a run works under: this deployment's, with the form's values of the fields the form
    shows over them."""
    return runtime.settings().limits.with_overrides(**{k: params.get(k) for k in form_schema(Limits)})


def read_form(params: Mapping[str, Any], *classes: type[StageParams]) -> tuple:
    """An ingest run's form read once: ``(limits, *one instance per class)``, each class built with ``from_form``
    from the keys it declares. A key that neither the limits nor any class declares is refused here, so a typo
    in a run's conf never silently means a default."""
    declared = [set(form_schema(Limits)), *({f.name for f in dataclasses.fields(c)} for c in classes)]
    unknown = sorted(set(params) - set().union(*declared))
    if unknown:
        raise ValueError(f"unknown ingest parameter(s) {unknown}; known: {sorted(set().union(*declared))}")
    own = dict(zip(classes, declared[1:], strict=True))
    return (read_limits(params), *(c.from_form({k: v for k, v in params.items() if k in own[c]}) for c in classes))


def plan_source_files(files, source_name: str, shard_size: int) -> list[dict]:
    """Hash, dedupe and shard ``files``; files already in the catalog are skipped (reruns are no-ops)."""
    from datamind.ingest.stage import plan_ingest

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

    params = get_current_context()["params"]  # its keys were checked when the run was planned (read_form)
    summary = run_shard(runtime.data_root(), spec, read_limits(params), runtime.run_id())
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


def ingest_source(source_type: type[StageParams], discover: Callable[[Any, Limits], list]) -> None:
    """The tasks of an ingest DAG over a source form (``source_type``), inside its ``@dag`` function: ``plan``
    (``discover(source, limits)`` lists the source's files, failing at once on a source that is not there; the
    new ones are hashed and sharded) -> ``ingest_shard`` per shard -> ``publish_catalog``."""

    @task(task_id="plan", doc_md=discover.__doc__)
    def plan() -> list[dict]:
        from airflow.sdk import get_current_context

        with runtime.fail_fast_on_permanent_errors("the run's parameters"):  # a retry reads the same form
            limits, source = read_form(get_current_context()["params"], source_type)
        return plan_source_files(discover(source, limits), source.source_name, source.shard_size)

    publish_catalog(ingest_shard.expand(spec=plan()), source_name="{{ params.source_name }}")
