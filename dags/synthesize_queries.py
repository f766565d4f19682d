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
from airflow.sdk import Param, dag, get_current_context, task

from datamind.categories import CATEGORY_IDS
from datamind_airflow import CATALOG_TABLES, DAG_DEFAULTS, QUERIES
from datamind_airflow import runtime


@dag(
    schedule=[CATALOG_TABLES],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "synthesis"],
    params={
        "backend": Param("offline", type="string", enum=["offline", "llm"], title="Backend"),
        "categories": Param(
            list(CATEGORY_IDS),
            type="array",
            items={"type": "string", "enum": list(CATEGORY_IDS)},
            title="Task categories",
        ),
        "queries_per_category": Param(2, type="integer", minimum=1, maximum=20, title="Questions per category per table"),
        "n_chains": Param(3, type="integer", minimum=0, maximum=20, title="Composed chains per table"),
        "min_hops": Param(2, type="integer", minimum=2, maximum=5, title="Minimum hops", section="Composition"),
        "max_hops": Param(5, type="integer", minimum=2, maximum=5, title="Maximum hops", section="Composition"),
        "shard_size": Param(20, type="integer", minimum=1, maximum=500, title="Tables per task instance"),
        "seed": Param(0, type="integer", title="Seed"),
        "llm_conn_id": Param("datamind_llm", type="string", title="LLM Connection", section="LLM"),
    },
    **DAG_DEFAULTS,
)
def synthesize_queries():
    def synth_params() -> dict:
        """The run's params minus the ones that only pick infrastructure (the Connection)."""
        return {k: v for k, v in get_current_context()["params"].items() if k != "llm_conn_id"}

    @task
    def plan() -> list[dict]:
        from datamind.synth.stage import plan_synthesis

        params = synth_params()
        specs = plan_synthesis(runtime.data_root(), int(params["shard_size"]), params)
        runtime.log_summary("Synthesis plan", {"shards": len(specs)})
        return specs

    @task(max_active_tis_per_dagrun=2)
    def synthesize_shard(spec: dict) -> dict:
        from datamind.synth.stage import synthesize_shard as run_shard
        from datamind_airflow.llm import client_for

        with client_for(dict(get_current_context()["params"])) as client:
            summary = run_shard(runtime.data_root(), spec, synth_params(), runtime.run_id(), llm_client=client)
        runtime.log_summary(f"Shard {spec.get('shard_id')}", summary)
        return summary

    @task(outlets=[QUERIES])
    def publish(summaries: list[dict]) -> dict:
        from datamind.pipeline import finalize_stage

        result = finalize_stage(runtime.data_root(), "queries", "synthesize_queries", list(summaries), runtime.run_id())
        runtime.log_summary("Synthesis", result)
        return result

    publish(synthesize_shard.expand(spec=plan()))


synthesize_queries()
