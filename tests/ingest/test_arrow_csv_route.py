"""Profiling reads delimited tables through Arrow's CSV reader where ingestion found that it reproduces
the frame pandas parses (``column_types`` in ``read_options``); everything else keeps the pandas route.

The reference is always the frame ``load_table`` builds with pandas: the columns the Arrow route hands
over are turned back into a frame here and compared with it exactly, and their profiles with its profile.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from datamind.formats import TableColumns, load_recorded, load_table, load_tables
from datamind.formats.arrow_csv import _verified_column_types
from datamind.formats.common import frame_columns
from datamind.profile.meta import TableToProfile, profile_table, profile_tables
from datamind.settings import Limits

_ROWS = range(3, 30)

# (file text, the column types ingestion must record: None where Arrow's reader cannot reproduce pandas)
CASES = {
    # a line of delimiters is a row of missing cells: "a" holds a missing value, so pandas reads floats
    "delimiter_line": (
        "a,b,c\n1,x,2.5\n,,\n2,y,3.5\n" + "".join(f"{i},q{i},{i}.5\n" for i in _ROWS),
        ["float64", "str", "float64"],
    ),
    "bools": ("a,b\nTrue,x\n" + "".join(f"{'False' if i % 2 else 'TRUE'},q{i}\n" for i in _ROWS), ["bool", "str"]),
    "stripped_text": ("a,b\n 5, x \n" + "".join(f"{i}, q{i}\n" for i in _ROWS), ["int64", "str"]),
    # the empty unnamed column is parsed (all missing: floats), then dropped by tidying
    "empty_unnamed_column": ("a,,b\n5,,x\n" + "".join(f"{i},,q{i}\n" for i in _ROWS), ["int64", "float64", "str"]),
    "crlf_and_quoted_newline": ('a,b\r\n5,"x\r\ny"\r\n' + "".join(f"{i},q{i}\r\n" for i in _ROWS), ["int64", "str"]),
    "missing_tokens": (
        "n,t\nNA,None\n" + "".join(f"{'nan' if i % 5 == 0 else i},{'NULL' if i % 7 == 0 else 'v'}\n" for i in _ROWS),
        ["float64", "str"],
    ),
    "unsigned_and_negative_zero": (
        "big,z\n9223372036854775808,-0.0\n" + "".join(f"{i},{i}.25\n" for i in _ROWS),
        ["uint64", "float64"],
    ),
    # pandas skips a line of blanks; Arrow's reader counts its fields and fails: pandas route
    "blank_line": ("a,b,c\n1,x,2.5\n   \n2,y,3.5\n" + "".join(f"{i},q{i},{i}.5\n" for i in _ROWS), None),
    # pandas reads "+5" as 5; Arrow's integer parser refuses it: pandas route
    "plus_sign": ("a,b\n+5,x\n" + "".join(f"{i},q{i}\n" for i in _ROWS), None),
    # a short row is padded by pandas and refused by Arrow's reader: pandas route
    "short_row": ("a,b,c\n5,x\n" + "".join(f"{i},q{i},1\n" for i in _ROWS), None),
    # mixed ints and text beyond 64 bits: pandas holds Python objects, which Arrow's reader cannot give
    "huge_integers": ("a,b\n123456789012345678901234567890,x\n" + "".join(f"{i},q{i}\n" for i in _ROWS), None),
    # thousands separators: Arrow's reader has none
    "thousands": ('a,b\n"1,234",x\n' + "".join(f'"{i},000",q{i}\n' for i in _ROWS), None),
}


def _frame_of(columns: TableColumns) -> pd.DataFrame:
    return pd.DataFrame(dict(zip(columns.names, columns.values, strict=True)), index=pd.RangeIndex(columns.n_rows))


def _profile_both_ways(path: str, options: dict) -> tuple[dict, dict, pd.DataFrame, list]:
    frame = load_table(path, options)
    loaded = load_recorded(path, [options], frames=False)
    return profile_table(frame, "t"), profile_tables([TableToProfile(loaded[0].as_columns(), "t")])[0], frame, loaded


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_arrow_route_is_recorded_only_where_it_reproduces_the_pandas_frame(case, tmp_path):
    text, expected_types = CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_bytes(text.encode())
    result = load_tables(str(path))
    assert result.error is None
    options = result.tables[0].read_options
    assert options.get("column_types") == expected_types

    by_pandas, by_columns, frame, loaded = _profile_both_ways(str(path), options)
    pd.testing.assert_frame_equal(frame, result.tables[0].df, check_exact=True)
    if expected_types is None:
        assert loaded[0].df is not None and loaded[0].columns is None
    else:
        assert loaded[0].df is None, "a recorded table must come back without a frame"
        pd.testing.assert_frame_equal(_frame_of(loaded[0].columns), frame, check_exact=True)
    assert by_columns == by_pandas


def test_tidying_is_replayed_on_the_columns(tmp_path):
    """Stripped text, a dropped empty unnamed column and dropped empty rows, all on the Arrow route."""
    text = "id,,name\n1,, Ann \n,,\n2,,Bob\n" + "".join(f"{i},,p{i}\n" for i in _ROWS)
    path = tmp_path / "tidy.csv"
    path.write_text(text)
    options = load_tables(str(path)).tables[0].read_options
    assert options["column_types"] == ["float64", "float64", "str"]
    assert options["strip_columns"] == [1] and options["drop_empty_rows"] is True
    columns = load_recorded(str(path), [options], frames=False)[0].columns
    assert columns.names == ["id", "name"]
    assert columns.n_rows == 2 + len(_ROWS)
    assert list(columns.values[1][:2]) == ["Ann", "Bob"]
    pd.testing.assert_frame_equal(_frame_of(columns), load_table(str(path), options), check_exact=True)


def test_a_table_past_the_row_limit_is_not_checked(tmp_path):
    """It is rejected at ingestion and never profiled, so the second parse would be wasted."""
    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + "".join(f"{i},q{i}\n" for i in range(60)))
    assert load_tables(str(path), Limits(max_rows=59)).tables[0].read_options.get("column_types") is None
    assert load_tables(str(path), Limits(max_rows=60)).tables[0].read_options["column_types"] == ["int64", "str"]


def test_a_reload_the_arrow_reader_cannot_parse_falls_back_to_pandas(tmp_path, caplog):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,x\n" + "".join(f"{i},q{i}\n" for i in _ROWS))
    options = load_tables(str(path)).tables[0].read_options
    wrong = {**options, "column_types": ["int64", "int64"]}  # "b" holds text
    with caplog.at_level("WARNING", logger="datamind.formats"):
        loaded = load_recorded(str(path), [wrong], frames=False)[0]
    assert loaded.columns is None
    assert "no longer parse with Arrow's reader" in caplog.text and "ArrowInvalid" in caplog.text
    pd.testing.assert_frame_equal(loaded.df, load_table(str(path), options), check_exact=True)


def test_the_check_refuses_types_whose_table_differs_from_the_frame(tmp_path):
    path = tmp_path / "t.csv"
    data = ("a,b\n1.5,x\n" + "".join(f"{i}.5,q{i}\n" for i in _ROWS)).encode()
    path.write_bytes(data)
    table = load_tables(str(path)).tables[0]
    options = {k: v for k, v in table.read_options.items() if k != "column_types"}
    assert _verified_column_types(data, options, ["float64", "str"], table.df) == ["float64", "str"]
    changed = table.df.copy()
    changed.iloc[3, 0] = 99.0
    assert _verified_column_types(data, options, ["float64", "str"], changed) is None
    renamed = table.df.rename(columns={"b": "B"})
    assert _verified_column_types(data, options, ["float64", "str"], renamed) is None
    as_text = table.df.astype({"a": "str"})
    assert _verified_column_types(data, options, ["float64", "str"], as_text) is None


def test_dabench_tables_profile_the_same_on_both_routes(shared_data, tmp_path):
    """Every DABench table: the Arrow route (where recorded) gives the pandas frame and its profile, and
    it is recorded for nearly all of them (a change that quietly disabled it would show here)."""
    tables = sorted((shared_data / "dabench" / "da-dev-tables").glob("*.csv"))
    routed = 0
    for path in tables:
        result = load_tables(str(path), Limits(max_rows=10**7))
        if result.error:
            continue
        options = json.loads(json.dumps(result.tables[0].read_options))  # as the catalog stores them
        by_pandas, by_columns, frame, loaded = _profile_both_ways(str(path), options)
        if options.get("column_types"):
            routed += 1
            pd.testing.assert_frame_equal(_frame_of(loaded[0].columns), frame, check_exact=True)
        assert by_columns == by_pandas, path.name
        assert frame_columns(frame).names == by_pandas["columns"]
    assert routed >= 0.9 * len(tables), f"{routed} of {len(tables)} tables took the Arrow route"
