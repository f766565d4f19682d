"""
### Evaluate an agent on benchmark suites (DATAMIND appendix D protocol)

Runs an agent under test over the suites named in the form, each read from the benchmark's own
published files in a folder on the workers (nothing is downloaded):

- `dabench`: InfiAgent-DABench folder (questions + labels JSONL, `da-dev-tables/`), `@name[value]` answers;
- `tablebench`: a TableBench JSONL file (chart and forecasting questions are excluded, as in the paper);
- `bird`: a BIRD/Spider folder (question JSON with gold SQL, `database/<db_id>/<db_id>.sqlite`): the agent's
  last query is compared with the gold SQL as a set of rows;
- `heldout`: the test split of a published dataset version (`""` = the latest, or `"3"` for v3).

The agent can also be a **checkpoint** folder (a `train_agent` output), served for the run behind the
same protocol: by vLLM's OpenAI server on a GPU worker, or by `transformers serve` on a CPU worker.

The agent is the OpenAI-compatible endpoint of **agent_conn_id** (vLLM serving a checkpoint, DeepSeek,
OpenAI...; its `agent` model, or **model**), or `offline`: the offline expert, the reference policy on
the held-out split. It runs the same ReAct loop, prompt format and sandbox as trajectory sampling.
Each question is answered **trials** times; pass@1 is the mean over trials, pass@k the share of
questions with any correct trial. **judge_conn_id** switches free-form answers to the model-as-judge
(3% numeric rule); empty keeps the rule judges.

Outputs under `<data root>/eval/<eval_id>/`: `results.parquet` (one row per question x trial, with the
trajectory and verdict), `summary.json`, `report.md` (per suite and category, plus every evaluation in
the data root side by side). The same parameters give the same `eval_id`: a rerun replaces, never adds.
Also runs when `train_agent` emits a new checkpoint (`datamind://checkpoints`), with the defaults below.
"""

from __future__ import annotations

import logging

import pendulum
from airflow.sdk import dag, get_current_context

from datamind.evaluate.params import OFFLINE_AGENT, EvalParams, deployment_suites
from datamind.llm.config import CONNECTION_KEYS, RequestForm
from datamind_airflow import DAG_DEFAULTS, deployment, runtime, wakes_on
from datamind_airflow.forms import form_params
from datamind_airflow.lineage import task

log = logging.getLogger(__name__)


@dag(
    schedule=wakes_on("evaluate_agent"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=deployment.doc("evaluate_agent", __doc__),
    tags=["datamind", "evaluation"],
    params=deployment.stage_form(
        "evaluate_agent",
        {
            **form_params(EvalParams, defaults=EvalParams(suites=deployment_suites())),
            **form_params(RequestForm),
        },
    ),
    **DAG_DEFAULTS,
)
def evaluate_agent():
    @task
    def evaluate() -> dict:
        from datamind.evaluate.stage import evaluate as run_eval
        from datamind_airflow.batch import run_or_defer
        from datamind_airflow.llm import agent_client_for, judge_client_for

        context = get_current_context()
        raw = deployment.run_params()
        for event in (context.get("triggering_asset_events") or {}).get(wakes_on("evaluate_agent")[0], []):
            uri = (event.extra or {}).get("checkpoint_uri")
            log.info("Triggered by checkpoint %s", uri)
            if uri and not raw.get("checkpoint") and raw.get("agent_conn_id") == OFFLINE_AGENT:
                raw["checkpoint"] = uri  # evaluate the checkpoint that was just trained (fetched if remote)
        runtime.settings()  # DATAMIND_BENCHMARKS from the Airflow Variable when the environment has none
        p = EvalParams.from_form({k: v for k, v in raw.items() if k not in CONNECTION_KEYS})
        with agent_client_for(p) as agent, judge_client_for(p) as judge:
            if judge is None or raw.get("request_mode", "online") == "online":
                summary = run_eval(runtime.data_root(), p, agent, judge)
            else:  # the model-as-judge through the Batch API; the agent's own calls stay online
                work = lambda r, c: run_eval(r, p, agent, c)  # noqa: E731
                summary = run_or_defer(
                    f"evaluate_agent:{p.eval_id()}", work, judge, {**raw, "llm_conn_id": p.judge_conn_id}
                )
        runtime.log_summary(
            f"Evaluation {summary['eval_id']}",
            {s: {k: f[k] for k in f if k.startswith("pass@") or k == "n"} for s, f in summary["suites"].items()},
        )
        return {"eval_id": summary["eval_id"], "suites": summary["suites"]}

    evaluate()


evaluate_agent()
