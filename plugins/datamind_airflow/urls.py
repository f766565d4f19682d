"""Where the plugin serves what: the one definition of its URLs, for task code, the plugin's links and its app
alike (task code builds links without importing the web app)."""

from __future__ import annotations

from urllib.parse import quote

PREFIX = "/datamind"
VIEWER = f"{PREFIX}/viewer"
# The navigation entries' routes: the Airflow UI shows /plugin/<route>/<one of our paths> with that path framed
# inside the UI (its menus around it), as it shows the entries themselves.
REPORTS_ROUTE = "datamind-quality-reports"
VIEWER_ROUTE = "datamind-sample-viewer"


def in_frame(url: str, route: str) -> str:
    """The Airflow UI page that shows ``url`` (a path of this plugin) inside the UI, as its ``route`` navigation
    entry does: a task's links open the report and the viewer in the same frame as the navigation, never in a
    bare page that leaves the UI."""
    return f"/plugin/{route}{url}"


def task_report_url(dag_id: str, run_id: str, task_id: str) -> str:
    return f"{PREFIX}/task/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{quote(task_id, safe='')}"


def framed_report_url(dag_id: str, run_id: str, task_id: str) -> str:
    """The task's report inside the Airflow UI: what its extra link, its Asset event and a review panel link."""
    return in_frame(task_report_url(dag_id, run_id, task_id), REPORTS_ROUTE)


def framed_release_url(version_id: str) -> str:
    """A release's page of the sample viewer inside the Airflow UI."""
    return in_frame(f"{VIEWER}/releases/{quote(version_id, safe='')}/", VIEWER_ROUTE)


def framed_backfill_url(dag_id: str, run_id: str) -> str:
    """An ingest run followed across the chain it woke, inside the Airflow UI."""
    from datamind.quality.viewer_links import Links

    return in_frame(Links(VIEWER).backfill(dag_id, run_id), VIEWER_ROUTE)


def viewer_run_url(run_id: str, kind: str) -> str:
    from datamind.quality.viewer_links import Links

    return Links(VIEWER).run(run_id, kind)
