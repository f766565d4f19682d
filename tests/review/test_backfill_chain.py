"""One backfill across the chain: the ingest run, each stage run its Asset events woke with its state, counts
and rejections by reason, and the release its samples reached with this source's files; linked from every ingest
task and from the releases it fed. Airflow's records are a stand-in here (the browser test walks real ones)."""

from __future__ import annotations

import airflow  # noqa: F401  (puts the plugins folder on sys.path, as in a deployment)
import pytest
from fastapi.testclient import TestClient
from release_builder import write_release

from datamind.quality.viewer_links import Links
from datamind.review.chain import chain_page
from datamind.storage import DataRoot
from datamind_airflow import reports_app, urls

INGEST = "manual__2026-11-28T10:00:00+00:00"
PUBLISH = "asset_triggered__2026-11-28T10:05:00+00:00"


def _event(asset: str, rows_in: int, rows_out: int, rejected: dict, **extra) -> dict:
    return {"asset": asset, "extra": {"rows_in": rows_in, "rows_out": rows_out, "rejected": rejected, **extra}}


def _run(dag_id: str, run_id: str, state: str, events: list, woken_by: str | None = None) -> dict:
    return {"dag_id": dag_id, "run_id": run_id, "state": state, "events": events, "woken_by": woken_by,
            "run_href": f"/dags/{dag_id}/runs/{run_id}"}  # fmt: skip


WALK = {
    "source": "new_csvs",
    "truncated": False,
    "runs": [
        _run("ingest_files", INGEST, "success",
             [_event("catalog_files", 4, 3, {"too_few_rows": 1}, report_url="/plugin/r/ingest")]),
        _run("profile_files", "p1", "success", [_event("catalog_tables", 3, 3, {})], "ingest_files (catalog_files)"),
        _run("synthesize_queries", "s1", "success",
             [_event("queries", 3, 40, {"reference_failed": 2, "chain_hop_skipped": 5})], "profile_files"),
        # a second event of the same run (a retry that announced again): its counts add up
        _run("sample_trajectories", "t1", "success",
             [_event("trajectories", 20, 60, {"sandbox_error": 1}),
              _event("trajectories", 20, 60, {"sandbox_error": 2})],
             "synthesize_queries"),
        _run("judge_trajectories", "j1", "success",
             [_event("judged", 120, 38, {"no_consensus": 9, "not_selected": 70})]),
        # waiting at the review gate: no dataset event yet, the release is found by the run its manifest records
        _run("publish_dataset", PUBLISH, "running", []),
    ],
}  # fmt: skip


def _changes(version_id: str) -> dict:
    return {
        "headline": "Since v1: 37 samples added, 0 dropped (260 -> 297).",
        "by_source": [{"source": "new_csvs", "before": 0, "after": 37, "added": 37, "dropped": 0},
                      {"source": "samples", "before": 260, "after": 260, "added": 0, "dropped": 0}],
        "by_file": [{"source": "new_csvs", "label": "auto-mpg.csv", "before": 0, "after": 20, "added": 20,
                     "dropped": 0, "new_file": True},
                    {"source": "samples", "label": "old.csv", "before": 9, "after": 9, "added": 0, "dropped": 0}],
    }  # fmt: skip


def _release(version_id: str, run_id: str) -> dict:
    return {"version_id": version_id, "n_samples": 297, "run_id": run_id,
            "promotion": {"status": "awaiting_approval"}}  # fmt: skip


def _text(page: str) -> str:
    import re

    inline = re.sub(r"</?(?:a|b|span)\b[^>]*>", "", page)  # as a browser shows it: cells apart, words together
    return " ".join(re.sub(r"<[^>]+>", " ", inline).split())


def test_each_stage_run_its_counts_and_rejections_and_the_release_reached():
    from datamind.ids import safe_run_id

    page = chain_page(Links("/v"), WALK, [_release("v2", safe_run_id(PUBLISH)), _release("v1", "x")], _changes)
    text = _text(page)
    assert "Backfill ingest_files · new_csvs" in text
    rows = [_text(r) for r in page.split("<tr>")[2:8]]
    assert rows[0].startswith("ingest_files " + INGEST + " success") and "4 3 too_few_rows: 1" in rows[0]
    assert "reference_failed: 2; chain_hop_skipped: 5" not in rows[2]  # largest first
    assert "chain_hop_skipped: 5; reference_failed: 2" in rows[2]
    assert "40 120 sandbox_error: 3" in rows[3]  # two events of one run: summed
    assert "no_consensus: 9 (and 70 fine but not selected" in rows[4] and "not_selected: 70" not in rows[4]
    assert rows[5].startswith("publish_dataset") and "running" in rows[5] and "still running" in rows[5]
    assert "Published as v2 (297 samples)" in text and "awaiting_approval" in text
    assert "Samples from source new_csvs: 0 → 37 (+37 / -0)." in text
    assert "auto-mpg.csv (new) 0 20 20 0" in text and "old.csv" not in text  # only this source's files
    assert "href='/v/releases/v2/'" in page and "target='_top' href='/plugin/r/ingest'" in page


def test_a_chain_that_has_not_reached_a_release_says_so():
    walk = {**WALK, "runs": WALK["runs"][:2]}
    assert "No release yet" in _text(chain_page(Links("/v"), walk, [_release("v1", "other")], _changes))


def test_a_releases_row_says_how_many_of_its_samples_are_new():
    """A release holds every earlier release's samples: its rows out alone read as if the backfill brought them."""
    done = _run("publish_dataset", PUBLISH, "success", [_event("dataset", 12, 12, {}, samples_added=9)])
    page = chain_page(Links("/v"), {**WALK, "runs": [*WALK["runs"][:-1], done]}, [], _changes)
    row = _text(page.split("<tr>")[7])
    assert row.startswith("publish_dataset") and "12 12 (9 new)" in row
    assert "(9 new)" not in _text(page.split("<tr>")[6])  # the judge's row: its rows out are all its own


def test_what_runs_and_events_carry_is_escaped():
    evil = "<script>alert(1)</script>"
    walk = {"source": evil, "runs": [_run("ingest_files", evil, "success", [_event(evil, 1, 1, {evil: 1})])]}
    page = chain_page(Links("/v"), walk, [], _changes)
    assert "<script>" not in page and "&lt;script&gt;" in page


class _Chains:
    """Airflow's records as datamind_airflow.chain reads them."""

    def downstream(self, dag_id, run_id):
        return WALK if (dag_id, run_id) == ("ingest_files", INGEST) else None

    def publish_run_of(self, safe_id):
        return PUBLISH if safe_id == "manual__publish_v2" else None

    def ingests_of(self, dag_id, run_id):
        return [("ingest_files", INGEST)] if run_id == PUBLISH else []


@pytest.fixture()
def client(tmp_path, monkeypatch):
    root = DataRoot(str(tmp_path))
    write_release(root, 1, 40)
    write_release(root, 2, 50)
    monkeypatch.setenv("DATAMIND_DATA_ROOT", root.url)
    app = reports_app.create_app(chains=_Chains())
    app.dependency_overrides[reports_app._logged_in] = lambda: None
    return TestClient(app)


def test_the_page_is_served_from_the_ingest_runs_link_and_from_the_release_it_fed(client):
    link = urls.framed_backfill_url("ingest_files", INGEST)
    assert link.startswith("/plugin/" + urls.VIEWER_ROUTE + urls.VIEWER + "/backfills/ingest_files/")
    r = client.get(link.removeprefix("/plugin/" + urls.VIEWER_ROUTE).removeprefix(urls.PREFIX))
    assert r.status_code == 200 and "Backfill ingest_files · new_csvs" in _text(r.text)
    assert "script-src" not in r.headers["content-security-policy"]
    assert "default-src 'none'" in r.headers["content-security-policy"]
    # the release written by the run the manifest records lists the backfill that fed it
    release = client.get("/viewer/releases/v2/").text
    assert f"href='{Links(urls.VIEWER).backfill('ingest_files', INGEST)}'" in release
    assert "Backfills that fed it" not in client.get("/viewer/releases/v1/").text
    assert client.get("/viewer/backfills/publish_dataset/x/").status_code == 404
    assert client.get("/viewer/backfills/ingest_files/no_such_run/").status_code == 404


def test_every_ingest_task_links_its_backfill_and_no_other_task_does():
    from types import SimpleNamespace

    from datamind_reports_plugin import BackfillChainLink

    link = BackfillChainLink()
    key = SimpleNamespace(dag_id="ingest_files", run_id=INGEST, task_id="plan")
    assert link.get_link(None, ti_key=key) == urls.framed_backfill_url("ingest_files", INGEST)
    other = SimpleNamespace(dag_id="profile_files", run_id="p1", task_id="publish")
    assert link.get_link(None, ti_key=other) == ""


def test_an_ingest_report_links_its_backfill_and_other_reports_do_not():
    from datamind.quality.report_page import render_report

    doc = {"stage": "ingest_new_csvs", "run_id": "manual__2026-11-28T10_00_00_00_00", "success": True,
           "origin": {"dag_id": "ingest_files", "task_id": "publish_catalog"}}  # fmt: skip
    page = render_report(doc, None)
    # a report is served at <prefix>/reports/<stage>/<run>/: three folders up is the prefix the viewer is under
    assert "href='../../../viewer/backfills/ingest_files/manual__2026-11-28T10_00_00_00_00/'" in page
    other = render_report({**doc, "origin": {"dag_id": "profile_files", "task_id": "publish"}}, None)
    assert "/backfills/" not in other
