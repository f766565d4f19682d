"""The shape every processing DAG shares: plan shards -> process each (mapped) -> validate and publish.

A DAG file supplies its stage's parameter class and two plain functions with lazy imports (so parsing stays
cheap):

    plan(root, params, max_shards) -> list[shard_spec]   (at most max_shards of them)
    process(root, spec, params, run_id, llm_client) -> summary dict

``params`` is an instance of that class, built here from the run's form (``StageParams.from_form``): the one
place a form's keys become a stage's parameters, so a stage function takes its parameter class only.

and this module wires them into tasks, hands each shard an LLM client when the run's backend is
``llm``, and publishes the output table's Asset after Great Expectations has checked what the run wrote.
The plan task resolves the run's parameters once (the stage's settings under the run's conf,
``datamind_airflow.deployment``) and says, before any shard runs, what the run would redo that runs under other
settings covered; every shard and the publish task take the parameters the plan resolved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow.sdk import get_current_context

from datamind.assets import DIRS
from datamind.llm.config import CONNECTION_KEYS
from datamind.stage_params import StageParams
from datamind.stages import STAGES, contract
from datamind_airflow import announces, deployment, runtime
from datamind_airflow.batch import run_or_defer
from datamind_airflow.lineage import task

log = logging.getLogger(__name__)
SETTINGS_KEY = "settings"  # the plan task's XCom: the run's resolved parameters and what it redoes

PlanFn = Callable[[Any, StageParams, int], list[dict[str, Any]]]
ProcessFn = Callable[[Any, dict[str, Any], StageParams, str, Any], dict[str, Any]]


def _stage_only(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in CONNECTION_KEYS}


def run_params() -> dict[str, Any]:
    """The parameters the plan task resolved for this run (a shard or the publish task of the same run)."""
    ti = get_current_context()["ti"]
    settings = ti.xcom_pull(task_ids="plan", key=SETTINGS_KEY)
    return settings["params"] if settings else deployment.run_params()


def sharded_stage(
    stage: str, params_type: type[StageParams], *, plan: PlanFn, process: ProcessFn, parallel_shards: int = 2
):
    """Instantiate the three tasks inside the calling ``@dag`` function of ``stage`` (a DAG id of the stage
    catalog, which names the table it writes, that table's contract and directory, and its Asset); ``plan`` and
    ``process`` receive the run's parameters as a ``params_type``."""
    writes = STAGES[stage].writes
    table, rel_dir, outlet = contract(writes), DIRS[writes], announces(stage)

    @task(task_id="plan")
    def plan_task() -> list[dict]:
        from datamind import stage_settings

        params, root = deployment.run_params(), runtime.data_root()
        stage_params = params_type.from_form(_stage_only(params))
        redo = stage_settings.redo(stage, root, stage_params)
        if redo is not None:  # said before any shard spends anything
            log.warning("%s", redo.message())
        get_current_context()["ti"].xcom_push(
            key=SETTINGS_KEY, value={"params": params, "redo": redo.to_dict() if redo else None}
        )
        specs = plan(root, stage_params, runtime.max_shards())
        runtime.log_summary(f"{stage}: plan", {"shards": len(specs), **({"redo": redo.to_dict()} if redo else {})})
        return specs

    @task(task_id="process_shard", max_active_tis_per_dagrun=parallel_shards)
    def process_task(spec: dict) -> dict:
        from datamind_airflow.llm import client_for

        params = run_params()
        root, run_id = runtime.data_root(), runtime.run_id()
        stage_params = params_type.from_form(_stage_only(params))
        with client_for(params) as client:
            if client is None or params.get("request_mode", "online") == "online":
                summary = process(root, spec, stage_params, run_id, client)
            else:
                shard = lambda r, c: process(r, spec, stage_params, run_id, c)  # noqa: E731
                summary = run_or_defer(f"{stage}:{spec.get('shard_id')}", shard, client, params)
        runtime.log_summary(f"{stage}: shard {spec.get('shard_id')}", summary)
        return summary

    @task(task_id="publish", outlets=[outlet])
    def publish_task(summaries: list[dict]) -> dict:
        """Validate this run's rows with Great Expectations, write the report, announce the Asset."""
        from datamind.pipeline import finalize_stage

        shards = runtime.mapped_results(summaries)
        result = finalize_stage(
            runtime.data_root(),
            table,
            stage,
            shards,
            runtime.run_id(),
            rel_dir=rel_dir,
            origin=runtime.origin(),
            written=[s["path"] for s in shards if s.get("path")],
        )
        settings = get_current_context()["ti"].xcom_pull(task_ids="plan", key=SETTINGS_KEY) or {}
        if settings.get("redo"):  # the run's summary repeats what its plan warned about
            result["redo"] = settings["redo"]
        runtime.log_summary(stage, result)
        runtime.announce(outlet, result)
        return result

    return publish_task(process_task.expand(spec=plan_task()))
