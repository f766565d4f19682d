"""Suites derived from the declared schemas, and the semantic row checks, without Great Expectations."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from quality_rows import VALID_ROWS, file_row, frame, messages, query_row, table_row, trajectory_row

from datamind import schemas
from datamind.quality import semantic
from datamind.quality.suites import TABLE_NAMES, suite_for
from datamind.settings import Limits


def _find(suite, type_, column=None):
    return [e for e in suite.all_expectations() if e.type == type_ and (column is None or column in e.columns)]


@pytest.mark.parametrize("table", TABLE_NAMES)
def test_every_required_column_is_expected_present_and_not_null(table):
    suite = suite_for(table, Limits())
    required = {f.name for f in schemas.ALL[table].schema if not f.nullable}
    not_null = {e.kwargs["column"] for e in _find(suite, "ExpectColumnValuesToNotBeNull") if e.when is None}
    assert not_null == required
    (column_set,) = _find(suite, "ExpectTableColumnsToMatchSet")
    assert set(column_set.kwargs["column_set"]) == required


@pytest.mark.parametrize("table", TABLE_NAMES)
def test_valid_rows_pass_every_semantic_check(table):
    suite = suite_for(table, Limits())
    df = frame(table, VALID_ROWS[table]())
    for check in suite.checks:
        assert set(check.evaluate(df, suite.id_column)) == {semantic.OK}, check.name


def test_category_and_hop_vocabularies():
    suite = suite_for("queries", Limits())
    (cat,) = _find(suite, "ExpectColumnValuesToBeInSet", "category")
    assert len(cat.kwargs["value_set"]) == 18
    assert cat.kwargs["value_set"][0] == "aggregation"
    assert cat.kwargs["value_set"][-1] == "comprehensive_data_preprocessing"
    (hop,) = _find(suite, "ExpectColumnValuesToBeBetween", "hop")
    assert (hop.kwargs["min_value"], hop.kwargs["max_value"]) == (1, 5)


def test_limits_flow_into_row_bounds():
    suite = suite_for("catalog_tables", Limits(min_rows=5, max_rows=7, max_cols=9, max_db_table_rows=70))
    bounds = {
        (e.when or (None, None))[1]: (e.kwargs["min_value"], e.kwargs["max_value"])
        for e in _find(suite, "ExpectColumnValuesToBeBetween", "n_rows")
    }
    (cols,) = _find(suite, "ExpectColumnValuesToBeBetween", "n_cols")
    # Spreadsheet tables stand alone; database tables have their own, larger cap (judged per database).
    assert bounds == {"sqlite": (1, 70), "csv": (5, 7), "xlsx": (5, 7)}
    assert (cols.kwargs["min_value"], cols.kwargs["max_value"]) == (1, 9)


def test_unknown_table_is_a_clear_error():
    with pytest.raises(ValueError, match="no quality suite for table 'nope'"):
        suite_for("nope")


@pytest.mark.parametrize(
    "row, problem",
    [
        (query_row(1, hop=2, parent_query_ids=[], root_query_id="q0"), "q1: hop 2 but no parent query"),
        (query_row(1, hop=1, parent_query_ids=["q0"]), "q1: hop 1 but 1 parent(s)"),
        (query_row(1, hop=3, parent_query_ids=["q0"], root_query_id=None), "q1: hop 3 but no root_query_id"),
        (query_row(1, hop=2, parent_query_ids=["q1"], root_query_id="q0"), "q1: lists itself as parent"),
        (query_row(1, hop=4, parent_query_ids=["a", "b"], root_query_id="a"), None),
        # one question asking for two steps itself: its hop counts them, and it stands alone
        (query_row(1, hop=2, parent_query_ids=[], root_query_id="q1"), None),
    ],
)
def test_lineage_matches_hop(row, problem):
    df = frame("queries", [row])  # through Arrow: lists arrive as numpy arrays
    assert semantic.lineage_matches_hop(df, "query_id") == [problem]


@pytest.mark.parametrize(
    "row, problem",
    [
        (file_row(1, n_tables=2, n_rows=2001), "f1: 2001 rows over 2 table(s) exceeds 1000 per table"),
        (file_row(1, n_tables=2, n_rows=2000), None),
        (file_row(1, n_cols=201), "f1: 201 columns over 1 table(s) exceeds 200 per table"),
        (file_row(1, status="rejected", reason_code="too_large", n_rows=99999), None),
    ],
)
def test_accepted_file_within_limits(row, problem):
    check = semantic.accepted_file_within_limits(max_rows=1000, max_cols=200)
    assert check(frame("catalog_files", [row]), "file_id") == [problem]


def test_verdicts_must_agree_with_status_and_n_tables():
    two = [dict(table_name="a", status="accepted"), dict(table_name="b", status="rejected")]
    rows = [
        file_row(1, n_tables=2, table_verdicts=two),  # says 2 tables, only 1 verdict accepted
        file_row(2, n_tables=1, table_verdicts=two),
        file_row(3, status="rejected", reason_code="bad", n_tables=0, table_verdicts=two),
    ]
    got = semantic.accepted_file_consistent(frame("catalog_files", rows), "file_id")
    assert got == [
        "f1: n_tables=2 but 1 accepted table verdict(s)",
        None,
        "f3: rejected file has 1 accepted table verdict(s)",
    ]


def test_columns_match_n_cols():
    rows = [table_row(1, n_cols=4), table_row(2, columns=["a", "a", "b"]), table_row(3)]
    got = semantic.columns_match_count(frame("catalog_tables", rows), "table_id")
    assert got == ["t1: n_cols=4 but 3 column names", "t2: duplicate column names", None]


def test_messages_well_formed_and_answered_has_answer():
    user_last = messages()[:-1]
    no_role = messages()[:-1] + [dict(role="", content="x")]
    rows = [
        trajectory_row(1, messages=[]),
        trajectory_row(2, messages=no_role),
        trajectory_row(3, messages=user_last),
        trajectory_row(4, final_answer="  "),
    ]
    df = frame("trajectories", rows)
    strict = semantic.messages_well_formed(final_from_assistant=True)(df, "trajectory_id")
    assert strict == [
        "tr1: no messages",
        "tr2: message without a role",
        "tr3: last message is from 'user', not the assistant",
        None,
    ]
    lenient = semantic.messages_well_formed(final_from_assistant=False)(df, "trajectory_id")
    assert lenient[2] is None
    assert semantic.answered_has_answer(df, "trajectory_id") == [
        None,
        None,
        None,
        "tr4: status answered but final_answer is empty",
    ]


def test_a_check_on_a_missing_column_reports_every_row():
    suite = suite_for("queries", Limits())
    (check,) = suite.checks
    df = pd.DataFrame({"query_id": ["a", "b"], "hop": np.array([1, 2], dtype="int8")})
    assert list(check.evaluate(df, "query_id")) == ["column(s) parent_query_ids, root_query_id missing"] * 2


def test_importing_the_package_does_not_import_great_expectations():
    code = "import sys, datamind.quality; assert 'great_expectations' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
