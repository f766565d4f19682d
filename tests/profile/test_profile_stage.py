"""Profiling shards end to end over the bundled samples (files + BIRD database)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC
from pathlib import Path

import pandas as pd
import pytest
from fakes.costly_files import run_under_parser_cap, shared_strings_workbook

from datamind.assets import DIRS
from datamind.formats import load_table
from datamind.ingest.bird import discover_bird
from datamind.ingest.sources import list_source_files
from datamind.ingest.stage import ingest_shard, plan_ingest
from datamind.profile.stage import plan_profile, profile_shard
from datamind.schemas import CATALOG_FILES, CATALOG_TABLES, REJECTIONS
from datamind.settings import REPO_ROOT, Limits
from datamind.shards import read_rows
from datamind.storage import DataRoot

SAMPLES = REPO_ROOT / "samples"


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    root = DataRoot(str(tmp_path_factory.mktemp("profiled") / "root"))
    limits = Limits()
    for spec in plan_ingest(root, list_source_files(str(SAMPLES / "files"), limits), "samples", 50):
        ingest_shard(root, spec, limits, "r1")
    for spec in plan_ingest(root, discover_bird(str(SAMPLES / "bird")), "bird", 50):
        ingest_shard(root, spec, limits, "r1")
    specs = plan_profile(root, 2)
    json.dumps(specs)
    summaries = [profile_shard(root, s, "r1") for s in specs]
    return root, specs, summaries


def tables(root):
    return {r["table_name"]: r for r in read_rows(root, CATALOG_TABLES, DIRS["catalog_tables"])}


def test_one_row_per_accepted_table(profiled):
    root, specs, summaries = profiled
    assert sum(len(s["files"]) for s in specs) == 6  # 4 accepted sample files + 2 databases
    assert set(tables(root)) == {
        "sales_orders",
        "wetter_muenchen",
        "employees_latin1",
        "Q1 Sales",
        "Targets",
        "customers",
        "products",
        "orders",
        "country",
        "city",
        "countrylanguage",
    }
    assert sum(s["failed_files"] for s in summaries) == 0


def test_each_column_gets_its_analyst_role_once_at_profiling(profiled):
    root, _, _ = profiled
    roles = {(n, p["name"]): p["role"] for n, row in tables(root).items() for p in row["column_profiles"]}
    assert None not in roles.values()
    # declared keys and codes are identifiers, whatever their type; a price per unit and a share are not summed
    assert roles[("orders", "order_id")] == roles[("orders", "customer_id")] == "identifier"
    assert roles[("country", "Code")] == roles[("city", "CountryCode")] == roles[("city", "ID")] == "identifier"
    assert roles[("orders", "total")] == roles[("city", "Population")] == "additive_measure"
    assert roles[("products", "list_price")] == roles[("countrylanguage", "Percentage")] == "nonadditive_measure"
    assert roles[("country", "LifeExpectancy")] == "nonadditive_measure"
    assert roles[("orders", "status")] == "category"
    assert tables(root)["countrylanguage"]["primary_key"] == ["CountryCode", "Language"]


def test_rerun_plans_nothing(profiled):
    root, _, _ = profiled
    assert plan_profile(root, 2) == []


def test_rows_describe_what_reloading_gives(profiled):
    root, _, _ = profiled
    for name, row in tables(root).items():
        df = load_table(row["staged_uri"], json.loads(row["read_options"]))
        meta = json.loads(row["meta_info"])
        assert (row["n_rows"], row["n_cols"]) == df.shape == (meta["row_count"], meta["column_count"]), name
        assert row["columns"] == meta["columns"] == [str(c) for c in df.columns]
        for p in row["column_profiles"]:
            assert p["n_null"] == int(df[p["name"]].isna().sum()), (name, p["name"])


def test_semicolon_csv_profile(profiled):
    row = tables(profiled[0])["wetter_muenchen"]
    meta = json.loads(row["meta_info"])
    raw = (SAMPLES / "files" / "wetter_muenchen.csv").read_text(encoding="utf-8").splitlines()[1:]
    temps = [float(line.split(";")[2].replace(",", ".")) for line in raw]
    assert meta["range"]["Temperatur (°C)"] == [min(temps), max(temps)]
    assert meta["type"]["Datum"] == "datetime" and meta["range"]["Datum"] == ["2023-03-01", "2023-08-27"]


def test_sqlite_tables_carry_ddl_foreign_keys_and_bird_descriptions(profiled):
    root, _, _ = profiled
    orders = tables(root)["orders"]
    db = Path(orders["staged_uri"])
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    expected_fks = sorted((r[3], r[2], r[4]) for r in con.execute("PRAGMA foreign_key_list(orders)"))
    ddl = con.execute("SELECT sql FROM sqlite_master WHERE name = 'orders'").fetchone()[0]
    count = con.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
    con.close()
    assert orders["ddl"] == ddl and orders["n_rows"] == count == 2400
    assert sorted((k["from_column"], k["to_table"], k["to_column"]) for k in orders["foreign_keys"]) == expected_fks
    status = next(p for p in orders["column_profiles"] if p["name"] == "status")
    assert status["description"].startswith("fulfilment status")
    assert "Foreign keys:" in orders["description"] and "status: fulfilment status" in orders["description"]
    products = tables(root)["products"]
    price = next(p for p in products["column_profiles"] if p["name"] == "list_price")
    assert "€" in price["description"]


def test_workbook_sheet_profile(profiled):
    row = tables(profiled[0])["Q1 Sales"]
    opts = json.loads(row["read_options"])
    assert (opts["sheet"], opts["header_start"], opts["header_rows"]) == ("Q1 Sales", 2, 1)
    meta = json.loads(row["meta_info"])
    assert meta["type"]["Date"] == "datetime" and meta["row_count"] == 150
    assert sorted(meta["unique"]["Region"]) == ["East", "North", "South", "West"]


def test_missing_staged_file_is_recorded_not_dropped(tmp_path):
    root = DataRoot(str(tmp_path / "root"))
    limits = Limits()
    src = tmp_path / "src"
    src.mkdir()
    pd.DataFrame({"a": range(30), "b": ["x", "y", "z"] * 10}).to_csv(src / "t.csv", index=False)
    for spec in plan_ingest(root, list_source_files(str(src), limits), "s", 10):
        ingest_shard(root, spec, limits, "r1")
    for p in (Path(root.path("raw"))).rglob("*.csv"):
        p.unlink()
    (spec,) = plan_profile(root, 10)
    summary = profile_shard(root, spec, "r1")
    assert summary["failed_files"] == 1 and summary["tables"] == 0
    (rej,) = read_rows(root, REJECTIONS, DIRS["rejections"])
    assert rej["stage"] == "profile" and rej["file_id"] == spec["files"][0]
    assert plan_profile(root, 10) == []  # recorded failures are not retried forever


# The profiling process's peak RSS (VmHWM: ru_maxrss would carry the forking pytest's peak over the exec)
_PROFILE_AND_MEASURE = """
import json, sys
from datamind.profile.stage import plan_profile, profile_shard
from datamind.storage import DataRoot
def peak_kb():
    return int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1])
root = DataRoot(sys.argv[1])
specs = plan_profile(root, 50)
before = peak_kb()
summaries = [profile_shard(root, s, "r1") for s in specs]
print(json.dumps({"before_kb": before, "after_kb": peak_kb(), "tables": sum(s["tables"] for s in summaries)}))
"""


def test_a_staged_workbook_past_the_parser_caps_costs_only_itself_at_profiling(tmp_path):
    """Ingestion accepted a workbook whose shared-strings table costs ~110 MB to read; profiling reads it again
    under the parser's caps (here set just above what the parser child needs to start), so it is recorded
    with the reason and the profiling process never holds it; the good files beside it are profiled."""
    import sys

    root = DataRoot(str(tmp_path / "root"))
    src = tmp_path / "src"
    src.mkdir()
    pd.DataFrame({"a": range(30), "b": ["x", "y", "z"] * 10}).to_csv(src / "good.csv", index=False)
    shared_strings_workbook(src / "good_book.xlsx", 10)
    shared_strings_workbook(src / "strings.xlsx", 2_000_000)
    limits = Limits()  # ingestion's default caps let all three through
    for spec in plan_ingest(root, list_source_files(str(src), limits), "s", 10):
        ingest_shard(root, spec, limits, "r1")
    # the child's own start (the loaders, the workbook reader) plus 64 MB: what the small files need
    cap_mb, measured, grown_mb = run_under_parser_cap([sys.executable, "-c", _PROFILE_AND_MEASURE, root.path("")], 300)
    print(f"\nprofiling under a {cap_mb} MB parser cap: peak RSS {measured['before_kb'] / 1024:.0f} -> "
          f"{measured['after_kb'] / 1024:.0f} MB")  # fmt: skip
    assert grown_mb < 60, grown_mb  # read in this process (before the fix): +110 MB
    assert {r["table_name"] for r in read_rows(root, CATALOG_TABLES, DIRS["catalog_tables"])} == {"good", "Sheet1"}
    (rej,) = read_rows(root, REJECTIONS, DIRS["rejections"])
    files = {r["file_id"]: r["rel_path"] for r in read_rows(root, CATALOG_FILES, DIRS["catalog_files"])}
    assert rej["stage"] == "profile" and files[rej["file_id"]] == "strings.xlsx"
    assert "parse_limit" in rej["reason"] and f"{cap_mb:,} MB cap" in rej["reason"], rej["reason"]
    assert plan_profile(root, 10) == []  # recorded: not profiled again and again


def test_files_are_parsed_a_group_at_a_time_then_profiled_into_the_same_rows(profiled, monkeypatch):
    from datetime import datetime

    from datamind.profile import stage
    from datamind.schemas import CATALOG_FILES

    root, _, _ = profiled
    accepted = [r for r in read_rows(root, CATALOG_FILES, DIRS["catalog_files"]) if r["status"] == "accepted"]
    files = sorted(accepted, key=lambda r: r["file_id"])
    now = datetime(2026, 1, 1, tzinfo=UTC)
    one_by_one = [stage.profile_file(root, r, "r1", now) for r in files]
    assert all(rows and reason is None for rows, reason in one_by_one)
    events: list[str] = []
    load, profile = stage._load_file, stage.profile_tables
    monkeypatch.setattr(stage, "_load_file", lambda *a: events.append("load") or load(*a))
    monkeypatch.setattr(stage, "profile_tables", lambda *a: events.append("profile") or profile(*a))
    # the default budget holds the five files: all are parsed, then their tables profiled together
    assert list(stage.profile_files(root, files, "r1", now)) == one_by_one
    assert events == ["load"] * len(files) + ["profile"]
    events.clear()
    monkeypatch.setattr(stage, "_GROUP_CELLS", 1)  # each file fills a group on its own
    assert list(stage.profile_files(root, files, "r1", now)) == one_by_one
    assert events == ["load", "profile"] * len(files)


def test_the_cycle_collector_is_off_only_while_a_group_is_profiled(profiled, monkeypatch):
    import gc
    from datetime import datetime

    from datamind.profile import stage
    from datamind.schemas import CATALOG_FILES

    root, _, _ = profiled
    files = [r for r in read_rows(root, CATALOG_FILES, DIRS["catalog_files"]) if r["status"] == "accepted"]
    seen: list[bool] = []
    profile = stage.profile_tables
    monkeypatch.setattr(stage, "profile_tables", lambda *a: seen.append(gc.isenabled()) or profile(*a))
    assert gc.isenabled()
    for _ in stage.profile_files(root, files, "r1", datetime(2026, 1, 1, tzinfo=UTC)):
        assert gc.isenabled()  # never left off while the caller runs
    assert seen == [False] and gc.isenabled()
