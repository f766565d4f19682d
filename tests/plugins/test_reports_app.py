"""The reports plugin's app (mounted by the api-server at /datamind): every report reachable by URL, a task's
link lands on the report it wrote, paths cannot leave reports/, and nothing is served without a login."""

from __future__ import annotations

import airflow  # noqa: F401  (puts the plugins folder on sys.path, as in a deployment)
import pytest
from fastapi.testclient import TestClient

from datamind.quality import validate_table
from datamind.storage import DataRoot
from datamind_airflow import reports_app, urls

RUN = "manual__2026-11-24T07:00:00+00:00"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> DataRoot:
    return DataRoot(str(tmp_path_factory.mktemp("reports-app")))


@pytest.fixture(scope="module")
def report(root):
    import pandas as pd

    rows = pd.DataFrame(
        {
            "item_id": ["a", "b", "c"],
            "stage": ["synthesis"] * 3,
            "reason_code": ["chain_hop_skipped", "reference_failed", "reference_failed"],
            "reason": ["hop 2 failed", "NameError: df2", "ZeroDivisionError"],
            "created_at": pd.Timestamp("2026-11-24", tz="UTC"),
            "run_id": RUN,
        }
    )
    origin = {"dag_id": "synthesize_queries", "task_id": "publish"}
    return validate_table(root, "rejections", rows, RUN, "synth_rejections", origin=origin, counts={"n_queries": 7})


@pytest.fixture()
def client(root, report, monkeypatch):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", root.url)
    app = reports_app.create_app()
    app.dependency_overrides[reports_app._logged_in] = lambda: None
    return TestClient(app)


def test_index_report_and_files_are_served_from_the_data_root(client, report):
    index = client.get("/reports/")
    assert index.status_code == 200 and "synth_rejections" in index.text
    run_dir = report.report_dir.split("/", 1)[1]
    page = client.get(f"/reports/{run_dir}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<b>reference_failed</b></td><td class='num'>2</td>" in page.text and "NameError: df2" in page.text
    summary = client.get(f"/reports/{run_dir}/summary.json")
    assert summary.status_code == 200 and summary.json()["origin"]["dag_id"] == "synthesize_queries"


def test_a_tasks_link_lands_on_its_report(client, report):
    url = urls.task_report_url("synthesize_queries", RUN, "publish")
    assert url.startswith(urls.PREFIX + "/task/")
    hop = client.get(url.removeprefix(urls.PREFIX), follow_redirects=False)
    assert hop.status_code == 307 and hop.headers["location"].endswith(
        "/synth_rejections/" + report.report_dir.split("/")[-1] + "/"
    )
    missing = client.get(f"/task/synthesize_queries/{RUN}/plan")
    assert missing.status_code == 404 and "has not written a quality report" in missing.text


@pytest.mark.parametrize("path", ["../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd", "x/../../secrets.json"])
def test_paths_cannot_leave_the_reports_folder(client, path):
    assert client.get(f"/reports/{path}").status_code == 404


def test_nothing_is_served_without_a_login(root, report, monkeypatch):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", root.url)
    anonymous = TestClient(reports_app.create_app())
    assert anonymous.get("/reports/").status_code == 401
    assert anonymous.get(urls.task_report_url("d", RUN, "publish").removeprefix("/datamind")).status_code == 401


def test_the_link_shows_only_on_tasks_that_write_a_report():
    from types import SimpleNamespace

    from datamind_reports_plugin import QualityReportLink

    key = SimpleNamespace(dag_id="profile_files", run_id=RUN, task_id="publish")
    link = QualityReportLink()
    assert link.get_link(SimpleNamespace(task_id="publish"), ti_key=key).startswith(
        "/plugin/datamind-quality-reports/datamind/task/profile_files/"
    )
    assert link.get_link(SimpleNamespace(task_id="plan"), ti_key=key) == ""


def test_a_tasks_links_open_the_report_and_the_viewer_inside_the_airflow_ui_as_the_navigation_does():
    """Issue 47: the report left the Airflow frame while the viewer stayed in it. Both links go to the UI page
    that frames them (/plugin/<the navigation entry's route>/<our path>), the route of the entry of the same page."""
    from types import SimpleNamespace

    from datamind_reports_plugin import DatamindReportsPlugin, QualityReportLink, SampleViewerLink

    routes = {v["href"]: v["url_route"] for v in DatamindReportsPlugin.external_views}
    key = SimpleNamespace(dag_id="judge_trajectories", run_id=RUN, task_id="publish")
    report = QualityReportLink().get_link(SimpleNamespace(task_id="publish"), ti_key=key)
    samples = SampleViewerLink().get_link(SimpleNamespace(task_id="publish"), ti_key=key)
    assert report == f"/plugin/{routes['/datamind/reports/']}" + urls.task_report_url(
        "judge_trajectories", RUN, "publish"
    )
    assert samples == f"/plugin/{routes['/datamind/viewer/']}" + urls.viewer_run_url(RUN, "rejections")
