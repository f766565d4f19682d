"""Loading real files built in tmp_path: messy CSVs, workbooks, SQLite; reloads are identical."""

from __future__ import annotations

import datetime as dt
import os

import pandas as pd
import pytest
from ingest_builders import make_sqlite, table_rows, write_csv, xlsx_bytes

from datamind.formats import load_table, load_tables
from datamind.formats.common import name_index
from datamind.settings import Limits


def _reloads_identically(path, result):
    for t in result.tables:
        if t.df is not None:
            pd.testing.assert_frame_equal(load_table(str(path), t.read_options), t.df)


def test_semicolon_decimal_comma_csv_parses_numbers(tmp_path, limits):
    rows = [("Graz", "12,5", "1.250,75"), ("Linz", "-3,25", "980,5")] * 15
    p = tmp_path / "weather.csv"
    p.write_text("city;temp;income\n" + "".join(";".join(r) + "\n" for r in rows), encoding="utf-8")
    r = load_tables(str(p), limits)
    t = r.tables[0]
    assert (r.format, t.read_options["sep"], t.read_options["decimal"]) == ("csv", ";", ",")
    assert t.df["temp"].tolist()[:2] == [12.5, -3.25]
    assert t.read_options["thousands"] == "."
    assert t.df["income"].tolist()[:2] == [1250.75, 980.5]
    _reloads_identically(p, r)


def test_latin1_csv_keeps_accents(tmp_path, limits):
    p = tmp_path / "staff.csv"
    names = ["José", "Zoë", "François", "Jürgen", "Ærø"]
    body = "".join(f"{i},{names[i % 5]},Köln\n" for i in range(25))
    p.write_bytes(("id,name,city\n" + body).encode("latin-1"))
    r = load_tables(str(p), limits)
    assert r.encoding in ("cp1252", "latin-1", "iso8859-15")
    assert r.tables[0].df["name"].tolist()[:5] == names
    assert set(r.tables[0].df["city"]) == {"Köln"}
    _reloads_identically(p, r)


def test_trailing_delimiter_and_unquoted_delimiter_inside_a_value_are_repaired(tmp_path, limits):
    # Like the countries-of-the-world export: every line ends with ';' and two country names contain '; '.
    lines = ["Country;Region;Population;Area;"]
    for i in range(30):
        lines.append(f"Land{i} ;EUROPE   ;{1000 + i};{i},5;")
    lines[5] = "Bahamas; The ;LATIN AMER.   ;303770;13940,5"
    lines[9] = "Gambia; The ;AFRICA   ;1641564;11300,0"
    p = tmp_path / "countries.csv"
    p.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    r = load_tables(str(p), limits)
    df = r.tables[0].df
    assert list(df.columns) == ["Country", "Region", "Population", "Area"]
    assert len(df) == 30
    assert df.loc[4, "Country"] == "Bahamas; The" and df.loc[4, "Population"] == 303770
    assert df.loc[8, "Area"] == 11300.0 and df.loc[8, "Region"] == "AFRICA"
    assert df.loc[0, "Country"] == "Land0"  # padding spaces stripped
    assert df["Population"].dtype.kind == "i" and df["Area"].dtype.kind == "f"
    assert r.tables[0].read_options["repair_rows"] is True
    _reloads_identically(p, r)


def test_title_row_above_csv_header_and_old_mac_line_endings(tmp_path, limits):
    text = "SCHOOL RESULTS,,,\rWins,Name,,Score\r" + "".join(f"{i},Team {i},,{i * 3}\r" for i in range(25))
    p = tmp_path / "results.csv"
    p.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    t = load_tables(str(p), limits).tables[0]
    assert t.read_options["header_start"] == 1
    assert list(t.df.columns) == ["Wins", "Name", "Score"]  # the empty unnamed column is dropped
    assert len(t.df) == 25 and t.df["Score"].sum() == sum(i * 3 for i in range(25))


def test_csv_that_is_really_xlsx(tmp_path, limits):
    p = tmp_path / "export.csv"
    p.write_bytes(xlsx_bytes({"Data": [["id", "city", "amount"]] + table_rows(25)}))
    r = load_tables(str(p), limits)
    assert (r.format, r.declared_format) == ("xlsx", "csv")
    assert r.tables[0].name == "Data" and r.tables[0].n_rows == 25


def test_xlsx_title_rows_merged_group_header_footnotes_and_several_sheets(tmp_path, limits):
    body = [[f"State {i}", 1000 + i, 2000 + i, 3000 + i] for i in range(22)]
    report = (
        [["Table 1. Population estimates"], [], ["Area", "Census", "Estimate", None], [None, "2010", 2011, 2012]]
        + body
        + [[], ["Source: statistics office"], ["Release date: 2020"]]
    )
    lookup = [["code", "label"]] + [[f"C{i}", f"Label {i}"] for i in range(20)]
    p = tmp_path / "report.xlsx"
    p.write_bytes(
        xlsx_bytes({"Report": report, "Lookup": lookup, "Empty": []}, merges={"Report": ["A1:D1", "C3:D3", "A3:A4"]})
    )
    r = load_tables(str(p), limits)
    by_name = {t.name: t for t in r.tables}
    assert list(by_name) == ["Report", "Lookup", "Empty"]
    rep = by_name["Report"]
    assert (rep.read_options["header_start"], rep.read_options["header_rows"]) == (2, 2)
    assert list(rep.df.columns) == ["Area", "Census 2010", "Estimate 2011", "Estimate 2012"]
    assert len(rep.df) == 22  # footnotes and the blank line are gone
    assert rep.df["Estimate 2012"].tolist() == [3000 + i for i in range(22)]
    assert by_name["Lookup"].n_rows == 20
    assert by_name["Empty"].n_rows == 0
    _reloads_identically(p, r)


def test_xlsx_dates_become_datetimes(tmp_path, limits):
    rows = [["day", "value"]] + [[dt.datetime(2024, 1, 1) + dt.timedelta(days=i), i] for i in range(21)]
    p = tmp_path / "d.xlsx"
    p.write_bytes(xlsx_bytes({"S": rows}))
    df = load_tables(str(p), limits).tables[0].df
    assert df["day"].dtype.kind == "M" and df["day"].iloc[-1] == pd.Timestamp("2024-01-21")


def test_huge_sheet_is_counted_not_materialized(tmp_path):
    rows = [["id", "city", "amount"]] + table_rows(400)
    p = tmp_path / "big.xlsx"
    p.write_bytes(xlsx_bytes({"Big": rows}))
    t = load_tables(str(p), Limits(max_rows=100)).tables[0]
    assert t.df is None and t.rows_estimated and t.n_rows == 400


def test_sqlite_is_read_only_counts_first_and_skips_huge_tables(tmp_path):
    db = make_sqlite(
        tmp_path / "shop.sqlite",
        {
            "customers": ("id INTEGER PRIMARY KEY, name TEXT", [(i, f"c{i}") for i in range(30)]),
            "events": (
                "id INTEGER, customer_id INTEGER REFERENCES customers(id), kind TEXT",
                [(i, i % 30, "view") for i in range(500)],
            ),
        },
    )
    before = (db.read_bytes(), os.path.getmtime(db))
    r = load_tables(str(db), Limits(max_rows=10, max_db_table_rows=100))
    by_name = {t.name: t for t in r.tables}
    assert by_name["events"].n_rows == 500 and by_name["events"].df is None
    assert by_name["customers"].df.shape == (30, 2)
    assert by_name["events"].foreign_keys == [
        {"from_table": "events", "from_column": "customer_id", "to_table": "customers", "to_column": "id"}
    ]
    assert by_name["customers"].ddl.startswith("CREATE TABLE")
    assert (db.read_bytes(), os.path.getmtime(db)) == before
    pd.testing.assert_frame_equal(load_table(str(db), by_name["customers"].read_options), by_name["customers"].df)


def test_corrupt_inputs_become_errors_not_exceptions(tmp_path, limits):
    broken = tmp_path / "broken.xlsx"
    broken.write_bytes(xlsx_bytes({"S": table_rows(40)})[:900])
    r = load_tables(str(broken), limits)
    assert (r.format, r.error_code) == ("xlsx", "unloadable")
    bad_db = tmp_path / "bad.sqlite"
    bad_db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    assert load_tables(str(bad_db), limits).error_code == "unloadable"
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    assert load_tables(str(empty), limits).error_code == "no_tables"


def test_file_over_the_size_limit_is_not_read(tmp_path):
    p = write_csv(tmp_path / "a.csv", 50)
    r = load_tables(str(p), Limits(max_file_bytes=100))
    assert r.error_code == "file_too_large" and r.tables == []


@pytest.mark.parametrize("n_extra", [1, 2])
def test_gzip_bomb_is_capped(tmp_path, n_extra):
    import gzip

    p = tmp_path / "bomb.csv.gz"
    p.write_bytes(gzip.compress(b"a,b\n" + b"1,2\n" * (50_000 * n_extra)))
    r = load_tables(str(p), Limits(max_uncompressed_bytes=10_000))
    assert r.error_code == "archive_bomb"
    ok = load_tables(str(p), Limits(max_rows=10**6))
    assert ok.tables[0].n_rows == 50_000 * n_extra and ok.tables[0].read_options["compression"] == "gzip"


@pytest.mark.parametrize("fmt", ["csv", "xlsx"])
@pytest.mark.parametrize("empty_row", [False, True])
def test_tidying_decisions_are_recorded_and_a_reload_that_replays_them_gives_the_same_frame(
    tmp_path, limits, fmt, empty_row
):
    # Padding in columns 1 and 3 only (a no-break space in one), and maybe a row with no value at all:
    # what tidying decided is recorded, and replaying it gives what deciding it all again gives.
    header = ["id", "city", "code", "note", "amount"]
    rows = [
        [i, f" City {i % 4} ", f"C{i}", f"note {i}\u00a0" if i % 5 == 0 else f"note {i}", i * 1.5] for i in range(30)
    ]
    if empty_row:
        rows.insert(7, [""] * len(header))
    p = tmp_path / f"padded.{fmt}"
    if fmt == "csv":
        p.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    else:
        p.write_bytes(xlsx_bytes({"data": [header, *rows]}))
    t = load_tables(str(p), limits).tables[0]
    assert t.read_options["strip_columns"] == [1, 3]
    assert t.read_options["drop_empty_rows"] is empty_row or (fmt == "xlsx" and t.read_options["drop_empty_rows"])
    assert len(t.df) == 30 and t.df["city"].tolist()[:2] == ["City 0", "City 1"] and t.df["note"][0] == "note 0"
    decided_again = {k: v for k, v in t.read_options.items() if k not in ("strip_columns", "drop_empty_rows")}
    pd.testing.assert_frame_equal(load_table(str(p), t.read_options), t.df, check_exact=True)
    pd.testing.assert_frame_equal(load_table(str(p), decided_again), t.df, check_exact=True)


@pytest.mark.parametrize("names", [[], ["id"], ["Unnamed: 0", "Köln", "a.1", "名前", "x y"]])
def test_column_index_is_the_one_pandas_builds_from_the_names(names):
    pd.testing.assert_index_equal(name_index(names), pd.Index(names), exact=True)


def test_every_catalogued_format_has_one_registry_entry_that_loads_and_reloads_it(tmp_path):
    """``formats.FORMATS`` is the one place a table format is added: the catalog and the quality suites name
    the same formats, and each entry's reload gives back the frame its load recorded."""
    import sqlite3

    from datamind import formats
    from datamind.ingest.stage import CATALOG_FORMATS
    from datamind.quality.suites import TABLE_FORMATS

    assert set(formats.FORMATS) == set(CATALOG_FORMATS) == set(TABLE_FORMATS)
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n1,x\n2,y\n")
    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (a INTEGER, b TEXT)")
        con.executemany("INSERT INTO t VALUES (?, ?)", [(1, "x"), (2, "y")])
    for path in (csv, db):
        result = formats.load_tables(str(path))
        (table,) = result.tables
        assert result.format in formats.FORMATS and table.read_options["format"] == result.format
        again = formats.load_table(str(path), table.read_options)
        assert again.to_dict("list") == table.df.to_dict("list") == {"a": [1, 2], "b": ["x", "y"]}
        (recorded,) = formats.load_recorded(str(path), [table.read_options])
        assert recorded.df.to_dict("list") == {"a": [1, 2], "b": ["x", "y"]}
    with pytest.raises(ValueError, match="unknown table format 'parquet'"):
        formats.load_table(str(csv), {"format": "parquet"})
