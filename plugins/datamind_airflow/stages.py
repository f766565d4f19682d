"""The shape every processing DAG shares: plan shards -> process each (mapped) -> validate and publish.

A DAG file supplies two plain functions with lazy imports (so parsing stays cheap):

    plan(root, params) -> list[shard_spec]
    process(root, spec, params, run_id, llm_client) -> summary dict

and this module wires them into tasks, hands each shard an LLM client when the run's backend is
``llm``, and publishes the output table's Asset after Great Expectations has checked what the run wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk import get_current_context, task

from datamind.assets import DIRS
from datamind.stages import STAGES, contract
from datamind_airflow import announces, runtime

# Params that choose infrastructure (which Connection), not what a stage computes.
INFRA_PARAMS = {"llm_conn_id"}

PlanFn = Callable[[Any, dict[str, Any]], list[dict[str, Any]]]
ProcessFn = Callable[[Any, dict[str, Any], dict[str, Any], str, Any], dict[str, Any]]


def stage_params() -> dict[str, Any]:
    return {k: v for k, v in get_current_context()["params"].items() if k not in INFRA_PARAMS}


def sharded_stage(stage: str, *, plan: PlanFn, process: ProcessFn, parallel_shards: int = 2):
    """Instantiate the three tasks inside the calling ``@dag`` function of ``stage`` (a DAG id of the stage
    catalog, which names the table it writes, that table's contract and directory, and its Asset)."""
    writes = STAGES[stage].writes
    table, rel_dir, outlet = contract(writes), DIRS[writes], announces(stage)

    @task(task_id="plan")
    def plan_task() -> list[dict]:
        specs = plan(runtime.data_root(), stage_params())
        runtime.log_summary(f"{stage}: plan", {"shards": len(specs)})
        return specs

    @task(task_id="process_shard", max_active_tis_per_dagrun=parallel_shards)
    def process_task(spec: dict) -> dict:
        from datamind_airflow.llm import client_for

        with client_for(dict(get_current_context()["params"])) as client:
            summary = process(runtime.data_root(), spec, stage_params(), runtime.run_id(), client)
        runtime.log_summary(f"{stage}: shard {spec.get('shard_id')}", summary)
        return summary

    @task(task_id="publish", outlets=[outlet])
    def publish_task(summaries: list[dict]) -> dict:
        """Validate this run's rows with Great Expectations, write the report, announce the Asset."""
        from datamind.pipeline import finalize_stage

        result = finalize_stage(
            runtime.data_root(),
            table,
            stage,
            runtime.mapped_results(summaries),
            runtime.run_id(),
            rel_dir=rel_dir,
            origin=runtime.origin(),
        )
        runtime.log_summary(stage, result)
        runtime.announce(outlet, result)
        return result

    return publish_task(process_task.expand(spec=plan_task()))
