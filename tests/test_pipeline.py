"""Stage finalizers: shard summaries merge into run totals; only this run's rows are validated."""

from __future__ import annotations

from datetime import datetime, timezone

from datamind.pipeline import merge_summaries, rows_of_run
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
    now = datetime.now(timezone.utc)
    rows = [
        {"item_id": f"i{n}", "stage": "s", "reason_code": "r", "created_at": now, "run_id": run}
        for n, run in enumerate(["run-a", "run-b", "run-a"])
    ]
    write_shard(root, REJECTIONS, "rejections", rows[:2], "part-1.parquet")
    write_shard(root, REJECTIONS, "rejections", rows[2:], "part-2.parquet")
    assert sorted(rows_of_run(root, "rejections", "run-a").column("item_id").to_pylist()) == ["i0", "i2"]
    assert rows_of_run(root, "rejections", "run-c").num_rows == 0
