"""reports/index.html built from summary.json files (no Great Expectations needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from datamind.quality.report_index import rebuild_index
from datamind.storage import DataRoot


def _summary(stage: str, run: str, success: bool, created: str, table: str = "queries") -> dict:
    return {
        "table": table,
        "stage": stage,
        "run_id": run,
        "success": success,
        "created_at": created,
        "statistics": {"evaluated_expectations": 10, "successful_expectations": 10 if success else 7},
        "summary": {"n_rows": 12},
    }


def test_index_lists_reports_newest_first_and_flags_unreadable(tmp_path):
    root = DataRoot(str(tmp_path))
    root.write_text("reports/synth/r1/summary.json", json.dumps(_summary("synth", "r1", True, "2026-01-01T00:00:00")))
    root.write_text(
        "reports/judge/r2/summary.json",
        json.dumps(_summary("judge", "r2", False, "2026-01-02T00:00:00", table="dataset")),
    )
    root.write_text("reports/publish/r3/summary.json", "{not json")
    html = Path(rebuild_index(root)).read_text()
    judge, synth, broken = html.index(">judge<"), html.index(">synth<"), html.index(">publish<")
    assert judge < synth  # newest first
    assert "1 failing" not in html and "2 failing" in html  # the unreadable one counts as failing too
    assert "UNREADABLE" in html and broken > 0
    assert "7/10 passed" in html and "10/10 passed" in html
    assert 'href="synth/r1/data_docs/index.html"' in html


def test_index_escapes_run_ids(tmp_path):
    root = DataRoot(str(tmp_path))
    root.write_text("reports/synth/x/summary.json", json.dumps(_summary("synth", "<script>", True, "t")))
    html = tmp_path / "reports" / "index.html"
    rebuild_index(root)
    assert "<script>" not in html.read_text() and "&lt;script&gt;" in html.read_text()


def test_index_cli_rebuilds(tmp_path):
    root = DataRoot(str(tmp_path))
    root.write_text("reports/synth/r1/summary.json", json.dumps(_summary("synth", "r1", True, "t")))
    out = subprocess.run(
        [sys.executable, "-m", "datamind.quality.report_index", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == str(tmp_path / "reports" / "index.html")
    assert "synth" in (tmp_path / "reports" / "index.html").read_text()


def test_index_opens_with_the_pipeline_in_order_and_each_stage_latest_report(tmp_path):
    root = DataRoot(str(tmp_path))
    for stage, run, ok, when in (
        ("judge_trajectories", "old", True, "2026-01-01T00:00:00"),
        ("judge_trajectories", "new", False, "2026-01-03T00:00:00"),
        ("profile_files", "p1", True, "2026-01-02T00:00:00"),
    ):
        root.write_text(f"reports/{stage}/{run}/summary.json", json.dumps(_summary(stage, run, ok, when)))
    # an ingest report is labelled by its source; the DAG that wrote it is in its origin
    ingest = {**_summary("ingest_sales", "i1", True, "2026-01-01"), "origin": {"dag_id": "ingest_files"}}
    root.write_text("reports/ingest_sales/i1/summary.json", json.dumps(ingest))
    html = Path(rebuild_index(root)).read_text()
    pipeline = html[html.index("<h2>Pipeline</h2>") : html.index("<h2>All reports</h2>")]
    stages = ["ingest_files", "profile_files", "synthesize_queries", "sample_trajectories", "judge_trajectories",
              "publish_dataset", "train_agent", "evaluate_agent"]  # fmt: skip
    positions = [pipeline.index(f"<td>{s}</td>") for s in stages]
    assert positions == sorted(positions)  # upstream first
    assert "catalog_files &rarr; catalog_tables" in pipeline and "trajectories &rarr; judged" in pipeline
    judge_row = pipeline[pipeline.index("<td>judge_trajectories</td>") :].split("</tr>")[0]
    assert "FAIL" in judge_row and 'href="judge_trajectories/new/report.html"' in judge_row  # the latest, not "old"
    assert "no report yet" in pipeline[pipeline.index("<td>synthesize_queries</td>") :].split("</tr>")[0]
    assert 'href="ingest_sales/i1/report.html"' in pipeline[pipeline.index("<td>ingest_files</td>") :].split("</tr>")[0]
