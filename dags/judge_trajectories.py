"""
### Judge trajectories: self-consistency, reflection rescue, selection

Runs whenever `trajectories` changes. For every query whose N trajectories are all sampled, a judge
decides whether their final answers agree (same meaning; numbers within 3%; complete) and which one
is best. The **offline** judge compares answers programmatically; the **llm** judge is the `judge`
model of the `datamind_llm` Connection. Both return a reasoning, a yes/no and the best index.

Inconsistent sets go through the **reflection rescue**: the judge's reasoning is fed back to the
agent as a critique, it revises, and the judge runs again (up to `reflection_rounds`); every row
records the round it came from. The **selection strategy** picks what is kept:

| strategy | keeps |
|---|---|
| `con_select` (paper default) | the judge's best trajectory of a consistent set |
| `random_select` | one random trajectory of a consistent set |
| `non_select` | every trajectory of a consistent set |
| `non_con` | every trajectory, consistent or not (ablation) |

Output: `judged/params=<fingerprint>/*.parquet` (the dataset schema) and `rejections/` for dropped
sets; a quality report with consistency rate and rescue yield under `reports/judge_trajectories/<run>/`.
New rows trigger **publish_dataset**.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from datamind.agent.params import RolloutParams
from datamind.judge.params import JudgeParams
from datamind.llm.config import ConnectionForm, RequestForm
from datamind_airflow import DAG_DEFAULTS, deployment, wakes_on
from datamind_airflow.forms import form_params
from datamind_airflow.stages import sharded_stage


def plan(root, params: JudgeParams, max_shards):
    """Queries with sampled trajectories and no judging outcome yet, split into shards."""
    from datamind.judge.stage import plan_judging

    return plan_judging(root, params.shard_size, params, max_shards)


def process(root, spec, params: JudgeParams, run_id, llm_client):
    from datamind.judge.stage import judge_shard

    return judge_shard(root, spec, params, run_id, llm_client=llm_client)


@dag(
    schedule=wakes_on("judge_trajectories"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=deployment.doc("judge_trajectories", __doc__),
    tags=["datamind", "trajectories"],
    params=deployment.stage_form(
        "judge_trajectories",
        {
            # the rollout backend: it judges (unless Judge says otherwise) and samples the reflection rounds
            "backend": form_params(RolloutParams)["backend"],
            **form_params(JudgeParams),
            **form_params(ConnectionForm),
            **form_params(RequestForm),
        },
    ),
    **DAG_DEFAULTS,
)
def judge_trajectories():
    sharded_stage("judge_trajectories", JudgeParams, plan=plan, process=process)


judge_trajectories()
