"""
### Publish dataset: rule filters, then a new dataset version

Runs whenever `judged` changes. Applies the rule filters to every judged trajectory:

* **format compliance** — the conversation converts losslessly to the training schema (ReAct tags
  well formed, tool turns hold `<interpreter>` output, the last turn answers);
* **length** — the final answer is at most 1,024 tokens (offline tokenizer);
* **linguistic integrity** — no mojibake, control characters, garbled or mixed-script text.

Every dropped sample lands in `rejections/` with the filter and the reason. The survivors are
written as `dataset/v<N>/part-XXXXX.parquet` (zstd, sized shards, deterministic names) with a
`manifest.json` naming the version, counts and schema version; an unchanged input republishes
nothing. Quality report: `reports/publish_dataset/<run>/`, opening with the release's audit.

**Promotion.** A release that meets every audit threshold is promoted at once: **promote** emits the
`dataset` Asset (with the audit verdict) and **train_agent** starts. One that misses a threshold is
published for inspection only: **review** asks a person in the UI (Required actions) to approve or reject
it, with the missed figures and links to the report and the sample viewer. Approve promotes it (and wakes
train_agent); reject keeps it readable and never trained on. The decision, who made it and the comment
go into the release's manifest and card. `DATAMIND_APPROVE_EVERY_RELEASE=1` asks for every release;
`DATAMIND_RELEASE_APPROVERS` (user ids, comma-separated) names who may answer, and Airflow refuses anyone else.

A run with no publishable sample, and no earlier release holding one, **fails**: it writes and promotes
nothing, and its error names the stage that produced nothing with that stage's rejections by reason.
"""

from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import dag, get_current_context, task

from datamind.publish.params import PublishParams, ReviewForm
from datamind.settings import release_approvers
from datamind_airflow import DAG_DEFAULTS, announces, deployment, lineage, runtime, wakes_on
from datamind_airflow.forms import form_params

DATASET = announces("publish_dataset")
APPROVE, REJECT = "Approve", "Reject"
AUDIT_PASSED, REVIEW = "audit_passed", "review"  # the gate's branches (datamind.publish.release)


@dag(
    schedule=wakes_on("publish_dataset"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=deployment.doc("publish_dataset", __doc__),
    tags=["datamind", "dataset"],
    params=deployment.stage_form("publish_dataset", form_params(PublishParams)),
    **DAG_DEFAULTS,
)
def publish_dataset():
    @lineage.task
    def publish() -> dict:
        """Filter, write the new version atomically, validate it; its promotion is decided next."""
        from airflow.sdk.exceptions import AirflowFailException

        from datamind.pipeline import finalize_stage
        from datamind.publish import release
        from datamind.publish.stage import NothingToPublish
        from datamind_airflow.urls import framed_release_url, framed_report_url

        root, run_id, ti = runtime.data_root(), runtime.run_id(), get_current_context()["ti"]

        def validate(rel_dir: str, summary: dict) -> dict:
            return finalize_stage(root, "dataset", "publish_dataset", [], run_id, rel_dir=rel_dir,
                                  origin=runtime.origin(), release=summary)  # fmt: skip

        try:
            return release.publish(
                root, run_id, PublishParams.from_form(deployment.run_params()), validate=validate,
                report_url=framed_report_url(ti.dag_id, ti.run_id, ti.task_id), viewer_url=framed_release_url,
            )  # fmt: skip
        except NothingToPublish as exc:  # a retry would find the same inputs: fail now, saying which stage
            raise AirflowFailException(str(exc)) from exc

    @task.branch
    def gate(published: dict) -> str | None:
        """Promote a release that passed its audit; ask a person about any other."""
        return published["gate"]

    review = HITLOperator(
        task_id=REVIEW,
        subject="Promote dataset {{ ti.xcom_pull(task_ids='publish')['version_id'] }} for training?",
        body="{{ ti.xcom_pull(task_ids='publish')['review_body'] }}",
        options=[APPROVE, REJECT],
        params=form_params(ReviewForm),
        # read when the DAG is parsed: a malformed list is the DAG's import error, shown in the UI
        assigned_users=release_approvers(),
    )

    @lineage.task(outlets=[DATASET], trigger_rule="none_failed_min_one_success")
    def promote(published: dict) -> dict:
        """Record the decision in the release and announce it: only a promoted release wakes train_agent."""
        from airflow.sdk.exceptions import AirflowSkipException

        from datamind.publish import release

        context = get_current_context()
        answer = context["ti"].xcom_pull(task_ids=REVIEW)
        promoted = release.promote(runtime.data_root(), published, release.Decision.of_answer(answer, APPROVE))
        if promoted is None:
            raise AirflowSkipException("the same release again: nothing to promote")
        if not promoted.trainable:
            raise AirflowSkipException(
                f"{promoted.release['version_id']} was rejected: kept readable, never trained on"
            )
        context["outlet_events"][DATASET].extra = promoted.event
        # the event links the release's report, which the publish task wrote
        runtime.announce(DATASET, promoted.counts, promoted.release["version_id"], report_task="publish")
        return promoted.release

    published = publish()
    audit_passed = EmptyOperator(task_id=AUDIT_PASSED)
    gate(published) >> [audit_passed, review]
    [audit_passed, review] >> promote(published)


publish_dataset()
