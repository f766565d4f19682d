"""The fast routes profiling takes give exactly what the general routes give.

* numbers: ``_profile_numbers`` (the block route) against ``profile_column`` on the Arrow array (hash
  counts, Arrow min/max), field for field, on columns built to hit ties, nulls, signed zeros and extremes,
  alone and side by side in the blocks a table's (or a batch of tables') columns share; a batch of tables
  profiled together against each table alone;
* workbook cells: the column-wise frame against ``DataFrame.map`` over the cells, and the cell types read
  off a column's dtype against a scan of its cells;
* loading: ``load_table`` (parses the bytes) against ``read_csv_text(decode_text(...))`` (the text route)
  on files built to hit CRLF inside quotes, bare CRs, BOMs, title rows, blank and delimiter-only lines;
  and the shortcuts' own tests (blank lines, cells needing a trim) against what they stand in for.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from datamind.formats import decode_text, load_table, read_csv_text
from datamind.formats.common import _strip_text
from datamind.formats.text import _has_blank_line
from datamind.formats.workbook import _cell_kinds, _cells_frame
from datamind.profile.meta import (
    _DATEISH,
    TableToProfile,
    _cut,
    _float_text,
    _fmt,
    _looks_like_dates,
    _parse_each,
    _probe_fails_early,
    _profile_numbers,
    _top_order,
    profile_column,
    profile_table,
    profile_tables,
)


def _columns() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for n in (1, 2, 3, 9, 64, 65, 700, 5000):
        with_nan = rng.normal(size=n)
        with_nan[rng.random(n) < 0.3] = np.nan
        out += [
            (f"normal_{n}", rng.normal(size=n) * 1e3),
            (f"rounded_{n}", np.round(rng.normal(size=n) * 10, 1)),
            (f"nan_{n}", with_nan),
            (f"ties_{n}", rng.integers(0, 4, n) * 0.5),
            (f"pairs_{n}", np.repeat(np.arange((n + 1) // 2), 2)[:n] * 1.5),
            (f"signed_zero_{n}", rng.choice([0.0, -0.0, 1.0], n)),
            (f"inf_{n}", np.where(rng.random(n) < 0.1, np.inf, rng.normal(size=n))),
            (f"small_int_{n}", rng.integers(-3, 3, n)),
            (f"big_int_{n}", rng.integers(-(2**62), 2**62, n)),
            (f"near_2_53_{n}", 2**53 + rng.integers(0, 5, n)),
            (f"row_id_{n}", np.arange(n)),
            (f"counter_{n}", np.arange(5, n + 5)),
            (f"shuffled_{n}", rng.permutation(n) * 7),
            (f"int32_{n}", rng.integers(0, 10, n).astype(np.int32)),
            (f"float32_{n}", rng.normal(size=n).astype(np.float32)),
            (f"uint8_{n}", rng.integers(0, 10, n).astype(np.uint8)),
            (f"all_nan_{n}", np.full(n, np.nan)),
        ]
    return out


@pytest.mark.parametrize("cap", [3, 10])
def test_numeric_route_equals_the_arrow_route(cap):
    for name, values in _columns():
        fast = _profile_numbers(values, name, str(values.dtype), cap, "d")
        general = profile_column(pa.array(values, from_pandas=True), name, str(values.dtype), cap, "d")
        if fast is None:  # deferred to the general route: a -0.0 somewhere, or no values at all
            with np.errstate(invalid="ignore"):
                assert np.any((values == 0) & np.signbit(values)) or np.isnan(values).all(), name
            continue
        assert fast == general, name


def test_numeric_route_defers_on_signed_zeros():
    values = np.array([0.0, -0.0, 1.0])
    assert _profile_numbers(values, "z", "float64", 10, None) is None
    assert profile_column(pa.array(values), "z", "float64")["n_unique"] == 3  # Arrow keeps 0.0 and -0.0 apart


FILES = {
    "crlf_quoted.csv": "id,note,amount\r\n" + "".join(f'{i},"line a\r\nline b {i}",{i * 1.5}\r\n' for i in range(30)),
    "cr_only.csv": "id,city,amount\r" + "".join(f"{i},C{i % 3},{i}.5\r" for i in range(30)),
    "bom_title.csv": "\ufeffSales report 2024\n\nid,city,amount\n" + "".join(f"{i}, Köln ,{i}\n" for i in range(30)),
    "bom_no_header.csv": "\ufeff" + "".join(f"{i},{i * 2}\n" for i in range(30)),
    "blank_lines.csv": "id,city\n" + "".join(f"{i},x{i}\n" for i in range(9)) + "\n,\n" + '"",""\n1,y\n',
    "na_row.csv": "id,city\n1,a\nNA,NA\n2,b\n",
    "na_row_and_blank_line.csv": "id,city\n1,a\nNA,NA\n,\n2,b\n",
    "trailing_delim.csv": "id,city,\n" + "".join(f"{i},c{i},\n" for i in range(20)),
    "no_final_newline.csv": "id,city\n1,a\n2,b",
    "only_header.csv": "id,city,amount\n",
    "tabs.tsv": "id\tcity\tamount\n" + "".join(f"{i}\t c{i} \t{i}\n" for i in range(20)),
    "two_header_rows.csv": "region,region,sales\nname,code,q1\n" + "".join(f"R{i},{i},{i * 2}\n" for i in range(20)),
    "quoted_header.csv": '"id","two\nline name","amount"\n' + "".join(f'{i},"x{i}",{i}\n' for i in range(20)),
    "nbsp.csv": "id,city\n" + "".join(f"{i},\u00a0City {i}\u00a0\n" for i in range(20)),
}
OPTIONS = {
    "bom_title.csv": {"encoding": "utf-8-sig", "header_start": 2},
    "bom_no_header.csv": {"encoding": "utf-8-sig", "header_rows": 0},
    "tabs.tsv": {"sep": "\t"},
    "two_header_rows.csv": {"header_rows": 2},
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_byte_route_loads_the_frame_the_text_route_loads(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(FILES[name].encode("utf-8"))
    opts = {
        "format": "csv",
        "table": "t",
        "encoding": "utf-8",
        "sep": ",",
        "quotechar": '"',
        "decimal": ".",
        "thousands": None,
        "header_start": 0,
        "header_rows": 1,
        "repair_rows": False,
        **OPTIONS.get(name, {}),
    }
    text_df = read_csv_text(decode_text(path.read_bytes(), opts["encoding"]), opts)[0]
    byte_df = load_table(str(path), opts)
    pd.testing.assert_frame_equal(byte_df, text_df, check_exact=True)
    assert list(byte_df.columns) == list(text_df.columns)


def test_blank_line_test_on_bytes_matches_the_text_regex():
    rng = random.Random(3)
    for sep in (",", "\t", ";", "|"):
        text_test = re.compile(rf"\n[{re.escape(sep)} \t\"]*\n")
        for _ in range(20_000):
            body = "".join(rng.choice([sep, " ", "\t", '"', "\n", "a"]) for _ in range(rng.randint(0, 10)))
            prefix = "".join(rng.choice(["x", "\n", sep]) for _ in range(rng.randint(0, 3)))
            expected = bool(text_test.search("\n" + body.rstrip("\n") + "\n"))
            assert _has_blank_line((prefix + body).encode(), len(prefix), sep) == expected, (prefix, body)


def test_table_profiles_equal_the_per_column_arrow_route():
    rng = np.random.default_rng(11)
    frames = [
        pd.DataFrame(np.round(rng.random((300, 4)) * 10, 1)),  # one 2-D block: columns are strided views
        pd.DataFrame(rng.integers(0, 9, (300, 3))),
        pd.DataFrame({"x": np.arange(40.0), "y": np.arange(40) % 7}).iloc[::3],
        pd.DataFrame({"be_float": np.arange(10, dtype=">f8"), "be_int": np.arange(10, dtype=">i8")}),
        pd.DataFrame({"x": pd.Series([], dtype=float), "n": pd.Series([], dtype="int64")}),
    ]
    # Each length's columns in one frame: the block route profiles a dtype's columns together, so nulls,
    # ties, signed zeros and all-null columns sit beside ordinary ones in the same block.
    by_length: dict[int, dict[str, np.ndarray]] = {}
    for name, values in _columns():
        by_length.setdefault(len(values), {})[name] = values
    frames += [pd.DataFrame(columns) for columns in by_length.values()]
    for df in frames:
        profiles = profile_table(df)["column_profiles"]
        for j, p in enumerate(profiles):
            values = df.iloc[:, j].to_numpy()
            try:
                arr = pa.array(values, from_pandas=True)
            except pa.ArrowNotImplementedError:  # byte-swapped: both routes profile the text form
                assert p["kind"] == "integer" and p["min"] == "0" and p["max"] == "9", p
                continue
            assert p == profile_column(arr, str(df.columns[j]), str(df.dtypes.iloc[j])), p["name"]


def test_tables_profiled_together_get_what_each_gets_alone():
    # Number columns of a batch are padded to shared block widths; nothing of that may show in a profile
    # (the digits of a mean included), whichever tables share the batch.
    rng = np.random.default_rng(13)
    frames = []
    for n in (1, 3, 20, 33, 64, 65, 100, 128, 129, 700, 1000, 1030, 3000):
        frames.append(
            pd.DataFrame(
                {
                    "id": np.arange(n),
                    "x": rng.normal(size=n) * 1e3,
                    "gaps": np.where(rng.random(n) < 0.2, np.nan, np.round(rng.normal(size=n), 1)),
                    "small": rng.integers(0, 4, n),
                    "top": np.full(n, np.iinfo(np.int64).max),  # the padding's own value, for real
                    "f32": rng.normal(size=n).astype(np.float32),
                    "word": pd.array(rng.choice(["a", "b", None], n), dtype="str"),
                }
            )
        )
    alone = [profile_table(df, f"t{i}") for i, df in enumerate(frames)]
    order = rng.permutation(len(frames))
    together = profile_tables([TableToProfile(frames[i], f"t{i}") for i in order])
    assert [alone[i] for i in order] == together
    assert profile_tables([TableToProfile(frames[i], f"t{i}") for i in order[:4]]) == [alone[i] for i in order[:4]]


def test_float_text_is_the_general_formatter_on_floats():
    rng = np.random.default_rng(17)
    values = np.concatenate(
        [
            rng.normal(size=4000) * 10.0 ** rng.integers(-9, 17, 4000),
            *(np.round(rng.normal(size=400) * 100, d) for d in range(7)),
            rng.integers(-(2**60), 2**60, 500).astype(float),
            [0.0, -0.0, 1e-7, 0.1234565, 9999999.5, 2.0**53, -(2.0**53), 2.0**53 - 1, 1e16, np.inf, -np.inf],
        ]
    ).tolist()
    assert [_float_text(v) for v in values] == [str(_fmt(v)) for v in values]


def test_date_look_stops_at_the_first_decisive_miss_and_decides_as_counting_does():
    rng = random.Random(3)
    pool = ["2020-01-02", "Jan 3, 2020", "3/4/2020", "abc", None, 5, "x 2020"]
    for _ in range(5000):
        sample = [rng.choice(pool) for _ in range(rng.randint(0, 20))]
        hits = sum(1 for v in sample if isinstance(v, str) and _DATEISH.match(v))
        assert _looks_like_dates(sample) == (hits >= max(1, math.ceil(0.8 * len(sample)))), sample


def test_top_order_is_the_stable_sort_of_the_counts_cut_to_the_cap():
    rng = np.random.default_rng(23)
    for _ in range(3000):
        n, cap = int(rng.integers(1, 3000)), int(rng.integers(1, 20))
        counts = rng.integers(1, int(rng.integers(2, 9)), n)  # few distinct counts: ties at every cut
        assert np.array_equal(_top_order(counts, cap), np.argsort(-counts, kind="stable")[:cap]), (n, cap)


def test_a_date_probe_given_up_early_is_one_the_whole_probe_rejects():
    """The per-cell date probe stops after its first cells when the rest cannot lift it to 90%: wherever
    it stops, parsing all the cells rejects the probe too (too few parse, or the cells mix time zones)."""
    rng = random.Random(11)
    pool = ["2014.03.23_20:24:00_TAI", "2020-01-02", "13/04/2021", "Apr 13 2017", "2017-04-13T10:00:00+02:00"]
    pool += ["2017-04-13T10:00:00Z", "12:30", "x", "Q1 2020", "31/02/2020", "Jan 2020", "20200102", "ID-2020-7"]
    stopped = 0
    for _ in range(300):
        cells = [rng.choice(pool) for _ in range(rng.randint(1, 50))]
        try:
            early = _probe_fails_early(cells)
        except ValueError:  # mixed time zones among the first cells: the whole probe mixes them too
            with pytest.raises(ValueError):
                _parse_each(cells)
            continue
        if early:
            stopped += 1
            try:
                rejected = _parse_each(cells).notna().mean() < 0.9
            except ValueError:
                rejected = True
            assert rejected, cells
    assert stopped > 30  # the pool makes early stops common; a test that never stops would prove nothing


def test_text_columns_are_stripped_exactly_where_trimming_changes_a_cell():
    # The loader decides "nothing to strip" from byte counts alone; each column is checked against
    # trimming every cell by itself (empty after trimming -> missing).
    rng = random.Random(5)
    alphabet = ["a", "é", "z", " ", "\t", "\xa0", "\u3000", "\u2029", "\x1f", "x y"]
    for _ in range(3000):
        cells = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) or None for _ in range(rng.randint(1, 6))
        ]
        column = pd.array(cells, dtype="str")
        expected = [
            None if c is None else (pc.utf8_trim_whitespace(pa.array([c])).to_pylist()[0] or None) for c in cells
        ]
        stripped = _strip_text(column)
        if stripped is None:
            assert [None if pd.isna(c) else c for c in column] == expected, cells
        else:
            assert [None if pd.isna(c) else c for c in stripped] == expected, cells


def _sheet_bodies():
    """Sheet rows as the workbook reader hands them: every cell type it produces, blanks, gaps."""
    rng = random.Random(11)
    pools = {
        "mixed": [None, "", "  ", " x ", "text", 1, 2, 3.5, 2.0, -0.0, True, False, dt.datetime(2020, 1, 2), 2**60],
        "numbers": [1, 2, None, 4.0, "  ", 7],
        "big_ints": [2**61, 7, 2**53 + 1],
        "bools": [True, False, None, ""],
        "dates": [dt.datetime(2020, 1, 3), dt.date(2021, 3, 4), None, " "],
        "text": ["a", "b ", " ", "", None],
        "text_and_numbers": ["a", 3, None],
    }
    for n in (1, 2, 7, 40):
        for name, pool in pools.items():
            ncols = 4
            yield f"{name}_{n}", [[rng.choice(pool) for _ in range(ncols)] for _ in range(n)], ncols


@pytest.mark.parametrize("name, body, ncols", list(_sheet_bodies()), ids=lambda v: v if isinstance(v, str) else "")
def test_sheet_cells_become_the_frame_dataframe_map_makes(name, body, ncols):
    fast, general = _cells_frame(body, ncols), _cells_frame(body, ncols, per_cell=True)
    pd.testing.assert_frame_equal(fast, general, check_exact=True)
    for j in range(ncols):
        assert [type(v) for v in fast[j]] == [type(v) for v in general[j]]
        # and the column's cell types, read off the dtype where it settles them, as a scan finds them
        assert _cell_kinds(fast[j]) == {type(v) for v in general[j].dropna()}


def _cut_whole(s: str, n: int) -> str:
    """The definition: collapse every whitespace run of the whole cell, then cut to ``n`` characters."""
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def test_cut_of_a_long_cell_collapses_only_a_prefix_and_agrees_with_collapsing_all_of_it():
    rng = random.Random(11)
    pieces = ["a", "word", "Zürich", " ", "  ", "\t", "\n", "\u3000", "\x1c", "x" * 90, " " * 200]
    cells = (
        ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 400))) for _ in range(3000)]
        + [
            " " * 500 + "tail",  # the collapsed prefix is empty: the whole cell decides
            "ab " * 14 + "a",  # 43 characters collapsing to exactly 43
            "w " * 80,  # 160 characters (4 x 40): no shortcut
            "w " * 80 + "w",  # 161: the shortcut's prefix collapses to 79 characters
            ("word  " * 10)[:-2] + " " * 300,  # the text fits after collapsing; the trailing run is dropped
            "abcde fghi" + " " * 100,  # collapses to exactly 10 characters: fits at n=10, nothing cut
        ]
    )
    for n in (10, 40, 80):
        for s in cells:
            assert _cut(s, n) == _cut_whole(s, n), (s[:60], n)
