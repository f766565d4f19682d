"""The synthesis stage end to end (offline backend): planning, shards, summaries, reruns, bad input."""

from __future__ import annotations

import json
import os
from collections import Counter

import pyarrow.parquet as pq
import pytest
from synth_fixtures import catalog_rows, write_catalog

from datamind.assets import DIRS
from datamind.schemas import CATALOG_FILES, CATALOG_TABLES, QUERIES, REJECTIONS
from datamind.shards import read_rows
from datamind.storage import DataRoot
from datamind.synth.params import SynthParams
from datamind.synth.stage import output_dir, plan_synthesis, summarize_run, synthesize_shard

FORM = {"queries_per_category": 2, "n_chains": 2, "shard_size": 2}
PARAMS = SynthParams.from_form(FORM)


@pytest.fixture
def catalog(root, small_csv, small_sqlite):
    rows = catalog_rows(small_csv) + catalog_rows(small_sqlite)
    write_catalog(root, rows)
    return {r["table_id"]: r for r in rows}


def test_stage_writes_queries_rejections_and_summaries_then_reruns_as_a_no_op(root, catalog):
    specs = plan_synthesis(root, 2, PARAMS)
    assert sorted(t for s in specs for t in s["table_ids"]) == sorted(catalog) and [
        len(s["table_ids"]) for s in specs
    ] == [2, 1]
    summaries = [synthesize_shard(root, s, PARAMS, run_id="run-1") for s in specs]
    assert not any(s["reused"] for s in summaries)
    assert "reference_unverified" not in sum((Counter(s["rejections"]) for s in summaries), Counter())

    rows = read_rows(root, QUERIES, "queries")
    assert len(rows) == sum(s["n_queries"] for s in summaries) > 50
    assert len({r["query_id"] for r in rows}) == len(rows)
    # the summary's counts agree with the rows actually written
    assert Counter(r["category"] for r in rows) == sum((Counter(s["by_category"]) for s in summaries), Counter())
    assert Counter(str(r["hop"]) for r in rows) == sum((Counter(s["by_hop"]) for s in summaries), Counter())
    assert {r["hop"] for r in rows} >= {1, 2}
    assert all(
        r["backend"] == "offline" and r["reference_answer"] and r["template_version"].startswith("offline-")
        for r in rows
    )
    by_id = {r["query_id"]: r for r in rows}
    for r in rows:  # lineage resolves inside the output
        assert all(p in by_id for p in r["parent_query_ids"]) and r["root_query_id"] in by_id

    for s in summaries:  # each shard's commit record names its Parquet shard and carries its summary
        (parquet,) = [root.path(p) for p in s["files"]["queries"]]
        record = json.loads(root.read_text(output_dir(PARAMS), "_commits", f"{s['shard_id']}.json"))
        assert record["items"] == sorted(s["table_ids"]) and record["n_queries"] == s["n_queries"]
        meta = pq.read_schema(parquet).metadata
        assert meta[b"datamind.table"] == b"queries" and meta[b"datamind.schema_version"] == QUERIES.version.encode()

    # the key-and-name-only shops table cannot support numeric categories: recorded, not silently empty
    shops = next(t for t, r in catalog.items() if r["table_name"] == "shops")
    skipped = [d for s in summaries for d in s["skip_details"] if d["table_id"] == shops]
    assert {d["category"] for d in skipped} >= {"aggregation", "correlation_analysis", "time_based_calculation"}

    run = summarize_run(root, PARAMS, "run-1")
    assert (
        run["n_queries"] == len(rows)
        and run["n_tables"] == 3
        and run["by_category"] == dict(Counter(r["category"] for r in rows))
    )
    assert os.path.exists(root.path(output_dir(PARAMS), "run-run-1.summary.json"))

    # rerun: nothing planned, an explicit shard call reuses its summary and rewrites nothing
    mtimes = {p: os.path.getmtime(p) for p in root.glob("queries", "**", "*")}
    assert plan_synthesis(root, 2, PARAMS) == []
    again = synthesize_shard(root, specs[0], PARAMS, run_id="run-2")
    assert again["reused"] and again["n_queries"] == summaries[0]["n_queries"]
    assert {p: os.path.getmtime(p) for p in root.glob("queries", "**", "*")} == mtimes
    assert len(read_rows(root, QUERIES, "queries")) == len(rows)


def test_new_parameters_get_their_own_partition(root, catalog):
    form = {**FORM, "verify_solutions": False}
    params = SynthParams.from_form(form)
    first = plan_synthesis(root, 10, params)
    synthesize_shard(root, first[0], params, "r")
    other = SynthParams.from_form({**form, "seed": 5, "categories": ["ranking", "counting"], "n_chains": 0})
    (spec,) = plan_synthesis(root, 10, other)
    assert spec["params_fingerprint"] != first[0]["params_fingerprint"]
    summary = synthesize_shard(root, spec, other, "r")
    assert set(summary["by_category"]) <= {"ranking", "counting"} and summary["by_hop"] == {"1": summary["n_queries"]}
    with pytest.raises(ValueError, match="different synthesis parameters"):
        synthesize_shard(root, spec, params, "r")


def test_missing_and_unreadable_tables_become_rejections(root, catalog, small_csv, tmp_path):
    gone = tmp_path / "gone.csv"
    gone.write_text(small_csv.read_text())
    (gone_row,) = catalog_rows(gone)
    write_catalog(root, [gone_row])
    gone.unlink()
    spec = {
        "shard_id": "s1",
        "table_ids": [gone_row["table_id"], "no-such-table"],
        "params_fingerprint": PARAMS.fingerprint,
    }
    summary = synthesize_shard(root, spec, PARAMS, "r")
    assert summary["n_queries"] == 0
    assert summary["rejections"] == {"table_not_in_catalog": 1, "table_unreadable": 1}
    rej = read_rows(root, REJECTIONS, "rejections")
    assert {r["stage"] for r in rej} == {"synthesis"} and all(r["reason"] for r in rej)
    # the shard is done (summary written): its tables are not planned again
    assert gone_row["table_id"] not in {t for s in plan_synthesis(root, 10, PARAMS) for t in s["table_ids"]}


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"categories": ["nope"]}, r"categories \(Task categories\) must be one of .*got 'nope'"),
        ({"min_hops": 1}, "min_hops"),
        ({"max_hops": 6}, "max_hops"),
        ({"backend": "gpt"}, "backend"),
        ({"queries_per_category": -1}, "queries_per_category"),
        ({"colour": "red"}, "unknown SynthParams parameter"),
    ],
)
def test_bad_parameters_fail_clearly(bad, message):
    with pytest.raises(ValueError, match=message):
        SynthParams.from_form(bad)


def test_llm_backend_without_a_client_is_refused(root, catalog):
    params = SynthParams.from_form({**FORM, "backend": "llm"})
    (spec, *_) = plan_synthesis(root, 10, params)
    with pytest.raises(ValueError, match="llm_client"):
        synthesize_shard(root, spec, params, "r")
    assert json.loads(json.dumps(params.to_dict()))["backend"] == "llm"


def test_a_stored_answer_that_the_standalone_program_does_not_reproduce_is_rejected(root, catalog, monkeypatch):
    """If in-process execution and the stored program text ever disagree, the row (and its chain) is dropped."""
    import datamind.synth.offline.engine as engine

    real = engine.run_body_on_frame

    def wrong_for_medians(imports, body, df):
        answer = real(imports, body, df)
        return "12345.0" if ".median()" in body else answer

    monkeypatch.setattr(engine, "run_body_on_frame", wrong_for_medians)
    params = SynthParams.from_form(
        {**FORM, "categories": ["statistical_analysis", "comparison", "ranking"], "queries_per_category": 3}
    )
    summaries = [synthesize_shard(root, s, params, "r") for s in plan_synthesis(root, 10, params)]
    rows = read_rows(root, QUERIES, "queries")
    rejected = [r for r in read_rows(root, REJECTIONS, "rejections") if r["reason_code"] == "reference_unverified"]
    assert rejected and all(".median()" in r["raw"] or "parent" in r["reason"] for r in rejected)
    assert any("printed" in r["reason"] and "12345.0" in r["reason"] for r in rejected)
    assert not any(".median()" in (r["reference_solution"] or "") for r in rows)
    ids = {r["query_id"] for r in rows}
    assert all(p in ids for r in rows for p in r["parent_query_ids"])  # no orphaned chain hops
    assert sum(s["n_verified_solutions"] for s in summaries) == len(rows)


# The synthesizing process's peak RSS (VmHWM: ru_maxrss would carry the forking pytest's peak over the exec),
# measured after a warm-up shard of small files in the same process: what the libraries, the engine and the
# programs cost once (~100 MB) is then in both figures, and their difference is the measured shard's reading.
_SYNTHESIZE_AND_MEASURE = """
import json, sys
from datamind.synth.params import SynthParams
from datamind.synth.stage import plan_synthesis, synthesize_shard
from datamind.storage import DataRoot
def peak_kb():
    return int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1])
params = SynthParams.from_form(json.loads(sys.argv[3]))
for name in ("warm", "measured"):
    root = DataRoot(sys.argv[1 if name == "warm" else 2])
    (spec,) = plan_synthesis(root, 10, params)
    before = peak_kb()
    summary = synthesize_shard(root, spec, params, "r1")
print(json.dumps({"before_kb": before, "after_kb": peak_kb(), "summary": summary}))
"""


def _staged_root(path, files: dict) -> DataRoot:
    """A data root where ingestion and profiling (their default caps) accepted ``files`` (name -> writer)."""
    from datamind.ingest.sources import list_source_files
    from datamind.ingest.stage import ingest_shard, plan_ingest
    from datamind.profile.stage import plan_profile, profile_shard
    from datamind.settings import Limits
    from datamind.storage import DataRoot

    src = path / "src"
    src.mkdir(parents=True)
    for name, write in files.items():
        write(src / name)
    root = DataRoot(str(path / "root"))
    limits = Limits()
    for spec in plan_ingest(root, list_source_files(str(src), limits), "s", 10):
        ingest_shard(root, spec, limits, "r1")
    for spec in plan_profile(root, 10):
        profile_shard(root, spec, "r1")
    return root


def test_a_staged_workbook_past_the_parser_caps_costs_only_its_table_at_synthesis(tmp_path):
    """Ingestion and profiling accepted a workbook whose shared-strings table costs ~110 MB to read; synthesis
    reads it again under the parser's caps (here set just above what the parser child needs to start), so the
    table is rejected with the reason, the synthesizing process never holds it, and the shard's other tables
    (a CSV, a small workbook) are synthesized."""
    import sys

    from fakes.costly_files import run_under_parser_cap, shared_strings_workbook

    regions = ["north", "south", "east", "west"]
    rows = (f"{regions[i % 4]},{5 * (i + 1)},{1.5 * (i % 7 + 1)},2024-{i % 12 + 1:02d}-1{i % 9}" for i in range(40))
    sales = "region,units,price,day\n" + "\n".join(rows) + "\n"
    small = {
        "sales.csv": lambda p: p.write_text(sales),
        "good_book.xlsx": lambda p: shared_strings_workbook(p, 10),
    }
    warm = _staged_root(tmp_path / "warm", small)
    costly = {**small, "strings.xlsx": lambda p: shared_strings_workbook(p, 2_000_000)}
    root = _staged_root(tmp_path / "measured", costly)
    script = [sys.executable, "-c", _SYNTHESIZE_AND_MEASURE, warm.path(""), root.path(""), json.dumps(FORM)]
    cap_mb, measured, grown_mb = run_under_parser_cap(script, 600)
    print(f"\nsynthesis under a {cap_mb} MB parser cap: peak RSS {measured['before_kb'] / 1024:.0f} -> "
          f"{measured['after_kb'] / 1024:.0f} MB")  # fmt: skip
    assert grown_mb < 40, grown_mb  # read in this process (before the fix): +110 MB

    summary = measured["summary"]
    assert summary["n_tables"] == 3 and summary["rejections"].get("parse_limit") == 1, summary["rejections"]
    (rej,) = [r for r in read_rows(root, REJECTIONS, DIRS["rejections"]) if r["reason_code"] == "parse_limit"]
    files = {r["file_id"]: r["rel_path"] for r in read_rows(root, CATALOG_FILES, DIRS["catalog_files"])}
    assert rej["stage"] == "synthesis" and files[rej["file_id"]] == "strings.xlsx"
    assert f"{cap_mb:,} MB cap" in rej["reason"], rej["reason"]
    tables = read_rows(root, CATALOG_TABLES, DIRS["catalog_tables"])
    queried = {r["table_id"] for r in read_rows(root, QUERIES, DIRS["queries"])}
    assert queried == {t["table_id"] for t in tables if files[t["file_id"]] != "strings.xlsx"}
    assert len(queried) == 2  # the CSV and the small workbook
    # the shard committed: the rejected table is not planned again and again
    assert plan_synthesis(root, 10, PARAMS) == []
