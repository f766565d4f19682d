"""report.html: what a data engineer opens after a run, self-contained (no script, no network), with counts,
rejections by reason and examples, charts, category x hop, histograms and every expectation's result."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from quality_rows import LIMITS, file_row, frame, query_row, rejected_file_row

from datamind.quality import validate_table
from datamind.quality.report_page import bar_chart, heat_map
from datamind.storage import DataRoot


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> DataRoot:
    return DataRoot(str(tmp_path_factory.mktemp("report-page")))


def _page(root: DataRoot, report) -> str:
    return Path(root.path(report.report_dir, "report.html")).read_text()


def _external(page: str) -> list[str]:
    refs = re.findall(r'(?:href|src)="([^"]+)"', page) + re.findall(r"url\(([^)]+)\)", page)
    return [r for r in refs if "://" in r or r.startswith("//")]


def test_ingest_report_shows_counts_reasons_with_examples_and_histograms(root):
    rows = [file_row(i, n_rows=20 + 10 * i) for i in range(6)]
    rows += [
        rejected_file_row(10, "too_few_rows", reason="7 rows, fewer than the 20 required"),
        rejected_file_row(11, "too_few_rows", reason="3 rows, fewer than the 20 required"),
        rejected_file_row(12, "parse_limit", reason="the reader crashed with SIGABRT"),
    ]
    counts = {"files": 9, "accepted": 6, "rejected": 3, "reasons": {"too_few_rows": 2, "parse_limit": 1}}
    report = validate_table(
        root,
        "catalog_files",
        frame("catalog_files", rows),
        "run-1",
        "ingest_demo",
        limits=LIMITS,
        counts=counts,
        origin={"dag_id": "ingest_files", "task_id": "publish_catalog"},
    )
    page = _page(root, report)
    assert "<script" not in page and "<link" not in page and _external(page) == []
    assert "ingest_demo" in page and ("PASS" in page or "FAIL" in page)
    assert "ingest_files.publish_catalog" in page
    # counts in and out, as the stage reported them
    assert re.search(r"<th>accepted</th><td class='num'>6</td>", page)
    assert re.search(r"<th>rejected</th><td class='num'>3</td>", page)
    # each reason with its count and its own examples (file and reason text)
    assert re.search(r"<b>too_few_rows</b></td><td class='num'>2</td>", page)
    assert "f10.csv" in page and "7 rows, fewer than the 20 required" in page
    assert "the reader crashed with SIGABRT" in page
    # charts are inline SVG: the status distribution and an n_rows histogram over the accepted files
    assert page.count("<svg") >= 3 and "n_rows" in page
    assert "<title>accepted: 6</title>" in page


def test_queries_report_has_a_category_by_hop_heat_map_and_every_expectation(root):
    rows = [query_row(i, category="aggregation", hop=1) for i in range(4)]
    rows += [query_row(10 + i, category="ranking", hop=3, parent_query_ids=["q0"]) for i in range(2)]
    report = validate_table(root, "queries", frame("queries", rows), "run-1", "synth_demo", limits=LIMITS)
    page = _page(root, report)
    assert "Category × hop" in page
    assert "<title>aggregation, hop 1: 4</title>" in page and "<title>ranking, hop 3: 2</title>" in page
    assert "<title>ranking, hop 1: 0</title>" in page
    expectation_rows = re.findall(r"<tr><td class='(pass|fail)'>", page)
    assert len(expectation_rows) == report.statistics["evaluated_expectations"]


def test_charts_escape_labels_and_scale_to_the_largest_value():
    svg = bar_chart({"<b>x</b>": 10, "y": 5})
    assert "<b>x</b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg
    widths = [float(w) for w in re.findall(r'<rect x="\d+" y="[\d.]+" width="([\d.]+)"', svg)]
    assert widths[0] == pytest.approx(2 * widths[1])
    grid = heat_map({"a": {"1": 0, "2": 4}})
    assert 'fill-opacity="1.00"' in grid and 'fill-opacity="0.00"' in grid
