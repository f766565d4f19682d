"""Format, encoding, dialect and header detection on crafted bytes."""

from __future__ import annotations

import gzip
import sqlite3

import pytest
from ingest_builders import table_rows, xlsx_bytes

from datamind.formats import sniff


def test_format_comes_from_content_not_extension(tmp_path):
    db = tmp_path / "x.bin"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    assert sniff.detect_format(db.read_bytes()) == "sqlite"
    assert sniff.detect_format(xlsx_bytes({"S": table_rows(3)})) == "xlsx"
    assert sniff.detect_format(b"a,b\n1,2\n") == "csv"
    assert sniff.detect_format(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100) == "xls"
    assert sniff.detect_format(gzip.compress(b"a,b\n1,2\n")) == "gzip"
    assert sniff.detect_format(b"PAR1\x00\x00binary") == "unknown"
    assert sniff.detect_format(b'[\n  {"db_id": "x"}\n]') == "json"
    assert sniff.detect_format(b'CREATE TABLE "t" (a INTEGER, b TEXT);\n') == "sql"
    assert sniff.detect_format("a;b\n1;2\n".encode("utf-16")) == "csv"  # UTF-16 text has NULs but a BOM


def test_truncated_workbook_is_still_recognised_as_xlsx():
    data = xlsx_bytes({"S": table_rows(50)})
    assert sniff.detect_format(data[: len(data) // 3]) == "xlsx"


@pytest.mark.parametrize(
    "text, encoding, expected",
    [
        ("Müller;Straße\n", "utf-8", "utf-8"),
        ("Müller;Straße\n", "utf-8-sig", "utf-8-sig"),
        ("naïve café, Zürich, São Paulo, Ærø, Ñandú\n" * 20, "latin-1", {"cp1252", "latin-1", "iso8859-15"}),
        ("Price: 12 € – “quoted” — done\n" * 20, "cp1252", {"cp1252"}),
    ],
)
def test_encoding_detection_decodes_the_text_back(text, encoding, expected):
    data = text.encode(encoding)
    enc = sniff.detect_encoding(data)
    assert enc in (expected if isinstance(expected, set) else {expected})
    assert data.decode(enc).lstrip("\ufeff") == text


def test_bytes_no_codec_knows_still_decode_as_latin1():
    data = bytes(range(0x80, 0x100)) * 3  # 0x81, 0x8d ... are undefined in cp1252
    enc = sniff.detect_encoding(data)
    assert data.decode(enc)  # never raises: nothing is rejected for its encoding


def test_semicolon_with_decimal_comma():
    text = "city;temp;rain\n" + "".join(f"Graz;{i},5;0,{i}\n" for i in range(10))
    d = sniff.sniff_dialect(text)
    assert (d.delimiter, d.decimal, d.fields) == (";", ",", 3)
    assert d.tabular


def test_comma_delimiter_with_quoted_commas_and_dot_decimals():
    text = 'name,amount\n"Smith, John",1.5\n"Doe, Jane",2.25\n"Roe, R",3.0\n"Poe, E",4.0\n'
    d = sniff.sniff_dialect(text)
    assert (d.delimiter, d.decimal) == (",", ".")


def test_tab_and_pipe_delimiters():
    assert sniff.sniff_dialect("a\tb\tc\n1\t2\t3\n4\t5\t6\n").delimiter == "\t"
    assert sniff.sniff_dialect("a|b\n1|2\n3|4\n").delimiter == "|"


def test_prose_is_not_tabular():
    text = "This is a licence.\nPermission is hereby granted, free of charge,\nto any person.\n" * 5
    assert not sniff.sniff_dialect(text).tabular


def test_header_after_title_rows():
    rows = [["Quarterly report", "", ""], ["", "", ""], ["region", "sales", "units"]] + [
        ["North", str(i * 10), str(i)] for i in range(10)
    ]
    assert sniff.detect_header(rows) == sniff.HeaderSpec(2, 1)


def test_headerless_numeric_data_is_detected():
    rows = [[str(i), str(i * 2.5), str(i % 3)] for i in range(10)]
    assert sniff.detect_header(rows).n_rows == 0


def test_two_row_header_only_when_grouped():
    rows = [["Area", "Population", "Population"], ["", "2010", "2020"]]
    rows += [[f"R{i}", i * 100, i * 110] for i in range(8)]
    rows[1][1] = "Census"  # text where the body is numeric: a header row when grouping is known
    assert sniff.detect_header(rows, multi_row=True) == sniff.HeaderSpec(0, 2)
    assert sniff.detect_header(rows, multi_row=False) == sniff.HeaderSpec(0, 1)
    assert sniff.combine_header(rows[:2], 3) == ["Area", "Population Census", "Population 2020"]
