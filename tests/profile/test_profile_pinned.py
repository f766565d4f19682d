"""The full profile of one small crafted frame, every value worked out by hand (fractions for the moments).

It pins what the vectorised and sort-based routes in ``meta`` must reproduce: null and distinct counts,
ranges, moments, most-frequent-first unique values with ties in order of first appearance, kinds, the
markdown head and the ``meta_info`` JSON.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pandas as pd
import pytest

from datamind.profile.meta import profile_table


def _mean_std(values: list[str]) -> tuple[float, float]:
    xs = [Fraction(v) for v in values]
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return float(mean), math.sqrt(var)


@pytest.fixture
def crafted() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "score": [3.5, 1.0, None, 3.5, 2.0, 1.0, 3.5],
            "qty": [2, 2, 5, 7, 5, 2, 9],
            "city": ["Oslo", "Rome", "Oslo", None, "Rome", "Oslo", "Lima"],
            "row_id": [1, 2, 3, 4, 5, 6, 7],
            "level": [0.5, 0.25, 0.75, 0.25, 0.5, 0.75, 0.125],
            "temp": [20.5, -3.25, 7.0, 11.75, 0.5, 15.0, 9.125],
        }
    )


EXPECTED = {
    # name: (kind, n_null, n_unique, min, max, unique_values with unique_cap=3)
    "score": ("numeric", 1, 3, "1", "3.5", ["3.5", "1", "2"]),  # 3.5 x3, 1.0 x2, 2.0 x1
    "qty": ("integer", 0, 4, "2", "9", ["2", "5", "7"]),  # 2 x3, 5 x2, then 7 and 9 once: 7 came first
    "city": ("categorical", 1, 3, None, None, ["Oslo", "Rome", "Lima"]),
    "row_id": ("id", 0, 7, "1", "7", ["1", "2", "3"]),  # all distinct: the first values in order
    "level": ("numeric", 0, 4, "0.125", "0.75", ["0.5", "0.25", "0.75"]),  # three tied at 2: first seen first
    "temp": ("numeric", 0, 7, "-3.25", "20.5", ["20.5", "-3.25", "7"]),
}
MOMENTS = {
    "score": ["3.5", "1", "3.5", "2", "1", "3.5"],
    "qty": ["2", "2", "5", "7", "5", "2", "9"],
    "row_id": ["1", "2", "3", "4", "5", "6", "7"],
    "level": ["0.5", "0.25", "0.75", "0.25", "0.5", "0.75", "0.125"],
    "temp": ["20.5", "-3.25", "7", "11.75", "0.5", "15", "9.125"],
}


def test_column_profiles_match_hand_computed_values(crafted):
    prof = profile_table(crafted, table_name="crafted", unique_cap=3)
    cols = {p["name"]: p for p in prof["column_profiles"]}
    assert list(cols) == list(EXPECTED)
    for name, (kind, n_null, n_unique, lo, hi, top) in EXPECTED.items():
        p = cols[name]
        assert (p["kind"], p["n_null"], p["n_unique"], p["min"], p["max"]) == (kind, n_null, n_unique, lo, hi), name
        assert p["unique_values"] == top, name
        assert p["description"] is None
    for name, values in MOMENTS.items():
        mean, std = _mean_std(values)
        assert cols[name]["mean"] == pytest.approx(mean, rel=1e-12), name
        assert cols[name]["std"] == pytest.approx(std, rel=1e-12), name
    assert cols["city"]["mean"] is None and cols["city"]["std"] is None
    assert [p["dtype"] for p in prof["column_profiles"]] == ["float64", "int64", "str", "int64", "float64", "float64"]


def test_unique_values_are_not_capped_below_the_distinct_count_by_default(crafted):
    cols = {p["name"]: p for p in profile_table(crafted)["column_profiles"]}
    assert cols["qty"]["unique_values"] == ["2", "5", "7", "9"]
    assert cols["level"]["unique_values"] == ["0.5", "0.25", "0.75", "0.125"]
    assert cols["temp"]["unique_values"] == ["20.5", "-3.25", "7", "11.75", "0.5", "15", "9.125"]


def test_meta_info_and_head_match_hand_written_text(crafted):
    prof = profile_table(crafted, table_name="crafted", unique_cap=3, head_rows=3)
    meta = json.loads(prof["meta_info"])
    assert meta["type"] == {name: spec[0] for name, spec in EXPECTED.items()}
    assert meta["range"] == {
        "score": [1, 3.5],
        "qty": [2, 9],
        "row_id": [1, 7],
        "level": [0.125, 0.75],
        "temp": [-3.25, 20.5],
    }
    assert meta["unique"] == {
        "score": ["3.5", "1", "2"],
        "qty": ["2", "5", "7"],
        "city": ["Oslo", "Rome", "Lima"],
        "level": ["0.5", "0.25", "0.75"],
        "temp": ["20.5", "-3.25", "7"],
    }
    assert (meta["row_count"], meta["column_count"]) == (7, 6)
    assert meta["head"] == "\n".join(
        [
            "| score | qty | city | row_id | level | temp |",
            "|---|---|---|---|---|---|",
            "| 3.5 | 2 | Oslo | 1 | 0.5 | 20.5 |",
            "| 1 | 2 | Rome | 2 | 0.25 | -3.25 |",
            "|  | 5 | Oslo | 3 | 0.75 | 7 |",
        ]
    )
    assert meta["description"] == (
        "Table 'crafted': 7 rows x 6 columns. Numeric columns: score, level, temp. Integer columns: qty. "
        "Categorical columns: city. Id columns: row_id."
    )
    assert prof["head_markdown"] == meta["head"] and prof["description"] == meta["description"]
