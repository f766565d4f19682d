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
from airflow.sdk import dag

from datamind.llm.config import ConnectionForm, RequestForm
from datamind.synth.params import SynthParams
from datamind_airflow import DAG_DEFAULTS, deployment, wakes_on
from datamind_airflow.forms import form_params
from datamind_airflow.stages import sharded_stage


def plan(root, params: SynthParams, max_shards):
    """Profiled tables not yet synthesized with these parameters, split into shards."""
    from datamind.synth.stage import plan_synthesis

    return plan_synthesis(root, params.shard_size, params, max_shards)


def process(root, spec, params: SynthParams, run_id, llm_client):
    from datamind.synth.stage import synthesize_shard

    return synthesize_shard(root, spec, params, run_id, llm_client=llm_client)


@dag(
    schedule=wakes_on("synthesize_queries"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=deployment.doc("synthesize_queries", __doc__),
    tags=["datamind", "synthesis"],
    params=deployment.stage_form(
        "synthesize_queries", {**form_params(SynthParams), **form_params(ConnectionForm), **form_params(RequestForm)}
    ),
    **DAG_DEFAULTS,
)
def synthesize_queries():
    sharded_stage("synthesize_queries", SynthParams, plan=plan, process=process)


synthesize_queries()
