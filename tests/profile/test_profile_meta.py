"""profile_table on hand-built frames; expected values are computed here, by hand or with numpy."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pandas as pd
import pytest

from datamind.profile.meta import profile_table

META_KEYS = {"description", "head", "columns", "type", "range", "unique", "row_count", "column_count"}


@pytest.fixture
def frame() -> pd.DataFrame:
    n = 40
    return pd.DataFrame(
        {
            "order_id": np.arange(1, n + 1),
            "day": [f"2024-02-{i % 28 + 1:02d}" for i in range(n)],
            "region": ["North"] * 20 + ["South"] * 12 + ["East"] * 8,
            "units": [i % 7 for i in range(n)],
            "price": [None if i % 10 == 0 else i * 1.25 for i in range(n)],
            "note": [f"free text number {i} with words" for i in range(n)],
            "paid": ["yes" if i % 3 else "no" for i in range(n)],
            "weight_txt": [f"{i * 0.5:.1f}" for i in range(n)],
        }
    )


def test_meta_info_has_exactly_the_prompt_keys(frame):
    prof = profile_table(frame, table_name="orders")
    meta = json.loads(prof["meta_info"])
    assert set(meta) == META_KEYS
    assert meta["row_count"] == 40 and meta["column_count"] == 8
    assert meta["columns"] == list(frame.columns)


def test_kinds(frame):
    meta = json.loads(profile_table(frame)["meta_info"])
    assert meta["type"] == {
        "order_id": "id",
        "day": "datetime",
        "region": "categorical",
        "units": "integer",
        "price": "numeric",
        "note": "text",
        "paid": "boolean",
        "weight_txt": "numeric",
    }


def test_statistics_match_an_independent_computation(frame):
    prof = profile_table(frame)
    cols = {p["name"]: p for p in prof["column_profiles"]}
    price = [v for v in frame["price"] if v is not None and not pd.isna(v)]
    assert cols["price"]["n_null"] == 4
    assert cols["price"]["mean"] == pytest.approx(statistics.mean(price))
    assert cols["price"]["std"] == pytest.approx(statistics.stdev(price))
    assert float(cols["price"]["min"]) == min(price) and float(cols["price"]["max"]) == max(price)
    assert cols["units"]["n_unique"] == 7
    assert cols["day"]["min"] == "2024-02-01" and cols["day"]["max"] == "2024-02-28"
    assert float(cols["weight_txt"]["max"]) == 19.5
    meta = json.loads(prof["meta_info"])
    assert meta["range"]["units"] == [0, 6]
    assert meta["range"]["order_id"] == [1, 40]


def test_unique_values_are_most_frequent_first_and_capped(frame):
    prof = profile_table(frame, unique_cap=2)
    cols = {p["name"]: p for p in prof["column_profiles"]}
    assert cols["region"]["unique_values"] == ["North", "South"]
    meta = json.loads(prof["meta_info"])
    assert meta["unique"]["region"] == ["North", "South"]
    assert "note" not in meta["unique"] and "order_id" not in meta["unique"]  # text and ids are not enumerated


def test_head_is_a_markdown_table_of_the_first_rows(frame):
    head = json.loads(profile_table(frame, head_rows=3)["meta_info"])["head"]
    lines = head.splitlines()
    assert lines[0] == "| " + " | ".join(frame.columns) + " |"
    assert len(lines) == 2 + 3
    assert lines[2].startswith("| 1 | 2024-02-01 | North | 0 |  | free text number 0")


def test_descriptions_flow_into_profiles_and_the_table_description(frame):
    prof = profile_table(
        frame,
        table_name="orders",
        description="Foreign keys: orders.x -> y.x.",
        column_descriptions={"REGION": "sales region of the store"},
    )
    cols = {p["name"]: p for p in prof["column_profiles"]}
    assert cols["region"]["description"] == "sales region of the store"
    assert cols["units"]["description"] is None
    desc = json.loads(prof["meta_info"])["description"]
    assert desc.startswith("Table 'orders': 40 rows x 8 columns.")
    assert "Foreign keys: orders.x -> y.x." in desc and "region: sales region of the store" in desc


def test_edge_columns_empty_mixed_and_bytes():
    df = pd.DataFrame(
        {
            "empty": [None] * 5,
            "mixed": pd.Series([1, "two", 3.5, None, "five"], dtype=object),
            "blob": pd.Series([b"\x00\x01", b"\x02", None, b"\x00\x01", b"\x03"], dtype=object),
        }
    )
    cols = {p["name"]: p for p in profile_table(df)["column_profiles"]}
    assert cols["empty"]["n_null"] == 5 and cols["empty"]["n_unique"] == 0
    assert cols["mixed"]["n_unique"] == 4 and cols["mixed"]["n_null"] == 1
    assert cols["blob"]["kind"] == "binary" and cols["blob"]["n_unique"] == 3
