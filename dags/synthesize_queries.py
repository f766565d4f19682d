"""
### Synthesize queries: 18 task categories, single-hop and composed multi-hop

Runs whenever `catalog/tables` changes and writes questions for every profiled table not yet
synthesized with the same parameters. Each question belongs to one of the paper's 18 categories;
composed chains (2-5 hops) feed each hop's result into the next question.

* **offline** backend (default): programmatic questions from real columns and values, each with a
  reference program whose executed output is the ground-truth answer. No LLM needed.
* **llm** backend: Jinja2 prompts in `prompts/` with 4-6 few-shot exemplars per category, sent to
  the OpenAI-compatible endpoint of the `datamind_llm` Connection (role `synthesizer`). Responses
  are cached by content hash under the data root, so retries and reruns never pay twice.

Output: `queries/*.parquet`, dropped items in `rejections/`, summary next to the output, quality
report under `reports/synthesize_queries/<run>/`. New rows trigger **sample_trajectories**.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from datamind.categories import CATEGORY_IDS
from datamind.synth.params import SynthParams
from datamind_airflow import CATALOG_TABLES, DAG_DEFAULTS, QUERIES
from datamind_airflow.stages import sharded_stage


def plan(root, params):
    """Profiled tables not yet synthesized with these parameters, split into shards."""
    from datamind.synth.stage import plan_synthesis

    return plan_synthesis(root, int(params["shard_size"]), params)


def process(root, spec, params, run_id, llm_client):
    from datamind.synth.stage import synthesize_shard

    return synthesize_shard(root, spec, params, run_id, llm_client=llm_client)


S = SynthParams()


@dag(
    schedule=[CATALOG_TABLES],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "synthesis"],
    params={
        # the one place the defaults live: SynthParams
        "backend": Param(S.backend, type="string", enum=["offline", "llm"], title="Backend"),
        "categories": Param(
            list(CATEGORY_IDS),
            type="array",
            items={"type": "string", "enum": list(CATEGORY_IDS)},
            title="Task categories",
        ),
        "queries_per_category": Param(
            S.queries_per_category, type="integer", minimum=1, maximum=20, title="Questions per category per table"
        ),
        "n_chains": Param(S.n_chains, type="integer", minimum=0, maximum=20, title="Composed chains per table"),
        "min_hops": Param(
            S.min_hops, type="integer", minimum=2, maximum=5, title="Minimum hops", section="Composition"
        ),
        "max_hops": Param(
            S.max_hops, type="integer", minimum=2, maximum=5, title="Maximum hops", section="Composition"
        ),
        "shard_size": Param(S.shard_size, type="integer", minimum=1, maximum=500, title="Tables per task instance"),
        "seed": Param(S.seed, type="integer", title="Seed"),
        "llm_conn_id": Param("datamind_llm", type="string", title="LLM Connection", section="LLM"),
    },
    **DAG_DEFAULTS,
)
def synthesize_queries():
    sharded_stage(plan=plan, process=process, table="queries", stage="synthesize_queries", outlet=QUERIES)


synthesize_queries()
