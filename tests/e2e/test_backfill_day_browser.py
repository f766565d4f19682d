"""A data engineer's day, in a real browser against a real Airflow, on the shortest real path: a first source (one
CSV file) is ingested and goes down the chain to release v1, which someone approved earlier in the day; then a
folder of 3 new CSV files is backfilled from ingest_files' form. The chain (profile, synthesize, sample, judge,
publish) runs on its own through the Asset events under the deployment's stage settings (the Airflow Variables,
kept small so the walk fits the suite), so the second backfill redoes nothing for the first source's file. The
ingest run's link opens the backfill's page, which follows it to release v2 with this source's files; the review
gate (every release asks, DATAMIND_APPROVE_EVERY_RELEASE=1) shows what changed since v1: samples added only on the
3 new files, none on the file v1 covered, whose count in the viewer is the same in both releases. The data
engineer approves; the decision reads the same on the gate, the report, the index, the viewer, the backfill's
page, the manifest and the Asset event. Screenshots land in $DATAMIND_SCREENSHOTS (default: the test's tmp folder).
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


def _stage_rows(chain: str) -> list[tuple[str, str, str, str]]:
    """The backfill page's stage table as read off the screen: (stage, state, rows in, rows out), in its order."""
    found = re.findall(r"^(\w+)\t\S+\t(\w+)\t[^\t\n]*\t(\S+)\t(\S+)\t", chain, flags=re.M)
    return [row for row in found if row[0] != "stage"]


def _matching(page, url: str) -> int:
    """How many samples the viewer lists at ``url`` (a release filtered to one file)."""
    page.goto(url)
    return int(re.search(r"^([\d,]+) matching samples$", page.inner_text("body"), flags=re.M)[1].replace(",", ""))


def test_a_backfill_from_the_form_adds_samples_only_from_its_new_files_and_is_approved_at_the_gate(
    standalone,
    browser,  # noqa: F811
):
    base, session, tmp_path = standalone
    t0 = time.monotonic()
    home = tmp_path / "airflow_home"
    root = DataRoot(str(tmp_path / "data"))
    shots = Path(os.environ.get("DATAMIND_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    for dag_id in ("ingest_files", *CHAIN, "train_agent"):  # train_agent stays paused: the decision says so
        wait_for_dag(session, base, dag_id)

    # 1. The deployment's settings, then the chain unpaused; a value of the wrong type is refused in words.
    for dag_id, value in SETTINGS.items():
        r = session.post(
            f"{base}/api/v2/variables", json={"key": f"datamind_settings_{dag_id}", "value": json.dumps(value)},
            timeout=60,
        )  # fmt: skip
        r.raise_for_status()
    for dag_id in ("ingest_files", *CHAIN):
        _set_paused(session, base, dag_id, False)
    refused = session.post(
        f"{base}/api/v2/dags/ingest_files/dagRuns", json={"logical_date": None, "conf": {"min_rows": "ten"}},
        timeout=60,
    )  # fmt: skip
    assert refused.status_code == 400
    assert refused.json()["detail"] == (
        "Minimum rows per table (min_rows) must be a whole number; it was given 'ten'."
    ), refused.text

    def at_the_gate(n: int):
        """Whether the n-th publish_dataset run waits at the review gate (no run of the chain failed)."""
        failed = [(d, r["dag_run_id"]) for d in ("ingest_files", *CHAIN) for r in runs(session, base, d)
                  if r["state"] == "failed"]  # fmt: skip
        assert not failed, failed
        published = _publish_runs(session, base)
        return (
            len(published) >= n
            and _task_states(session, base, "publish_dataset", published[n - 1]["dag_run_id"]).get("review")
            == "awaiting_input"
        )

    # 2. Earlier in the day: a first source, one file, ingested the way the form does it (the same REST route),
    #    goes down the chain to v1, which is approved. Meanwhile the browser signs in.
    first = tmp_path / "first_csvs"
    first.mkdir()
    write_csv(first / "orders.csv", 25)
    started = time.monotonic()
    session.post(
        f"{base}/api/v2/dags/ingest_files/dagRuns",
        json={"logical_date": None, "conf": {"source_uri": str(first), "source_name": "first_csvs"}}, timeout=60,
    ).raise_for_status()  # fmt: skip
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _login(page, base, home)
    blocked = []
    page.on("console", lambda m: "Content Security Policy" in m.text and blocked.append(m.text))

    # the form's own JSON conf with a wrong type is refused in one sentence
    folder = tmp_path / "new_csvs"
    folder.mkdir()
    for name, rows in (("stores.csv", 40), ("returns.csv", 35), ("visits.csv", 30)):
        write_csv(folder / name, rows)
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
    assert len(runs(session, base, "ingest_files")) == 1  # the first source's run only

    _wait(lambda: at_the_gate(1), "the first source's release v1 at the review gate", timeout=420, every=3)
    first_reached = time.monotonic() - started
    # Airflow loses an answer given within a second of the pause: the paused try's executor event then finds
    # the task queued again, fails that try, and the retry asks anew (seen once under the full suite's load).
    # A person is never that quick; the test waits as long as one would.
    time.sleep(5)
    (v1_run,) = _publish_runs(session, base)
    session.patch(
        f"{base}/api/v2/dags/publish_dataset/dagRuns/{quote(v1_run['dag_run_id'], safe='')}/taskInstances/review/-1"
        "/hitlDetails", json={"chosen_options": ["Approve"], "params_input": {"comment": "the first source"}},
        timeout=60,
    ).raise_for_status()  # fmt: skip
    v1 = json.loads(root.read_text("dataset/v1/manifest.json"))
    (old_file,) = v1["changes"]["by_file"]  # a first release: its one file, all of it added
    assert old_file["name"] == "orders.csv" and old_file["after"] == v1["n_samples"] > 0, v1["changes"]

    # 3. Backfill the folder of 3 new files from the form.
    clicked = time.monotonic()
    _trigger_from_form(page, base, "ingest_files", {"source_uri": str(folder), "source_name": "new_csvs"}, None)
    ingest = sorted(runs(session, base, "ingest_files"), key=lambda r: r["run_after"])[-1]
    assert ingest["conf"]["source_uri"] == str(folder)
    _wait(lambda: at_the_gate(2), "the backfill's release v2 at the review gate", timeout=420, every=3)
    reached = time.monotonic() - clicked
    publish_run = _publish_runs(session, base)[1]["dag_run_id"]
    manifest = json.loads(root.read_text("dataset/v2/manifest.json"))
    added = manifest["n_samples"] - v1["n_samples"]
    changes = manifest["changes"]
    assert changes["previous"] == "v1" and added > 0, changes
    assert changes["samples"]["added"] == changes["added_on_new_files"] == added, changes
    assert changes["samples"]["dropped"] == changes["added_on_covered_files"] == 0, changes

    # 4. The ingest run's link opens the backfill's page inside the UI: every stage run, to the release. Its
    #    profiling and synthesis took the 3 new files only: nothing of the first source's file was done again.
    page.goto(f"{base}/dags/ingest_files/runs/{quote(ingest['dag_run_id'], safe='')}/tasks/publish_catalog/details")
    link = page.get_by_role("link", name="Backfill across the chain", exact=True)
    link.wait_for(timeout=60_000)
    link.click()
    page.wait_for_url("**/plugin/datamind-sample-viewer/**", timeout=30_000)
    framed = page.frame_locator("iframe").locator("body")
    framed.get_by_text("The release its samples reached").wait_for(timeout=30_000)
    chain = framed.inner_text()
    assert "Backfill ingest_files · new_csvs" in chain
    seen = _stage_rows(chain)
    assert [(d, state) for d, state, _, _ in seen] == [
        ("ingest_files", "success"), *((d, "success") for d in CHAIN[:-1]), ("publish_dataset", "running")
    ], chain  # fmt: skip
    stages = {d: (rows_in, rows_out) for d, _, rows_in, rows_out in seen}
    assert stages["profile_files"][0] == stages["synthesize_queries"][0] == "3", chain  # files, tables: the new ones
    assert stages["sample_trajectories"][0] == stages["synthesize_queries"][1], chain  # the queries of those only
    # the judge's rows out are the rows its run wrote, not the judged table v1's samples are in too
    assert added <= int(stages["judge_trajectories"][1]) < added + v1["n_samples"], chain
    assert "Published as v2" in chain and "awaiting_approval" in chain
    assert f"Samples from source new_csvs: 0 → {added} (+{added} / -0)." in chain
    files = re.findall(r"^(\w+\.csv) \(new\)\t0\t(\d+)\t(\d+)\t0$", chain, flags=re.M)
    assert sorted(f for f, _, _ in files) == ["returns.csv", "stores.csv", "visits.csv"], chain
    assert all(after == new for _, after, new in files) and sum(int(a) for _, _, a in files) == added, files
    page.screenshot(path=str(shots / "20-backfill-across-the-chain.png"), full_page=True)
    # the ingest run's quality report leads to the same page (it knows the run by the id its folder has)
    page.goto(f"{base}/datamind/task/ingest_files/{quote(ingest['dag_run_id'], safe='')}/publish_catalog")
    page.get_by_role("link", name="This backfill across the chain").click()
    page.wait_for_url("**/datamind/viewer/backfills/ingest_files/**", timeout=30_000)
    assert f"Samples from source new_csvs: 0 → {added} (+{added} / -0)." in page.inner_text("body")

    # 5. Counts per file before and after, in the viewer: the first source's file holds the same samples in v1
    #    and v2; each new file holds in v2 what the backfill's page says it added.
    for version in ("v1", "v2"):
        shown = _matching(page, f"{base}/datamind/viewer/releases/{version}/?file_id={old_file['file_id']}")
        assert shown == old_file["after"], (version, shown)
        page.screenshot(path=str(shots / f"24-orders-csv-in-{version}.png"), full_page=True)
    for row in changes["by_file"]:
        shown = _matching(page, f"{base}/datamind/viewer/releases/v2/?file_id={row['file_id']}")
        assert shown == dict((f, int(a)) for f, a, _ in files)[row["name"]], (row, shown)

    # 6. What changed since v1, at the gate: samples added on the 3 new files only; approve.
    page.goto(f"{base}/dags/publish_dataset/runs/{quote(publish_run, safe='')}/tasks/review/required_actions")
    page.get_by_role("button", name="Approve").wait_for(timeout=60_000)
    gate = page.inner_text("body")
    n1, n2 = v1["n_samples"], manifest["n_samples"]
    assert (
        f"Since v1: {added} samples added, 0 dropped ({n1} -> {n2}). Of the added: {added} on 3 file(s) new to this "
        "release, 0 on files v1 already covered."
    ) in gate, gate
    for name, _, new in files:  # each new file's row: before 0, after and added what it brought
        assert re.search(rf"{re.escape(name)} \(new\)[\s|]+new\\?_csvs[\s|]+0[\s|]+{new}[\s|]+{new}[\s|]+0", gate), gate
    # the covered file did not change: named once, on the line of files left as they were
    n_old = old_file["after"]
    assert f"1 file unchanged: orders.csv {n_old} -> {n_old}." in gate and gate.count("orders.csv") == 1, gate
    assert "first_csvs" not in gate, gate
    page.locator("#element_comment").fill("3 new files, nothing redone")
    page.screenshot(path=str(shots / "21-gate-what-changed-since-v1.png"), full_page=True)
    page.get_by_role("button", name="Approve").click()
    _wait(lambda: _task_states(session, base, "publish_dataset", publish_run).get("promote") == "success", "promotion")

    # 7. The decision, the same everywhere.
    decided = json.loads(root.read_text("dataset/v2/manifest.json"))["promotion"]
    assert decided["status"] == "promoted" and decided["comment"] == "3 new files, nothing redone"
    said = f"promoted: approved by {decided['decided_by']} at {decided['decided_at']}"
    page.goto(f"{base}/dags/publish_dataset/runs/{quote(publish_run, safe='')}/tasks/review/required_actions")
    page.get_by_text("Decided: approved").wait_for(timeout=30_000)
    gate = page.inner_text("body")
    assert f"Decided: approved by {decided['decided_by']}" in gate and "3 new files, nothing redone" in gate
    assert "but train_agent is paused" in gate and "(unpaused)" not in gate, gate  # it was never unpaused here
    page.screenshot(path=str(shots / "22-gate-after-the-decision.png"), full_page=True)
    for name, url in (
        ("report", f"{base}/datamind/task/publish_dataset/{quote(publish_run, safe='')}/publish"),
        ("index", f"{base}/datamind/reports/"),
        ("viewer-release", f"{base}/datamind/viewer/releases/v2/"),
        ("viewer-home", f"{base}/datamind/viewer/"),
        ("backfill", f"{base}/datamind/viewer/backfills/ingest_files/{quote(ingest['dag_run_id'], safe='')}/"),
    ):
        page.goto(url)
        shown = page.inner_text("body")
        assert said in shown and "awaiting_approval" not in shown, (name, shown)
        if name in ("report", "viewer-release"):  # the what-changed view names the file v2 left alone
            assert f"1 file unchanged: orders.csv {n_old} → {n_old}." in " ".join(shown.split()), (name, shown)
        if name == "backfill":  # the release's row: all its samples out, and how many of them the backfill brought
            assert f"({added} new)" in shown, shown
        page.screenshot(path=str(shots / f"23-decision-{name}.png"), full_page=True)
    # the release's page leads back to the backfill that fed it
    page.goto(f"{base}/datamind/viewer/releases/v2/")
    assert "Backfills that fed it" in page.inner_text("body")
    events = session.get(f"{base}/api/v2/assets/events", params={"source_dag_id": "publish_dataset"}, timeout=60)
    extra = next(e["extra"] for e in events.json()["asset_events"] if e["extra"].get("version") == "v2")
    assert extra["promoted_by"] == decided["decided_by"]
    assert blocked == [], blocked
    print(
        f"\nfirst source: trigger to v1 at the gate {first_reached:.0f} s; backfill: form click to v2 at the gate "
        f"{reached:.0f} s; whole test {time.monotonic() - t0:.0f} s"
    )
    print(f"screenshots: {sorted(str(p) for p in shots.glob('2*.png'))}")
