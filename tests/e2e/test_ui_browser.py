"""The data engineer's day in a real browser: headless Chromium (the Debian package, driven by Playwright)
against a real Airflow. Log in, trigger every DAG from its own form with its defaults, run ingest_files on a
folder, follow the task's "Quality report" link to the report and read it; the Asset event carries the run's
numbers and the report's URL. Screenshots land in $DATAMIND_SCREENSHOTS (default: the test's tmp folder).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

import pytest
from e2e_helpers import runs, wait_for_dag, write_csv

pytestmark = [pytest.mark.scheduler, pytest.mark.timeout(600)]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DAGS = (
    "ingest_files",
    "ingest_bird",
    "ingest_kaggle",
    "profile_files",
    "synthesize_queries",
    "sample_trajectories",
    "judge_trajectories",
    "publish_dataset",
    "train_agent",
    "evaluate_agent",
)


@pytest.fixture
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium on this machine (scripts/install_system_deps.sh installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@contextlib.contextmanager
def _same_tab():
    yield None


def _login(page, base: str, home: Path) -> None:
    import json

    user, password = next(iter(json.loads((home / "simple_auth_manager_passwords.json.generated").read_text()).items()))
    page.goto(base + "/")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(base + "/", timeout=60_000)


def _trigger_from_form(page, base: str, dag_id: str, fields: dict[str, str], unpause: bool | None) -> None:
    """unpause: tick or untick the form's "Unpause ... on trigger" box; None for a DAG already unpaused (the
    form shows no such box then)."""
    page.goto(f"{base}/dags/{dag_id}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Run Parameters").wait_for(timeout=30_000)
    for element_id, value in fields.items():
        dialog.locator(f"#element_{element_id}").fill(value)
    if unpause is not None and dialog.get_by_role("checkbox").first.is_checked() != unpause:
        dialog.get_by_text(f"Unpause {dag_id} on trigger").click()
    submit = dialog.get_by_role("button", name="Trigger")
    assert submit.is_enabled(), f"{dag_id}: the form refuses its own defaults"
    submit.click()
    dialog.wait_for(state="hidden", timeout=30_000)


def test_trigger_every_form_run_ingest_and_open_its_report(standalone, browser):
    base, session, tmp_path = standalone
    home = tmp_path / "airflow_home"
    shots = Path(os.environ.get("DATAMIND_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    source = tmp_path / "drop"
    source.mkdir()
    write_csv(source / "sales.csv", 60)
    write_csv(source / "tiny.csv", 5)  # rejected: too few rows
    for dag_id in DAGS:
        wait_for_dag(session, base, dag_id)

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _login(page, base, home)
    page.screenshot(path=str(shots / "01-home.png"))

    # Every DAG's form accepts its defaults; the runs stay queued (DAG left paused) except ingest_files'.
    for dag_id in DAGS:
        fields = {"source_uri": str(source), "source_name": "ui"} if dag_id == "ingest_files" else {}
        _trigger_from_form(page, base, dag_id, fields, unpause=dag_id == "ingest_files")
        created = runs(session, base, dag_id)
        assert len(created) == 1 and created[0]["run_type"] == "manual", (dag_id, created)
        if dag_id == "ingest_files":
            assert created[0]["conf"]["source_uri"] == str(source)
    page.goto(f"{base}/dags/train_agent")
    page.screenshot(path=str(shots / "02-train-agent-triggered.png"))

    deadline = time.monotonic() + 240
    state = None
    while time.monotonic() < deadline:
        state = runs(session, base, "ingest_files")[0]["state"]
        if state in ("success", "failed"):
            break
        time.sleep(2)
    assert state == "success", state
    run_id = runs(session, base, "ingest_files")[0]["dag_run_id"]

    # The task that validated the catalog links to its report ...
    links = session.get(
        f"{base}/api/v2/dags/ingest_files/dagRuns/{run_id}/taskInstances/publish_catalog/links", timeout=60
    ).json()["extra_links"]
    # inside the Airflow UI's frame, as the navigation entry opens it
    assert links["Quality report"].startswith("/plugin/datamind-quality-reports/datamind/task/ingest_files/")
    plan_links = session.get(
        f"{base}/api/v2/dags/ingest_files/dagRuns/{run_id}/taskInstances/plan/links", timeout=60
    ).json()["extra_links"]
    assert not plan_links.get("Quality report")

    # ... which a person follows from the task page in the UI.
    page.goto(f"{base}/dags/ingest_files/runs/{run_id}/tasks/publish_catalog/details")  # the task's Details tab
    link = page.get_by_role("link", name="Quality report", exact=True)
    link.wait_for(timeout=60_000)
    page.screenshot(path=str(shots / "03-task-with-report-link.png"))
    with page.context.expect_page(timeout=5_000) if link.get_attribute("target") == "_blank" else _same_tab() as opened:
        link.click()
    opened_page = opened.value if opened is not None else page
    opened_page.wait_for_url("**/plugin/datamind-quality-reports/**", timeout=30_000)
    report = opened_page.frame_locator("iframe")  # the report, inside the UI's frame
    report.get_by_text("ingest_ui: PASS").first.wait_for(timeout=30_000)
    text = report.locator("body").inner_text()
    assert "too_few_rows" in text and "tiny.csv" in text
    assert report.locator("svg").count() >= 2
    opened_page.screenshot(path=str(shots / "04-quality-report.png"), full_page=True)

    # The nav entry lists it too.
    page.goto(f"{base}/datamind/reports/")
    assert "ingest_ui" in page.inner_text("body")
    page.screenshot(path=str(shots / "05-report-index.png"))

    # The Asset event says what the run did and where its report is.
    events = session.get(f"{base}/api/v2/assets/events", params={"source_dag_id": "ingest_files"}, timeout=60).json()
    extra = events["asset_events"][0]["extra"]
    assert extra["rows_in"] == 2 and extra["rows_out"] == 2 and extra["rejected"] == {"too_few_rows": 1}
    assert extra["report_url"] == links["Quality report"] and extra["version"] == run_id
    print(f"\nscreenshots: {sorted(str(p) for p in shots.glob('*.png'))}")
