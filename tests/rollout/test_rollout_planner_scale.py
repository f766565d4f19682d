"""The sampling planner reads its output once, whatever the number of queries (it once re-read every
trajectory shard for each query)."""

from __future__ import annotations

from datetime import datetime, timezone

from datamind.rollout import stage
from datamind.schemas import QUERIES, TRAJECTORIES
from datamind.shards import write_shard

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _queries(n: int) -> list[dict]:
    return [
        {
            "query_id": f"q{i:05d}",
            "file_id": "f",
            "category": "counting",
            "hop": 1,
            "question": f"q {i}",
            "backend": "offline",
            "created_at": NOW,
        }
        for i in range(n)
    ]


def _trajectories(ids: list[str]) -> list[dict]:
    return [
        {
            "trajectory_id": f"t{q}",
            "query_id": q,
            "sample_index": 0,
            "reflection_round": 0,
            "messages": [],
            "status": "answered",
            "created_at": NOW,
        }
        for q in ids
    ]


def test_planning_thousands_of_queries_reads_the_output_a_bounded_number_of_times(root, monkeypatch):
    queries = _queries(3000)
    write_shard(root, QUERIES, "queries", queries, "part-q.parquet")
    done = [q["query_id"] for q in queries[:1000]]
    for k in range(0, len(done), 250):  # several output shards
        write_shard(root, TRAJECTORIES, "trajectories", _trajectories(done[k : k + 250]), f"part-{k}.parquet")
    opened = []
    real = type(root).open
    monkeypatch.setattr(
        type(root), "open", lambda self, path, *a, **kw: opened.append(path) or real(self, path, *a, **kw)
    )
    specs = stage.plan_sampling(root, 500, {})
    planned = [q for s in specs for q in s["query_ids"]]
    assert planned == [q["query_id"] for q in queries[1000:]] and len(specs) == 4
    # every shard of queries and trajectories is read once, not once per query
    assert len(opened) == len(set(opened)) == 1 + 4, opened
