"""Airflow plugin: the data quality reports in the UI (a nav entry, a view per run and task, task links)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink

from datamind_airflow.api_wording import ApiWording
from datamind_airflow.reports_app import create_app
from datamind_airflow.urls import (
    PREFIX,
    REPORTS_ROUTE,
    VIEWER,
    VIEWER_ROUTE,
    framed_backfill_url,
    framed_report_url,
    in_frame,
    viewer_run_url,
)

# Tasks that validate a stage's output and write a report (stages.sharded_stage, ingest, publish_dataset).
REPORTING_TASKS = frozenset({"publish", "publish_catalog"})
# DAGs whose runs write trajectories or rejections a person may want to read one by one.
SAMPLING_DAGS = {"sample_trajectories": "trajectories", "judge_trajectories": "rejections",
                 "publish_dataset": "rejections", "synthesize_queries": "rejections"}  # fmt: skip


class QualityReportLink(BaseOperatorLink):
    """ "Quality report" on every task that writes one: opens that task's report of that run, inside the UI."""

    name = "Quality report"

    def get_link(self, operator, *, ti_key) -> str:
        if operator.task_id not in REPORTING_TASKS:
            return ""
        return framed_report_url(ti_key.dag_id, ti_key.run_id, ti_key.task_id)


class SampleViewerLink(BaseOperatorLink):
    """ "Samples" on the tasks of the stages that sample, judge and publish: that run in the sample viewer, inside
    the UI. The judge's link opens its rejections; the trajectories it did not select are a list of their own."""

    name = "Samples"

    def get_link(self, operator, *, ti_key) -> str:
        kind = SAMPLING_DAGS.get(ti_key.dag_id)
        return in_frame(viewer_run_url(ti_key.run_id, kind), VIEWER_ROUTE) if kind else ""


class BackfillChainLink(BaseOperatorLink):
    """ "Backfill across the chain" on every task of an ingest run: each stage run its Asset events woke, their
    counts and rejections, and the release its samples reached (Airflow's own Asset Events tab shows one hop)."""

    name = "Backfill across the chain"

    def get_link(self, operator, *, ti_key) -> str:
        return framed_backfill_url(ti_key.dag_id, ti_key.run_id) if ti_key.dag_id.startswith("ingest_") else ""


class DatamindReportsPlugin(AirflowPlugin):
    name = "datamind_reports"
    fastapi_apps = [{"app": create_app(), "url_prefix": PREFIX, "name": "DataMind quality reports"}]
    fastapi_root_middlewares = [{"middleware": ApiWording, "name": "DataMind wording of form refusals and reviews"}]
    global_operator_extra_links = [QualityReportLink(), SampleViewerLink(), BackfillChainLink()]
    external_views = [
        {
            "name": "Quality reports",
            "href": f"{PREFIX}/reports/",
            "destination": "nav",
            "url_route": REPORTS_ROUTE,
        },
        {
            "name": "Sample viewer",
            "href": f"{VIEWER}/",
            "destination": "nav",
            "url_route": VIEWER_ROUTE,
        },
    ]
