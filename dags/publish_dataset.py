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
from datamind_airflow import DAG_DEFAULTS, announces, lineage, runtime, wakes_on
from datamind_airflow.forms import form_params

DATASET = announces("publish_dataset")
APPROVE, REJECT = "Approve", "Reject"


@dag(
    schedule=wakes_on("publish_dataset"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "dataset"],
    params=form_params(PublishParams),
    **DAG_DEFAULTS,
)
def publish_dataset():
    @lineage.task
    def publish() -> dict:
        """Filter, write the new version atomically, validate it; its promotion is decided next."""
        from airflow.sdk.exceptions import AirflowFailException

        from datamind import tables
        from datamind.assets import DIRS
        from datamind.pipeline import finalize_stage
        from datamind.publish import promotion
        from datamind.publish.stage import NothingToPublish
        from datamind.publish.stage import publish_dataset as publish_version
        from datamind_airflow.urls import VIEWER, task_report_url

        context = get_current_context()
        params = context["params"]
        root, run_id = runtime.data_root(), runtime.run_id()
        try:
            manifest = publish_version(root, run_id, {**params, "judged_partition": params["judged_partition"] or None})
        except NothingToPublish as exc:  # a retry would find the same inputs: fail now, saying which stage
            raise AirflowFailException(str(exc)) from exc
        runtime.log_summary("Published dataset", {k: v for k, v in manifest.items() if not isinstance(v, (list, dict))})
        audit = manifest.get("audit") or {}
        runtime.log_summary(
            "Dataset audit (python -m datamind.publish.audit)",
            {k: v for k, v in audit.items() if not isinstance(v, dict)},
        )
        if manifest.get("unchanged"):  # the same release again: nothing to promote, train_agent is not woken
            return {**manifest, "gate": None}
        release = promotion.release_summary(manifest)
        version_dir = f"{DIRS['dataset']}/v{manifest['version']}"
        quality = finalize_stage(
            root,
            "dataset",
            "publish_dataset",
            [],
            run_id,
            rel_dir=version_dir,
            origin=runtime.origin(),
            release=release,
        )
        runtime.log_summary("Dataset quality", quality)
        ti = context["ti"]
        report_url = task_report_url(ti.dag_id, context["run_id"], ti.task_id)
        viewer_url = f"{VIEWER}/releases/{release['version_id']}/"
        return {
            **manifest,
            "quality": quality,
            "gate": "audit_passed" if tables.trainable(manifest) else "review",
            "review_body": promotion.review_body(manifest, report_url, viewer_url),
        }

    @task.branch
    def gate(published: dict) -> str | None:
        """Promote a release that passed its audit; ask a person about any other."""
        return published["gate"]

    review = HITLOperator(
        task_id="review",
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

        from datamind import tables
        from datamind.publish import promotion

        if published.get("gate") is None:
            raise AirflowSkipException("the same release again: nothing to promote")
        context = get_current_context()
        manifest = published
        decision = context["ti"].xcom_pull(task_ids="review")
        if decision:
            user = decision.get("responded_by_user") or {}
            manifest = promotion.decide(
                runtime.data_root(),
                published["version"],
                approved=decision["chosen_options"] == [APPROVE],
                user=user.get("name") or user.get("id") or "unknown",
                comment=(decision.get("params_input") or {}).get("comment") or "",
            )
            runtime.log_summary("Promotion decided", manifest["promotion"])
        release = promotion.release_summary(manifest)
        if not tables.trainable(manifest):
            raise AirflowSkipException(f"{release['version_id']} was rejected: kept readable, never trained on")
        # The release's one name travels with the Asset event, so train_agent and a person see the same id.
        version = release["version_id"]
        context["outlet_events"][DATASET].extra = {
            "version": version,
            "content_hash": manifest.get("content_hash"),
            "audit_verdict": release["audit_verdict"],
            "failing_figures": release["failing_figures"],
            "promoted_by": manifest["promotion"].get("decided_by") or manifest["promotion"].get("by"),
        }
        quality = published.get("quality") or {}
        rows_in = manifest.get("n_judged", manifest.get("n_samples", 0) + manifest.get("n_filtered", 0))
        rejected = manifest.get("filtered_by_reason") or {}
        runtime.announce(
            DATASET,
            {**quality, "rows_in": rows_in, "new_rows": manifest.get("n_samples"), "rejected": rejected},
            version,
        )
        return release

    published = publish()
    audit_passed = EmptyOperator(task_id="audit_passed")
    gate(published) >> [audit_passed, review]
    [audit_passed, review] >> promote(published)


publish_dataset()
