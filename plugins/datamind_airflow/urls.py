"""Where the plugin serves what: the one definition of its URLs, for task code, the plugin's links and its app
alike (task code builds links without importing the web app)."""

from __future__ import annotations

from urllib.parse import quote

PREFIX = "/datamind"
VIEWER = f"{PREFIX}/viewer"


def task_report_url(dag_id: str, run_id: str, task_id: str) -> str:
    return f"{PREFIX}/task/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{quote(task_id, safe='')}"


def viewer_run_url(run_id: str, kind: str) -> str:
    from datamind.quality.viewer_links import Links

    return Links(VIEWER).run(run_id, kind)
