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
from airflow.sdk import Param, dag

from datamind.rollout.params import BACKENDS, RolloutParams
from datamind_airflow import DAG_DEFAULTS, QUERIES, TRAJECTORIES
from datamind_airflow.stages import sharded_stage

D = RolloutParams()  # the one place the defaults live: form, Python API and fingerprint agree


def plan(root, params):
    """Queries without trajectories yet, split into shards."""
    from datamind.rollout.stage import plan_sampling

    return plan_sampling(root, int(params["shard_size"]), params)


def process(root, spec, params, run_id, llm_client):
    from datamind.rollout.stage import sample_shard

    return sample_shard(root, spec, params, run_id, llm_client=llm_client)


@dag(
    schedule=[QUERIES],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "trajectories"],
    params={
        "backend": Param(D.backend, type="string", enum=list(BACKENDS), title="Expert policy"),
        "n_samples": Param(D.n_samples, type="integer", minimum=1, maximum=8, title="Trajectories per query (N)"),
        "max_turns": Param(D.max_turns, type="integer", minimum=1, maximum=30, title="Maximum turns"),
        "temperature": Param(
            D.temperature, type="number", minimum=0, maximum=2, title="Sampling temperature", section="LLM"
        ),
        "top_p": Param(D.top_p, type="number", minimum=0, maximum=1, title="Top-p", section="LLM"),
        "shard_size": Param(D.shard_size, type="integer", minimum=1, maximum=1000, title="Queries per task instance"),
        "concurrency": Param(
            D.concurrency, type="integer", minimum=1, maximum=64, title="Concurrent rollouts per task"
        ),
        "llm_conn_id": Param("datamind_llm", type="string", title="LLM Connection", section="LLM"),
    },
    **DAG_DEFAULTS,
)
def sample_trajectories():
    sharded_stage(plan=plan, process=process, table="trajectories", stage="sample_trajectories", outlet=TRAJECTORIES)


sample_trajectories()
