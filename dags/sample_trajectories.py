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
from airflow.sdk import dag

from datamind.agent.params import RolloutParams
from datamind.llm.config import ConnectionForm
from datamind_airflow import DAG_DEFAULTS, deployment, wakes_on
from datamind_airflow.forms import form_params
from datamind_airflow.stages import sharded_stage


def plan(root, params: RolloutParams, max_shards):
    """Queries without trajectories yet, split into shards."""
    from datamind.rollout.stage import plan_sampling

    return plan_sampling(root, params.shard_size, params, max_shards)


def process(root, spec, params: RolloutParams, run_id, llm_client):
    from datamind.rollout.stage import sample_shard

    return sample_shard(root, spec, params, run_id, llm_client=llm_client)


@dag(
    schedule=wakes_on("sample_trajectories"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=deployment.doc("sample_trajectories", __doc__),
    tags=["datamind", "trajectories"],
    params=deployment.stage_form("sample_trajectories", {**form_params(RolloutParams), **form_params(ConnectionForm)}),
    **DAG_DEFAULTS,
)
def sample_trajectories():
    sharded_stage("sample_trajectories", RolloutParams, plan=plan, process=process)


sample_trajectories()
