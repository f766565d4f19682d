"""Stage finalizers: shard summaries merge into run totals; this run's rows (and unreported runs') are validated."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from datamind.pipeline import finalize_stage, merge_summaries, rows_of_run
from datamind.schemas import REJECTIONS
from datamind.shards import write_shard
from datamind.storage import DataRoot


def test_counts_sum_through_nested_dicts_and_descriptive_fields_are_not_summed():
    a = {"files": 3, "reasons": {"too_few_rows": 1}, "by_hop": {"1": {"csv": 2}}, "params": {"seed": 7}, "ok": True}
    b = {
        "files": 2,
        "reasons": {"too_few_rows": 2, "unloadable": 1},
        "by_hop": {"1": {"csv": 1, "xlsx": 4}},
        "params": {"seed": 7},
    }
    assert merge_summaries([a, b, {}]) == {
        "files": 5,
        "reasons": {"too_few_rows": 3, "unloadable": 1},
        "by_hop": {"1": {"csv": 3, "xlsx": 4}},
    }


def test_rows_of_run_keeps_only_that_run(tmp_path):
    root = DataRoot(str(tmp_path))
    now = datetime.now(UTC)
    rows = [
        {"item_id": f"i{n}", "stage": "s", "reason_code": "r", "created_at": now, "run_id": run}
        for n, run in enumerate(["run-a", "run-b", "run-a"])
    ]
    write_shard(root, REJECTIONS, "rejections", rows[:2], "part-1.parquet")
    write_shard(root, REJECTIONS, "rejections", rows[2:], "part-2.parquet")
    assert sorted(rows_of_run(root, "rejections", "run-a").column("item_id").to_pylist()) == ["i0", "i2"]
    assert rows_of_run(root, "rejections", "run-c").num_rows == 0


def test_rows_of_a_run_killed_before_its_quality_check_are_validated_by_the_next_run(tmp_path):
    root = DataRoot(str(tmp_path))
    now = datetime.now(UTC)

    def rows(run: str, n: int) -> list[dict]:
        return [
            {"item_id": f"{run}-{i}", "stage": "s", "reason_code": "r", "created_at": now, "run_id": run}
            for i in range(n)
        ]

    write_shard(root, REJECTIONS, "rejections", rows("run-a", 2), "part-a.parquet")
    first = finalize_stage(root, "rejections", "demo", [], "run-a")
    assert first["new_rows"] == 2 and "unreported_runs_covered" not in first
    # run-b writes its shard and is killed before its finalizer: nothing reports its rows...
    write_shard(root, REJECTIONS, "rejections", rows("run-b", 3), "part-b.parquet")
    # ...so run-c, which wrote one row, validates four and says whose they are.
    write_shard(root, REJECTIONS, "rejections", rows("run-c", 1), "part-c.parquet")
    third = finalize_stage(root, "rejections", "demo", [], "run-c")
    assert third["new_rows"] == 4 and third["unreported_runs_covered"] == ["run-b"]
    summary = json.loads((tmp_path / "reports" / "demo" / "run-c" / "summary.json").read_text())
    assert summary["covers_runs"] == ["run-b"] and summary["summary"]["n_rows"] == 4
    # Covered once is enough: the next run checks only its own rows again.
    write_shard(root, REJECTIONS, "rejections", rows("run-d", 1), "part-d.parquet")
    fourth = finalize_stage(root, "rejections", "demo", [], "run-d")
    assert fourth["new_rows"] == 1 and "unreported_runs_covered" not in fourth


def test_an_ingest_report_covers_its_own_source_never_another_sources_earlier_runs(tmp_path):
    """Issue 47: the report of a new source's ingest listed the demo's earlier rejections (other sources' files)
    as "runs that never reported". The catalog is shared; a run's report covers its own source's rows."""
    from datamind.pipeline import finalize_ingest
    from datamind.schemas import CATALOG_FILES

    root = DataRoot(str(tmp_path))
    now = datetime.now(UTC)

    def rows(source: str, run: str, names: list[str], status: str = "accepted") -> list[dict]:
        return [
            {"file_id": f"{source}-{n}", "source": source, "source_uri": f"/in/{n}", "rel_path": n, "format": "csv",
             "status": status, "reason_code": None if status == "accepted" else "too_few_rows",
             "reason": None if status == "accepted" else "2 rows", "content_sha256": "0" * 64, "size_bytes": 10,
             "n_tables": 1, "n_rows": 50, "n_cols": 3, "ingested_at": now, "run_id": run}
            for n in names
        ]  # fmt: skip

    # the demo's source: one run that reported, one killed before its report (its rejections never validated)
    write_shard(root, CATALOG_FILES, "catalog/files", rows("samples", "demo-1", ["sales.csv"]), "part-a.parquet")
    finalize_ingest(root, [], "samples", "demo-1")
    killed = rows("samples", "demo-2", ["sensor_dump.csv", "survey_pilot.csv"], status="rejected")
    write_shard(root, CATALOG_FILES, "catalog/files", killed, "part-b.parquet")
    # a new source is backfilled: its report is about its three files only
    new = rows("backfill", "backfill-1", ["auto-mpg.csv", "iris.csv", "wine.csv"])
    write_shard(root, CATALOG_FILES, "catalog/files", new, "part-c.parquet")
    result = finalize_ingest(root, [], "backfill", "backfill-1")
    assert result["new_rows"] == 3 and "unreported_runs_covered" not in result and result["rejected"] == {}
    summary = json.loads((tmp_path / "reports" / "ingest_backfill" / "backfill-1" / "summary.json").read_text())
    assert summary["covers_runs"] == [] and summary["summary"]["n_rows"] == 3
    # the demo source's next run still picks up its own killed run's rows
    write_shard(root, CATALOG_FILES, "catalog/files", rows("samples", "demo-3", ["more.csv"]), "part-d.parquet")
    again = finalize_ingest(root, [], "samples", "demo-3")
    assert again["new_rows"] == 3 and again["unreported_runs_covered"] == ["demo-2"]
    assert again["rejected"] == {"too_few_rows": 2}


def test_a_judge_runs_counts_and_checks_are_the_rows_it_wrote_not_the_whole_judged_table(tmp_path):
    """Issue 47: the backfill page showed judge_trajectories "rows out 12" for a run that kept 9 samples, and its
    report validated all 12. The judged rows name no run; an earlier release's 3 sat in the same table."""
    import random

    from review.release_builder import sample_row

    from datamind.schemas import DATASET

    root = DataRoot(str(tmp_path))
    rng = random.Random(3)

    def judge_run(run: str, first: int, n: int, shard_size: int) -> dict:
        summaries = []
        for k in range(first, first + n, shard_size):
            rows = [sample_row(i, rng) for i in range(k, min(first + n, k + shard_size))]
            path = write_shard(root, DATASET, "judged/con_select", rows, f"part-{run}{k}.parquet")
            summaries.append({"path": path, "n_queries": len(rows) + 1, "n_judged_samples": len(rows)})
        written = [s["path"] for s in summaries]
        return finalize_stage(root, "dataset", "judge_trajectories", summaries, run, rel_dir="judged", written=written)

    first = judge_run("one", 0, 3, 3)
    second = judge_run("two", 100, 9, 5)  # two shards
    assert (first["new_rows"], second["new_rows"]) == (3, 9)
    assert second["n_queries"] == 11 and second["n_judged_samples"] == 9  # in and out, from its shards only
    summary = json.loads((tmp_path / "reports" / "judge_trajectories" / "two" / "summary.json").read_text())
    assert summary["summary"]["n_rows"] == 9
    # a run that judged nothing new checks nothing and announces nothing, instead of the whole table again
    idle = finalize_stage(root, "dataset", "judge_trajectories", [], "three", rel_dir="judged", written=[])
    assert idle["new_rows"] == 0 and idle["quality"] == "no new rows to validate"
    # a release folder is all its run's: without ``written`` the whole folder is read, as publishing validates it
    assert rows_of_run(root, "dataset", "any", rel_dir="judged").num_rows == 12
