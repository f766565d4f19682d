"""A data engineer's day, in a real browser against a real Airflow, on the shortest real path: a folder of 3 new
CSV files is backfilled from ingest_files' form; the chain (profile, synthesize, sample, judge, publish) runs on
its own through the Asset events under the deployment's stage settings (the Airflow Variables, kept small so the
walk fits the suite); the ingest run's link opens the backfill's page, which follows it to the release with this
source's files; the review gate (every release asks, DATAMIND_APPROVE_EVERY_RELEASE=1) shows what the release
holds; the data engineer approves; the decision reads the same on the gate, the report, the index, the viewer,
the backfill's page, the manifest and the Asset event. Screenshots land in $DATAMIND_SCREENSHOTS (default: the
test's tmp folder).

The shortest path has one backfill, so its release is the first: a second release's comparison with the one before
(samples added on new files and on covered ones) is read off the screen in test_review_browser, and a backfill
that leaves covered files alone is tests/dags' business.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from e2e_helpers import runs, standalone_airflow, wait_for_dag, write_csv
from test_review_browser import _set_paused, _task_states, _wait
from test_ui_browser import _login, _trigger_from_form, browser  # noqa: F401  (the browser fixture)

from datamind.storage import DataRoot

pytestmark = [pytest.mark.scheduler, pytest.mark.timeout(900)]

CHAIN = ("profile_files", "synthesize_queries", "sample_trajectories", "judge_trajectories", "publish_dataset")
# The deployment's stage settings (datamind.stage_settings): few questions, short trajectories, so the whole
# chain runs in about a minute; every Asset-triggered run reads them, none gets a conf.
SETTINGS = {
    "synthesize_queries": {"categories": ["aggregation", "counting", "ranking"], "queries_per_category": 1,
                           "n_chains": 0},
    "sample_trajectories": {"n_samples": 2, "max_turns": 4},
    "judge_trajectories": {"reflection_rounds": 0},
}  # fmt: skip


@pytest.fixture
def standalone(tmp_path):
    with standalone_airflow(tmp_path, DATAMIND_APPROVE_EVERY_RELEASE="1") as running:
        yield running


def _publish_runs(session, base: str) -> list[dict]:
    return sorted(runs(session, base, "publish_dataset"), key=lambda r: r["run_after"])


def test_a_backfill_from_the_form_reaches_a_release_that_is_reviewed_and_approved(standalone, browser):  # noqa: F811
    base, session, tmp_path = standalone
    t0 = time.monotonic()
    home = tmp_path / "airflow_home"
    root = DataRoot(str(tmp_path / "data"))
    shots = Path(os.environ.get("DATAMIND_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    for dag_id in ("ingest_files", *CHAIN):
        wait_for_dag(session, base, dag_id)

    # 1. The deployment's settings, then the chain unpaused; a value of the wrong type is refused in words.
    for dag_id, value in SETTINGS.items():
        r = session.post(
            f"{base}/api/v2/variables", json={"key": f"datamind_settings_{dag_id}", "value": json.dumps(value)},
            timeout=60,
        )  # fmt: skip
        r.raise_for_status()
    for dag_id in CHAIN:
        _set_paused(session, base, dag_id, False)
    refused = session.post(
        f"{base}/api/v2/dags/ingest_files/dagRuns", json={"logical_date": None, "conf": {"min_rows": "ten"}},
        timeout=60,
    )  # fmt: skip
    assert refused.status_code == 400
    assert refused.json()["detail"] == (
        "Minimum rows per table (min_rows) must be a whole number; it was given 'ten'."
    ), refused.text

    # 2. Backfill a new folder of 3 CSV files from the form.
    folder = tmp_path / "new_csvs"
    folder.mkdir()
    for name, rows in (("stores.csv", 40), ("returns.csv", 35), ("visits.csv", 30)):
        write_csv(folder / name, rows)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _login(page, base, home)
    blocked = []
    page.on("console", lambda m: "Content Security Policy" in m.text and blocked.append(m.text))
    clicked = time.monotonic()
    _trigger_from_form(page, base, "ingest_files", {"source_uri": str(folder), "source_name": "new_csvs"}, True)
    (ingest,) = runs(session, base, "ingest_files")

    # while the chain runs: the form's own JSON conf with a wrong type is refused in one sentence
    page.goto(f"{base}/dags/ingest_files")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Run Parameters").wait_for(timeout=30_000)
    dialog.get_by_text("Advanced Options").click()
    editor = dialog.locator(".monaco-editor").first  # the conf as JSON (Monaco): typed as a person pastes it
    editor.wait_for(timeout=30_000)
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(json.dumps({"source_uri": str(folder), "source_name": "new_csvs", "min_rows": "ten"}))
    dialog.get_by_role("button", name="Trigger").click()
    dialog.get_by_text("Minimum rows per table (min_rows) must be a whole number; it was given 'ten'.").wait_for(
        timeout=30_000
    )
    assert "Failed validating" not in dialog.inner_text()
    page.screenshot(path=str(shots / "19-form-refuses-a-wrong-type.png"), full_page=True)
    assert len(runs(session, base, "ingest_files")) == 1  # the backfill's run only

    def at_the_gate():
        failed = [(d, r["dag_run_id"]) for d in ("ingest_files", *CHAIN) for r in runs(session, base, d)
                  if r["state"] == "failed"]  # fmt: skip
        assert not failed, failed
        published = _publish_runs(session, base)
        return (
            published
            and _task_states(session, base, "publish_dataset", published[0]["dag_run_id"]).get("review")
            == "awaiting_input"
        )

    _wait(at_the_gate, "the backfill's release at the review gate", timeout=420, every=3)
    reached = time.monotonic() - clicked
    (published,) = _publish_runs(session, base)
    publish_run = published["dag_run_id"]
    manifest = json.loads(root.read_text("dataset/v1/manifest.json"))
    added = manifest["n_samples"]
    assert added > 0 and manifest["changes"]["samples"]["added"] == added

    # 3. The ingest run's link opens the backfill's page inside the UI: every stage run, to the release.
    page.goto(f"{base}/dags/ingest_files/runs/{quote(ingest['dag_run_id'], safe='')}/tasks/publish_catalog/details")
    link = page.get_by_role("link", name="Backfill across the chain", exact=True)
    link.wait_for(timeout=60_000)
    link.click()
    page.wait_for_url("**/plugin/datamind-sample-viewer/**", timeout=30_000)
    framed = page.frame_locator("iframe").locator("body")
    framed.get_by_text("The release its samples reached").wait_for(timeout=30_000)
    chain = framed.inner_text()
    assert "Backfill ingest_files · new_csvs" in chain
    stages = [s for s in re.findall(r"^(\w+)\t\S+\t(\w+)\t", chain, flags=re.M) if s[0] != "stage"]
    assert stages == [("ingest_files", "success"), *((d, "success") for d in CHAIN[:-1]),
                      ("publish_dataset", "running")], chain  # fmt: skip
    assert "Published as v1" in chain and "awaiting_approval" in chain
    assert f"Samples from source new_csvs: 0 → {added} (+{added} / -0)." in chain
    files = re.findall(r"^(\w+\.csv)\t0\t(\d+)\t(\d+)\t0$", chain, flags=re.M)
    assert sorted(f for f, _, _ in files) == ["returns.csv", "stores.csv", "visits.csv"], chain
    assert sum(int(a) for _, _, a in files) == added
    page.screenshot(path=str(shots / "20-backfill-across-the-chain.png"), full_page=True)
    # the ingest run's quality report leads to the same page (it knows the run by the id its folder has)
    page.goto(f"{base}/datamind/task/ingest_files/{quote(ingest['dag_run_id'], safe='')}/publish_catalog")
    page.get_by_role("link", name="This backfill across the chain").click()
    page.wait_for_url("**/datamind/viewer/backfills/ingest_files/**", timeout=30_000)
    assert f"Samples from source new_csvs: 0 → {added} (+{added} / -0)." in page.inner_text("body")

    # 4. What changed, at the gate; approve.
    page.goto(f"{base}/dags/publish_dataset/runs/{quote(publish_run, safe='')}/tasks/review/required_actions")
    page.get_by_role("button", name="Approve").wait_for(timeout=60_000)
    gate = page.inner_text("body")
    assert f"First release: {added} samples from 3 files." in gate
    page.locator("#element_comment").fill("3 new files, nothing redone")
    page.screenshot(path=str(shots / "21-gate-what-changed.png"), full_page=True)
    page.get_by_role("button", name="Approve").click()
    _wait(lambda: _task_states(session, base, "publish_dataset", publish_run).get("promote") == "success", "promotion")

    # 5. The decision, the same everywhere.
    decided = json.loads(root.read_text("dataset/v1/manifest.json"))["promotion"]
    assert decided["status"] == "promoted" and decided["comment"] == "3 new files, nothing redone"
    said = f"promoted: approved by {decided['decided_by']} at {decided['decided_at']}"
    page.goto(f"{base}/dags/publish_dataset/runs/{quote(publish_run, safe='')}/tasks/review/required_actions")
    page.get_by_text("Decided: approved").wait_for(timeout=30_000)
    gate = page.inner_text("body")
    assert f"Decided: approved by {decided['decided_by']}" in gate and "3 new files, nothing redone" in gate
    page.screenshot(path=str(shots / "22-gate-after-the-decision.png"), full_page=True)
    for name, url in (
        ("report", f"{base}/datamind/task/publish_dataset/{quote(publish_run, safe='')}/publish"),
        ("index", f"{base}/datamind/reports/"),
        ("viewer-release", f"{base}/datamind/viewer/releases/v1/"),
        ("viewer-home", f"{base}/datamind/viewer/"),
        ("backfill", f"{base}/datamind/viewer/backfills/ingest_files/{quote(ingest['dag_run_id'], safe='')}/"),
    ):
        page.goto(url)
        shown = page.inner_text("body")
        assert said in shown and "awaiting_approval" not in shown, (name, shown)
        page.screenshot(path=str(shots / f"23-decision-{name}.png"), full_page=True)
    # the release's page leads back to the backfill that fed it
    page.goto(f"{base}/datamind/viewer/releases/v1/")
    assert "Backfills that fed it" in page.inner_text("body")
    events = session.get(f"{base}/api/v2/assets/events", params={"source_dag_id": "publish_dataset"}, timeout=60)
    extra = next(e["extra"] for e in events.json()["asset_events"] if e["extra"].get("version") == "v1")
    assert extra["promoted_by"] == decided["decided_by"]
    assert blocked == [], blocked
    print(
        f"\nbackfill: form click to the release at the gate {reached:.0f} s; whole test {time.monotonic() - t0:.0f} s"
    )
    print(f"screenshots: {sorted(str(p) for p in shots.glob('2*.png'))}")
