"""
### Sample trajectories: N sandboxed ReAct rollouts per query

Runs whenever `queries` changes. For each query not yet sampled it rolls out N trajectories
(`<think>`, `<code>`, `<interpreter>`, `<answer>`; Python for CSV/XLSX, SQL tools for SQLite),
each in its own sandbox (separate process, CPU/memory/wall caps, no network, AST policy check),
guided by the category's workflow knowledge in `prompts/workflows/`.

* **offline** policy (default): replays each query's reference solution chain through the sandbox,
  one hop per turn, with genuinely different solution variants per sample.
* **llm** policy: the `expert` model of the `datamind_llm` Connection.

Output: `trajectories/*.parquet`. New rows trigger **judge_trajectories**.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from datamind_airflow import DAG_DEFAULTS, QUERIES, TRAJECTORIES
from datamind_airflow import runtime


@dag(
    schedule=[QUERIES],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "trajectories"],
    params={
        "backend": Param("offline", type="string", enum=["offline", "llm"], title="Expert policy"),
        "n_samples": Param(3, type="integer", minimum=1, maximum=8, title="Trajectories per query (N)"),
        "max_turns": Param(8, type="integer", minimum=1, maximum=30, title="Maximum turns"),
        "temperature": Param(0.7, type="number", minimum=0, maximum=2, title="Sampling temperature", section="LLM"),
        "top_p": Param(1.0, type="number", minimum=0, maximum=1, title="Top-p", section="LLM"),
        "shard_size": Param(50, type="integer", minimum=1, maximum=1000, title="Queries per task instance"),
        "concurrency": Param(4, type="integer", minimum=1, maximum=64, title="Concurrent rollouts per task"),
        "llm_conn_id": Param("datamind_llm", type="string", title="LLM Connection", section="LLM"),
    },
    **DAG_DEFAULTS,
)
def sample_trajectories():
    @task
    def plan() -> list[dict]:
        from datamind.rollout.stage import plan_sampling

        params = dict(get_current_context()["params"])
        specs = plan_sampling(runtime.data_root(), int(params["shard_size"]), params)
        runtime.log_summary("Sampling plan", {"shards": len(specs)})
        return specs

    @task(max_active_tis_per_dagrun=2)
    def sample_shard(spec: dict) -> dict:
        from datamind.rollout.stage import sample_shard as run_shard
        from datamind_airflow.llm import client_for

        params = dict(get_current_context()["params"])
        with client_for(params) as client:
            summary = run_shard(runtime.data_root(), spec, params, runtime.run_id(), llm_client=client)
        runtime.log_summary(f"Shard {spec.get('shard_id')}", summary)
        return summary

    @task(outlets=[TRAJECTORIES])
    def publish(summaries: list[dict]) -> dict:
        from datamind.pipeline import finalize_stage

        result = finalize_stage(runtime.data_root(), "trajectories", "sample_trajectories", list(summaries), runtime.run_id())
        runtime.log_summary("Sampling", result)
        return result

    publish(sample_shard.expand(spec=plan()))


sample_trajectories()
