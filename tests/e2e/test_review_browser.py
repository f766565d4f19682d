"""Review before training, in a real browser against a real Airflow: a release that passes its audit wakes
train_agent at once; one that misses a threshold waits. The data engineer opens its report, follows it into
the sample viewer, filters to one category and hop, reads a sample (question, code cell, answer) and a
rejected one (its reason), then approves the release in the UI, and train_agent starts on it. Screenshots
land in $DATAMIND_SCREENSHOTS (default: the test's tmp folder).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from e2e_helpers import runs, wait_for_dag
from review.release_builder import sample_row
from test_ui_browser import _login, browser  # noqa: F401  (the browser fixture)

from datamind.agent.protocol import format_answer_turn
from datamind.assets import DIRS
from datamind.schemas import DATASET
from datamind.shards import write_shard
from datamind.storage import DataRoot

pytestmark = [pytest.mark.scheduler, pytest.mark.timeout(900)]


def _judged(root: DataRoot, rows: list[dict], name: str) -> None:
    if not root.exists("raw/f1/orders.csv"):
        root.write_text("raw/f1/orders.csv", "city,amount\nLyon,1\n")
    for r in rows:
        r["data_uri"] = "raw/f1/orders.csv"
    write_shard(root, DATASET, DIRS["judged"], rows, name)


def _set_paused(session, base: str, dag_id: str, paused: bool) -> None:
    r = session.patch(f"{base}/api/v2/dags/{dag_id}", json={"is_paused": paused}, timeout=60)
    r.raise_for_status()


def _trigger(session, base: str, dag_id: str) -> str:
    r = session.post(f"{base}/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None}, timeout=60)
    r.raise_for_status()
    return r.json()["dag_run_id"]


def _task_states(session, base: str, dag_id: str, run_id: str) -> dict[str, str]:
    r = session.get(f"{base}/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances", timeout=60)
    r.raise_for_status()
    return {t["task_id"]: t["state"] for t in r.json()["task_instances"]}


def _wait(predicate, what: str, timeout: float = 300, every: float = 2.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what} (last seen: {last})")


def test_a_missed_threshold_waits_for_a_person_who_reviews_and_approves_it(standalone, browser):  # noqa: F811
    base, session, tmp_path = standalone
    home = tmp_path / "airflow_home"
    root = DataRoot(str(tmp_path / "data"))
    shots = Path(os.environ.get("DATAMIND_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    for dag_id in ("publish_dataset", "train_agent"):
        wait_for_dag(session, base, dag_id)
        _set_paused(session, base, dag_id, False)

    # 1. A release that meets every threshold is promoted without waiting: train_agent starts on it.
    rng = random.Random(7)
    _judged(root, [sample_row(i, rng) for i in range(60)], "part-clean.parquet")
    first = _trigger(session, base, "publish_dataset")
    states = _wait(
        lambda: (
            (s := _task_states(session, base, "publish_dataset", first)).get("promote") in ("success", "failed") and s
        ),
        "the first release's promotion",
    )
    assert states["promote"] == "success" and states["review"] == "skipped", states
    _wait(
        lambda: len(started := runs(session, base, "train_agent")) == 1 and started[0]["start_date"],
        "train_agent to start on v1",
    )
    # Training itself is not this test's business (no GPU pool here): end that run, so the next release's
    # event can start another one (train_agent runs one at a time).
    (trained,) = runs(session, base, "train_agent")
    r = session.patch(
        f"{base}/api/v2/dags/train_agent/dagRuns/{quote(trained['dag_run_id'], safe='')}",
        json={"state": "failed"},
        timeout=60,
    )
    r.raise_for_status()

    # 2. A release missing a threshold (doubled words) is published but waits for a person.
    flawed = [sample_row(i, rng, flawed=True) for i in range(60, 180)]
    # mojibake in the answer: the filters reject this one, with a reason
    flawed[5]["final_answer"] = "cafÃ© au lait"
    flawed[5]["messages"][-1]["content"] = format_answer_turn("So the place is the cafe.", "cafÃ© au lait")
    _judged(root, flawed, "part-flawed.parquet")
    second = _trigger(session, base, "publish_dataset")
    _wait(
        lambda: _task_states(session, base, "publish_dataset", second).get("review") in ("awaiting_input", "deferred"),
        "the review task to wait for a person",
    )
    manifest = json.loads(root.read_text("dataset/v2/manifest.json"))
    assert manifest["promotion"]["status"] == "awaiting_approval"
    assert manifest["promotion"]["failing"] == ["repeated_word_question_share"]
    time.sleep(5)
    assert len(runs(session, base, "train_agent")) == 1  # nothing trains on v2 meanwhile

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    _login(page, base, home)
    # the plugin's pages run under a policy that allows no script and only their own styles: the browser
    # reports anything of theirs it blocked (a style it refused would leave a page unstyled)
    blocked = []
    page.on("console", lambda m: "Content Security Policy" in m.text and blocked.append(m.text))

    # 3. The release's report opens with its audit and leads into the viewer.
    opened = page.goto(f"{base}/datamind/task/publish_dataset/{quote(second, safe='')}/publish")
    page.wait_for_url("**/datamind/reports/**", timeout=30_000)
    headers = opened.all_headers()
    assert "frame-ancestors 'self'" in headers["content-security-policy"], headers
    assert headers["x-content-type-options"] == "nosniff" and headers["x-frame-options"] == "SAMEORIGIN"
    report = page.inner_text("body")
    assert "Release v2 audit: misses 1: repeated_word_question_share" in report
    assert "awaiting_approval" in report
    # what changed since v1, read off the screen: 120 new samples, the mojibake one filtered, all on v1's files
    headline = (
        "Since v1: 119 samples added, 0 dropped (60 -> 179). Of the added: 0 on 0 file(s) new to this release, "
        "119 on files v1 already covered."
    )
    assert "What changed since v1" in report and headline in report, report
    assert "Audit figures that moved" in report and "now misses" in report
    page.screenshot(path=str(shots / "10-release-report-audit.png"), full_page=True)
    page.get_by_role("link", name="browse its samples").click()
    page.wait_for_url("**/datamind/viewer/releases/v2/**", timeout=30_000)
    release_page = page.inner_text("body")
    assert headline in release_page and "Quality report of this release" in release_page
    page.screenshot(path=str(shots / "11-viewer-release.png"), full_page=True)
    # the task's link opens the same report inside the Airflow UI, as the navigation entry does
    page.goto(f"{base}/plugin/datamind-quality-reports/datamind/task/publish_dataset/{quote(second, safe='')}/publish")
    framed = page.frame_locator("iframe").locator("body")
    framed.get_by_text("What changed since v1").wait_for(timeout=30_000)
    assert headline in framed.inner_text()
    page.screenshot(path=str(shots / "11b-report-in-the-airflow-frame.png"), full_page=True)
    page.goto(f"{base}/datamind/viewer/releases/v2/")

    # 4. Filter to one category and hop, open a sample, read it as a conversation.
    page.select_option("select[name=category]", "aggregation")
    page.select_option("select[name=hop]", "1")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**category=aggregation**", timeout=30_000)
    listing = page.inner_text("body")
    shown = int(listing.split(" matching samples")[0].rsplit("\n", 1)[-1].replace(",", ""))
    assert shown > 0
    assert all(row.split("\t")[1:3] == ["aggregation", "1"] for row in listing.splitlines() if row.startswith("s0"))
    page.screenshot(path=str(shots / "12-viewer-filtered.png"), full_page=True)
    page.locator("table").last.locator("a[href*='/samples/']").first.click()  # the first listed sample
    page.wait_for_url("**/samples/**", timeout=30_000)
    sample = page.inner_text("body")
    assert "mean amount for" in sample and "(item " in sample
    assert "pd.read_csv" in sample and page.locator(".turn.assistant .highlight").count() >= 1
    assert page.locator(".answer").count() == 1 and "reference answer" in sample
    page.screenshot(path=str(shots / "13-viewer-sample.png"), full_page=True)

    # 5. The run's rejections: the mojibake sample and why it was dropped.
    page.goto(f"{base}/datamind/viewer/runs/{quote(second, safe='')}/rejections/")
    page.get_by_role("link", name=flawed[5]["sample_id"][:14]).click()
    page.wait_for_url("**/rejections/**", timeout=30_000)
    rejected = page.inner_text("body")
    assert "mojibake" in rejected and "The sample as judged" in rejected
    page.screenshot(path=str(shots / "14-viewer-rejection.png"), full_page=True)
    assert page.locator(".turn.assistant .highlight .kn").first.evaluate("e => getComputedStyle(e).color") != (
        page.locator(".turn.assistant .highlight").first.evaluate("e => getComputedStyle(e).color")
    )  # the highlighting's stylesheet applied
    assert blocked == [], blocked

    # 6. Approve in the UI (the review task's required action); train_agent starts on v2.
    page.goto(f"{base}/dags/publish_dataset/runs/{second}/tasks/review/required_actions")
    page.get_by_role("button", name="Approve").wait_for(timeout=60_000)
    gate = page.inner_text("body")
    assert "What changed." in gate and "119 on files v1 already covered" in gate, gate
    assert "not trained on until someone approves it" not in gate
    comment = page.locator("#element_comment")
    if comment.count():
        comment.fill("doubled words in 3 questions: acceptable for this run")
    page.screenshot(path=str(shots / "15-approval.png"), full_page=True)
    page.get_by_role("button", name="Approve").click()
    _wait(
        lambda: _task_states(session, base, "publish_dataset", second).get("promote") in ("success", "failed"),
        "the promotion after approval",
    )
    assert _task_states(session, base, "publish_dataset", second)["promote"] == "success"
    # started, not only queued (the events API also fails on an event whose run has no start date yet)
    _wait(
        lambda: len(started := runs(session, base, "train_agent")) == 2 and all(r["start_date"] for r in started),
        "train_agent to start on v2",
    )
    decided = json.loads(root.read_text("dataset/v2/manifest.json"))["promotion"]
    assert decided["status"] == "promoted" and decided["decided_by"]
    assert "decided by" in root.read_text("dataset/v2/README.md")
    # the decision, shown the same in the report, the report index, the viewer and on disk
    said = f"promoted: approved by {decided['decided_by']} at {decided['decided_at']}"
    for name, url in (
        ("report", f"{base}/datamind/task/publish_dataset/{quote(second, safe='')}/publish"),
        ("index", f"{base}/datamind/reports/"),
        ("viewer release", f"{base}/datamind/viewer/releases/v2/"),
        ("viewer home", f"{base}/datamind/viewer/"),
    ):
        page.goto(url)
        shown = page.inner_text("body")
        assert said in shown and "awaiting_approval" not in shown, (name, shown)
        page.screenshot(path=str(shots / f"17-decision-{name.replace(' ', '-')}.png"), full_page=True)
    assert "awaiting_approval" not in root.read_text("reports/index.html")
    page.goto(f"{base}/dags/publish_dataset/runs/{second}/tasks/review/required_actions")
    page.get_by_text(decided["decided_by"]).first.wait_for(timeout=30_000)  # Airflow: "response received ... from"
    page.screenshot(path=str(shots / "18-approval-after-the-decision.png"), full_page=True)
    event = session.get(f"{base}/api/v2/assets/events", params={"source_dag_id": "publish_dataset"}, timeout=60)
    extras = [e["extra"] for e in event.json()["asset_events"]]
    assert {e.get("version") for e in extras} == {"v1", "v2"}
    assert {e.get("audit_verdict") for e in extras} == {"pass", "miss"}
    page.goto(f"{base}/dags/train_agent")
    page.screenshot(path=str(shots / "16-train-agent-started.png"), full_page=True)
    print(f"\nscreenshots: {sorted(str(p) for p in shots.glob('1*.png'))}")
