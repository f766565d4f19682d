"""One crafted input per rule: each must be rejected with its own reason code, good files must pass."""

from __future__ import annotations

import sqlite3

import pytest
from ingest_builders import csv_rows, make_sqlite, table_rows, write_csv, xlsx_bytes

from datamind.formats import load_tables
from datamind.ingest.rules import RULES, check_file, check_tables
from datamind.settings import Limits


def judge(path, limits=None):
    limits = limits or Limits()
    result = load_tables(str(path), limits)
    verdicts = check_tables(result, limits)
    return check_file(result, verdicts, limits), verdicts


def test_every_rule_is_documented_in_the_module_docstring():
    import datamind.ingest.rules as rules

    for code in RULES:
        assert f"``{code}``" in rules.__doc__, code


def test_plain_table_is_accepted(tmp_path):
    verdict, _ = judge(write_csv(tmp_path / "ok.csv", 30))
    assert verdict.accepted and verdict.reason_code is None


@pytest.mark.parametrize("n, code", [(19, "too_few_rows"), (20, None), (1000, None), (1001, "too_many_rows")])
def test_row_limits_are_inclusive(tmp_path, n, code):
    verdict, _ = judge(write_csv(tmp_path / "t.csv", n))
    assert verdict.reason_code == code


def test_row_limits_are_configurable(tmp_path):
    p = write_csv(tmp_path / "t.csv", 50)
    assert judge(p, Limits(max_rows=40))[0].reason_code == "too_many_rows"
    assert judge(p, Limits(min_rows=60, max_rows=100))[0].reason_code == "too_few_rows"


def test_too_many_columns(tmp_path):
    header = ",".join(f"c{j}" for j in range(12)) + "\n"
    body = "".join(",".join(str(i * j) for j in range(12)) + "\n" for i in range(25))
    p = tmp_path / "wide.csv"
    p.write_text(header + body)
    assert judge(p, Limits(max_cols=10))[0].reason_code == "too_many_columns"


def test_duplicate_header(tmp_path):
    p = write_csv(tmp_path / "d.csv", 25, header="id,City,amount, city \n")
    verdict, _ = judge(p)
    assert verdict.reason_code == "duplicate_header" and "city" in verdict.reason


def test_headerless_file_is_unnamed_header(tmp_path):
    p = tmp_path / "nohead.csv"
    p.write_text("".join(f"{i},{i * 2.5},{i % 7}\n" for i in range(30)))
    assert judge(p)[0].reason_code == "unnamed_header"


def test_mostly_unnamed_columns(tmp_path):
    p = tmp_path / "u.csv"
    p.write_text("id,,,\n" + "".join(f"{i},{i % 3},x{i % 4},{i * 2}\n" for i in range(25)))
    assert judge(p)[0].reason_code == "unnamed_header"


def test_null_dominated(tmp_path):
    p = tmp_path / "n.csv"
    p.write_text("a,b,c,d\n" + "".join(f"{i},,,\n" for i in range(25)))
    verdict, _ = judge(p)
    assert verdict.reason_code == "null_dominated" and "3 of 4" in verdict.reason


def test_constant_dominated(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("id,country,unit,source\n" + "".join(f"{i},FR,kg,survey\n" for i in range(25)))
    assert judge(p)[0].reason_code == "constant_dominated"


def test_binary_blob_column_in_sqlite(tmp_path):
    db = make_sqlite(
        tmp_path / "b.sqlite",
        {
            "photos": ("id INTEGER, img BLOB", [(i, bytes(range(256)) * 4) for i in range(25)]),
        },
    )
    verdict, verdicts = judge(db)
    assert verdicts[0].reason_code == "binary_blob"
    assert verdict.reason_code == "binary_blob"


def test_absurd_width(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("id,doc\n" + "".join(f'{i},"{"lorem ipsum " * 50}"\n' for i in range(25)))
    assert judge(p, Limits(max_cell_chars=100))[0].reason_code == "absurd_width"
    assert judge(p)[0].accepted  # 600-character cells are fine under the default limit


def test_mixed_types(tmp_path):
    p = tmp_path / "m.csv"
    rows = "".join(f"{i if i % 2 else 'missing'},{i * 3 if i % 3 else 'unknown'},{i}\n" for i in range(30))
    p.write_text("a,b,c\n" + rows)
    assert judge(p)[0].reason_code == "mixed_types"


def test_unloadable_and_unsupported_and_not_tabular(tmp_path):
    corrupt = tmp_path / "corrupt.xlsx"
    corrupt.write_bytes(xlsx_bytes({"S": table_rows(50)})[:700])
    assert judge(corrupt)[0].reason_code == "unloadable"
    pdf = tmp_path / "doc.csv"
    pdf.write_bytes(b"%PDF-1.4\n\x00\x01\x02binary")
    assert judge(pdf)[0].reason_code == "unsupported_format"
    prose = tmp_path / "README.txt"
    prose.write_text("A short note.\nNothing tabular here, really.\nJust prose.\n" * 5)
    assert judge(prose)[0].reason_code == "not_tabular"


def test_file_too_large(tmp_path):
    assert judge(write_csv(tmp_path / "t.csv", 30), Limits(max_file_bytes=50))[0].reason_code == "file_too_large"


def test_no_tables(tmp_path):
    db = tmp_path / "empty.sqlite"
    sqlite3.connect(db).execute("CREATE VIEW v AS SELECT 1").connection.close()
    assert judge(db)[0].reason_code == "no_tables"


def test_workbook_is_accepted_when_one_sheet_passes_and_lists_every_sheet(tmp_path):
    p = tmp_path / "wb.xlsx"
    p.write_bytes(xlsx_bytes({"Tiny": [["a", "b"], [1, 2]], "Good": [["id", "city", "amount"]] + table_rows(30)}))
    verdict, verdicts = judge(p)
    assert verdict.accepted
    assert [(v.status, v.reason_code) for v in verdicts] == [("rejected", "too_few_rows"), ("accepted", None)]


def test_no_valid_tables_with_mixed_reasons(tmp_path):
    p = tmp_path / "wb.xlsx"
    p.write_bytes(xlsx_bytes({"Tiny": [["a", "b"], [1, 2]], "Big": [["id", "city", "amount"]] + table_rows(60)}))
    verdict, _ = judge(p, Limits(max_rows=50))
    assert verdict.reason_code == "no_valid_tables"
    assert "too_few_rows x1" in verdict.reason and "too_many_rows x1" in verdict.reason


def test_database_keeps_small_lookup_tables_but_needs_enough_rows_overall(tmp_path):
    db = make_sqlite(
        tmp_path / "shop.sqlite",
        {
            "status": ("code TEXT PRIMARY KEY, label TEXT", [("A", "active"), ("C", "closed")]),
            "orders": ("id INTEGER, status TEXT REFERENCES status(code)", [(i, "A") for i in range(30)]),
            "big": ("id INTEGER, amount REAL", [(i, i * 0.5) for i in range(1500)]),
            "nothing": ("id INTEGER", []),
        },
    )
    verdict, verdicts = judge(db)
    assert verdict.accepted
    # a database keeps its large tables (the flat-file 1,000-row cap does not apply); its own cap does
    assert [v.reason_code for v in verdicts] == [None, None, None, "empty_table"]
    big = [t for t in load_tables(str(db), Limits()).tables if t.name == "big"][0]
    assert big.n_rows == 1500 and big.df is not None and len(big.df) == 1500
    _, verdicts = judge(db, Limits(max_db_table_rows=1000))
    assert [v.reason_code for v in verdicts] == [None, None, "too_many_rows", "empty_table"]
    assert "1,500 rows, more than the 1,000 allowed" in verdicts[2].reason
    tiny = make_sqlite(tmp_path / "tiny.sqlite", {"t": ("a INTEGER, b TEXT", [(1, "x"), (2, "y")])})
    verdict, _ = judge(tiny)
    assert verdict.reason_code == "too_few_rows" and "database" in verdict.reason


def test_title_row_is_not_counted_as_data(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("Report title,,,\nid,city,amount,day\n" + csv_rows(20))
    verdict, verdicts = judge(p)
    assert verdict.accepted and verdicts[0].accepted
    result = load_tables(str(p), Limits())
    assert result.tables[0].n_rows == 20 and list(result.tables[0].df.columns) == ["id", "city", "amount", "day"]


def test_legacy_xls_and_documents_are_unsupported_formats(tmp_path):
    ole = tmp_path / "old.xls"
    ole.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600)
    verdict, _ = judge(ole)
    assert verdict.reason_code == "unsupported_format" and "xlsx" in verdict.reason
    doc = tmp_path / "dev.json"
    doc.write_text('[\n  {"db_id": "x", "question": "q, with commas"},\n  {"db_id": "y", "question": "r"}\n]\n')
    verdict, _ = judge(doc)
    assert verdict.reason_code == "unsupported_format" and "JSON" in verdict.reason
