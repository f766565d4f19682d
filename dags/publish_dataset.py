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
nothing. The new version triggers **train_agent**. Quality report: `reports/publish_dataset/<run>/`.

A run with no publishable sample, and no earlier release holding one, **fails**: it writes and promotes
nothing, and its error names the stage that produced nothing with that stage's rejections by reason.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, get_current_context, task

from datamind.publish.params import PublishParams
from datamind_airflow import DAG_DEFAULTS, announces, wakes_on
from datamind_airflow.forms import form_params
from datamind_airflow import runtime

DATASET = announces("publish_dataset")


@dag(
    schedule=wakes_on("publish_dataset"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "dataset"],
    params=form_params(PublishParams),
    **DAG_DEFAULTS,
)
def publish_dataset():
    @task(outlets=[DATASET])
    def publish() -> dict:
        """Filter, write the new version atomically, validate it and announce the Asset."""
        from airflow.sdk.exceptions import AirflowFailException

        from datamind.assets import DIRS
        from datamind.pipeline import finalize_stage
        from datamind.publish.stage import NothingToPublish
        from datamind.publish.stage import publish_dataset as publish_version

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
        # The release's one name travels with the Asset event, so train_agent and a person see the same id.
        version = manifest.get("version_id") or f"v{manifest['version']}"
        context["outlet_events"][DATASET].extra = {"version": version, "content_hash": manifest.get("content_hash")}
        if manifest.get("unchanged"):  # the same release again: no event, train_agent is not woken
            runtime.announce(DATASET, {"new_rows": 0}, version)
        version_dir = f"{DIRS['dataset']}/v{manifest['version']}"
        quality = finalize_stage(
            root, "dataset", "publish_dataset", [], run_id, rel_dir=version_dir, origin=runtime.origin()
        )
        runtime.log_summary("Dataset quality", quality)
        rows_in = manifest.get("n_judged", manifest.get("n_samples", 0) + manifest.get("n_filtered", 0))
        rejected = manifest.get("filtered_by_reason") or {}
        runtime.announce(
            DATASET,
            {**quality, "rows_in": rows_in, "new_rows": manifest.get("n_samples"), "rejected": rejected},
            version,
        )
        return {**manifest, "quality_report": quality.get("quality_report")}

    publish()


publish_dataset()
