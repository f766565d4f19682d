"""validate_table end to end with the real Great Expectations: passing and failing frames, the files it
writes (validation.json, summary.json, Data Docs, reports/index.html), local and remote (fsspec) roots.

Validation results are module-scoped fixtures so each scenario runs GX once and GX is imported once.
"""

from __future__ import annotations

import json
import posixpath
import re
import uuid
from pathlib import Path

import fsspec
import pytest
from quality_rows import (
    LIMITS,
    VALID_ROWS,
    file_row,
    frame,
    messages,
    query_row,
    rejected_file_row,
    rejection_row,
    sample_row,
    trajectory_row,
)

from datamind import schemas
from datamind.quality import QualityError, validate_table
from datamind.quality.suites import TABLE_NAMES
from datamind.storage import DataRoot

RUN = "manual__2026-01-02T03:04:05+00:00"
RUN_DIR = "manual__2026-01-02T03_04_05_00_00"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> DataRoot:
    return DataRoot(str(tmp_path_factory.mktemp("quality-root")))


def _validate(root, table, data, stage, **kw):
    return validate_table(root, table, data, RUN, stage, limits=LIMITS, **kw)


ARROW_INPUT = {"catalog_files", "queries", "dataset"}  # the rest go in as pandas, as pipeline.py passes them


@pytest.fixture(scope="module")
def valid_reports(root):
    def data(t):
        return schemas.ALL[t].to_table(VALID_ROWS[t]()) if t in ARROW_INPUT else frame(t, VALID_ROWS[t]())

    return {t: _validate(root, t, data(t), f"valid_{t}") for t in TABLE_NAMES}


@pytest.fixture(scope="module")
def bad_queries(root):
    df = frame(
        "queries",
        [
            query_row(1),
            query_row(2, category="bogus_category"),
            query_row(3, hop=7, parent_query_ids=["q1"], root_query_id="q1"),
            query_row(1, question="dup id"),  # second q1
            query_row(5, hop=2),  # composed but no parents
            query_row(6),
        ],
    )
    df.loc[5, "question"] = None  # required column null
    return _validate(root, "queries", df, "bad_queries")


def _only(report, type_, column):
    found = report.failed(type_, column)
    assert len(found) == 1, report.summary_text
    return found[0]


# -- passing ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("table", TABLE_NAMES)
def test_valid_tables_pass_every_expectation(valid_reports, table):
    report = valid_reports[table]
    assert report.success, report.summary_text
    assert report.failures == []
    stats = report.statistics
    assert stats["evaluated_expectations"] == stats["successful_expectations"] > 0
    assert f"PASSED all {stats['evaluated_expectations']} expectations" in report.summary_text.splitlines()[0]
    assert report.summary["n_rows"] == len(VALID_ROWS[table]())


# -- failing: each defect is named -----------------------------------------------------------------------------------
def test_bad_queries_report_each_defect(bad_queries):
    r = bad_queries
    assert not r.success
    nulls = _only(r, "expect_column_values_to_not_be_null", "question")
    assert nulls["unexpected_count"] == 1
    cat = _only(r, "expect_column_values_to_be_in_set", "category")
    assert cat["unexpected_count"] == 1 and "bogus_category" in cat["examples"][0]
    hop = _only(r, "expect_column_values_to_be_between", "hop")
    assert hop["unexpected_count"] == 1 and hop["examples"][0].startswith("7")
    dup = _only(r, "expect_column_values_to_be_unique", "query_id")
    assert dup["unexpected_count"] == 2 and "q1" in dup["examples"][0]
    lineage = _only(r, "expect_column_values_to_be_in_set", "dq__lineage_matches_hop")
    assert lineage["examples"] == ["q5: hop 2 but no parent query (x1)"]
    # exactly these five and nothing else
    assert len(r.failures) == r.statistics["unsuccessful_expectations"] == 5


def test_summary_text_is_log_ready(bad_queries):
    lines = bad_queries.summary_text.splitlines()
    assert lines[0].startswith(
        "data quality queries (stage bad_queries, run manual__2026-01-02T03:04:05+00:00): "
        f"FAILED 5 of {bad_queries.statistics['evaluated_expectations']} expectations, 6 rows"
    )
    assert any(
        line.strip().startswith("FAILED expect_column_values_to_be_in_set on category: 1 of 6 unexpected")
        for line in lines
    )
    assert any(line.strip() == "hop: 1=4, 2=1, 7=1; no rows for 3: 3, 4, 5" for line in lines)
    assert lines[-1].strip().endswith(f"reports/bad_queries/{RUN_DIR}/data_docs/index.html")


def test_bad_catalog_files(root):
    df = frame(
        "catalog_files",
        [
            file_row(1, n_rows=5),  # accepted below min_rows
            file_row(2, status="maybe"),
            file_row(
                3, n_tables=2, n_rows=2500, table_verdicts=[dict(status="accepted"), dict(status="accepted")]
            ),  # > 1000 rows per table
            file_row(4, content_sha256="not-a-hash"),
            rejected_file_row(5, "x"),
        ],
    )
    df.loc[4, "reason_code"] = None  # rejected without a reason
    r = _validate(root, "catalog_files", df, "bad_files")
    assert not r.success
    small = _only(r, "expect_column_values_to_be_between", "n_rows")
    assert small["row_condition"] == 'status == "accepted"' and small["unexpected_count"] == 1
    assert _only(r, "expect_column_values_to_be_in_set", "status")["examples"][0].startswith("maybe")
    limits = _only(r, "expect_column_values_to_be_in_set", "dq__within_size_limits")
    assert limits["examples"] == ["f3: 2500 rows over 2 table(s) exceeds 1000 per table (x1)"]
    assert _only(r, "expect_column_values_to_match_regex", "content_sha256")["unexpected_count"] == 1
    reason = [f for f in r.failed("expect_column_values_to_not_be_null", "reason_code")]
    assert len(reason) == 1 and reason[0]["row_condition"] == 'status == "rejected"'
    assert len(r.failures) == 5


def test_bad_trajectories(root):
    df = frame(
        "trajectories",
        [
            trajectory_row(1, n_turns=1, n_void_turns=2),
            trajectory_row(2, sample_index=1, final_answer=""),
            trajectory_row(3, sample_index=1),  # same (query, sample, round) as tr2
            trajectory_row(4, sample_index=3, status="exploded"),
        ],
    )
    r = _validate(root, "trajectories", df, "bad_trajectories")
    assert _only(r, "expect_column_pair_values_a_to_be_greater_than_b", "n_turns,n_void_turns")["unexpected_count"] == 1
    assert (
        _only(r, "expect_compound_columns_to_be_unique", "query_id,sample_index,reflection_round")["unexpected_count"]
        == 2
    )
    assert _only(r, "expect_column_values_to_be_in_set", "status")["unexpected_count"] == 1
    answered = _only(r, "expect_column_values_to_be_in_set", "dq__answered_has_answer")
    assert answered["examples"] == ["tr2: status answered but final_answer is empty (x1)"]
    assert len(r.failures) == 4


def test_bad_dataset(root):
    df = frame(
        "dataset",
        [
            sample_row(1),
            sample_row(1, trajectory_id="tr9"),  # duplicate sample id
            sample_row(3, hop=0, messages=messages()[:-1]),  # hop out of range, ends on a user turn
            sample_row(4),
        ],
    )
    df.loc[3, "category"] = None
    r = _validate(root, "dataset", df, "bad_dataset")
    assert _only(r, "expect_column_values_to_be_unique", "sample_id")["unexpected_count"] == 2
    assert _only(r, "expect_column_values_to_be_between", "hop")["unexpected_count"] == 1
    assert _only(r, "expect_column_values_to_not_be_null", "category")["unexpected_count"] == 1
    msgs = _only(r, "expect_column_values_to_be_in_set", "dq__messages_well_formed")
    assert msgs["examples"] == ["s3: last message is from 'user', not the assistant (x1)"]
    assert len(r.failures) == 4


def test_duplicate_rejections_and_bad_stage(root):
    df = frame("rejections", [rejection_row(1), rejection_row(1), rejection_row(2, stage="Bad Stage!")])
    r = _validate(root, "rejections", df, "bad_rejections")
    assert _only(r, "expect_compound_columns_to_be_unique", "item_id,stage")["unexpected_count"] == 2
    assert _only(r, "expect_column_values_to_match_regex", "stage")["examples"][0].startswith("Bad Stage!")
    assert len(r.failures) == 2


def test_missing_required_column_fails_the_contract(root):
    df = frame("queries", VALID_ROWS["queries"]()).drop(columns=["hop"])
    r = _validate(root, "queries", df, "missing_column")
    (cols,) = r.failed("expect_table_columns_to_match_set")
    assert "hop" in cols["examples"][0]
    lineage = _only(r, "expect_column_values_to_be_in_set", "dq__lineage_matches_hop")
    assert lineage["unexpected_count"] == 3
    assert "column(s) hop missing" in lineage["examples"][0]


def test_absent_nullable_columns_read_as_null(root):
    # An older minor schema version lacks newer nullable columns; that is not a defect.
    df = frame("queries", VALID_ROWS["queries"]()).drop(columns=["model", "template_version"])
    assert _validate(root, "queries", df, "older_minor").success


# -- caller decides ------------------------------------------------------------------------------------------------
def test_raise_on_failure_raises_after_writing_the_report(root):
    df = frame("queries", [query_row(1, category="nope")])
    with pytest.raises(QualityError) as info:
        _validate(root, "queries", df, "raising", raise_on_failure=True)
    report = info.value.report
    assert not report.success and "category" in str(info.value)
    assert root.exists(report.report_dir, "summary.json")
    assert root.exists(report.report_dir, "data_docs", "index.html")


def test_a_second_table_in_the_same_stage_run_is_refused_but_a_retry_replaces(root):
    first = _validate(root, "rejections", frame("rejections", [rejection_row(1)]), "shared_stage")
    with pytest.raises(ValueError, match="already holds the 'rejections' report"):
        _validate(root, "queries", frame("queries", [query_row(1)]), "shared_stage")
    retry = _validate(root, "rejections", frame("rejections", [rejection_row(1), rejection_row(2)]), "shared_stage")
    assert retry.summary["n_rows"] == 2
    pages = list(Path(root.path(first.report_dir, "data_docs", "validations")).rglob("*.html"))
    assert len(pages) == 1  # the retry replaced the first attempt's page


# -- files ---------------------------------------------------------------------------------------------------------
def test_report_files_are_written(root, bad_queries):
    base = Path(root.path("reports", "bad_queries", RUN_DIR))
    validation = json.loads((base / "validation.json").read_text())
    assert validation["suite"] == "datamind.queries" and validation["run_id"] == RUN
    assert validation["validation"]["success"] is False
    assert len(validation["validation"]["results"]) == bad_queries.statistics["evaluated_expectations"]
    summary = json.loads((base / "summary.json").read_text())
    assert summary["success"] is False and summary["summary"]["by_hop"]["7"] == 1
    assert len(summary["failures"]) == 5
    assert bad_queries.location == str(base)


def test_data_docs_open_from_disk_and_mention_the_suite(root, bad_queries):
    docs = Path(root.path("reports", "bad_queries", RUN_DIR, "data_docs"))
    index = (docs / "index.html").read_text()
    assert "datamind.queries" in index
    pages = list((docs / "validations").rglob("*.html"))
    assert len(pages) == 1
    page = pages[0].read_text()
    assert "dq__lineage_matches_hop" in page and "bogus_category" in page
    # every local link in the index resolves to a file on disk
    for href in re.findall(r'href="([^"#:]+)"', index):
        assert (docs / href).exists(), href
    # GX's unreferenced onboarding images are not published
    assert [p.name for p in (docs / "static" / "images").iterdir()] == ["favicon.ico"]


def test_reports_index_lists_every_report_with_working_links(root, valid_reports, bad_queries):
    html = Path(root.path("reports", "index.html")).read_text()
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    body = [r for r in rows if "<td" in r]
    assert any("bad_queries" in r and "FAIL" in r for r in body)
    assert any("valid_dataset" in r and "PASS" in r for r in body)
    for href in re.findall(r'href="([^"]+)"', html):
        assert Path(root.path("reports", href)).exists(), href


# -- remote data root -----------------------------------------------------------------------------------------------
def test_remote_fsspec_root_gets_docs_and_index():
    url = f"memory://quality-{uuid.uuid4().hex}"
    remote = DataRoot(url)
    fs = fsspec.filesystem("memory")
    try:
        report = _validate(remote, "queries", frame("queries", VALID_ROWS["queries"]()), "remote")
        assert report.success
        assert report.uris["data_docs"].startswith("memory://")
        base = remote.path("reports", "remote", RUN_DIR)
        assert "datamind.queries" in fs.cat_file(posixpath.join(base, "data_docs", "index.html")).decode()
        assert json.loads(fs.cat_file(posixpath.join(base, "summary.json")))["success"] is True
        assert "remote" in fs.cat_file(remote.path("reports", "index.html")).decode()
    finally:
        fs.rm(remote.path(), recursive=True)
