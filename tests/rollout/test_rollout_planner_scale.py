"""The sampling planner reads its output once, whatever the number of queries (it once re-read every
trajectory shard for each query)."""

from __future__ import annotations

from datetime import UTC, datetime

from datamind import shards
from datamind.agent.params import RolloutParams
from datamind.judge.params import JudgeParams
from datamind.rollout import stage
from datamind.schemas import QUERIES, TRAJECTORIES
from datamind.shards import write_shard

NOW = datetime(2026, 1, 1, tzinfo=UTC)


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
    real, real_source = type(root).open, shards.parquet_source
    # a local shard reaches Arrow by its path (shards.parquet_source), anything else through DataRoot.open
    monkeypatch.setattr(
        type(root), "open", lambda self, path, *a, **kw: opened.append(path) or real(self, path, *a, **kw)
    )
    monkeypatch.setattr(shards, "parquet_source", lambda r, path: opened.append(path) or real_source(r, path))
    specs = stage.plan_sampling(root, 500, RolloutParams())
    planned = [q for s in specs for q in s["query_ids"]]
    assert planned == [q["query_id"] for q in queries[1000:]] and len(specs) == 4
    # every shard of queries and trajectories is read once, not once per query
    assert len(opened) == len(set(opened)) == 1 + 4, opened


def test_the_sampling_and_judging_plans_fit_airflows_mapping_limit_at_thousands_of_queries(root):
    """A corpus of thousands of queries at one query per shard: the plans stay within max_shards (Airflow's
    core.max_map_length) and still hand over every query exactly once, in order."""
    from datamind.judge.stage import plan_judging

    queries = _queries(3000)
    write_shard(root, QUERIES, "queries", queries, "part-q.parquet")
    done = [q["query_id"] for q in queries[:1500]]
    write_shard(root, TRAJECTORIES, "trajectories", _trajectories(done), "part-t.parquet")
    assert len(stage.plan_sampling(root, 1, RolloutParams())) == 1500  # no limit: the size asked for
    for cap in (1024, 7):
        for specs, expected in (
            (stage.plan_sampling(root, 1, RolloutParams(), max_shards=cap), [q["query_id"] for q in queries[1500:]]),
            (plan_judging(root, 1, JudgeParams(), max_shards=cap), done),
        ):
            assert len(specs) <= cap
            assert [q for s in specs for q in s["query_ids"]] == expected
            assert len({s["shard_id"] for s in specs}) == len(specs)  # each shard names its own file


def test_a_shard_reads_only_the_files_its_tasks_are_in(corpus, monkeypatch):
    """The planner hands each shard the query, ancestor and catalog files of its tasks; loading the tasks
    opens those files only, and gives what a read of the whole tables gives (a stale hint too)."""
    from datamind.agent.tasks import load_tasks
    from datamind.shards import read_table

    root = corpus
    rows = read_table(root, QUERIES, "queries").to_pylist()
    root.remove("queries")
    for r in rows:  # one shard per query, so a shard's files are a visible subset
        write_shard(root, QUERIES, "queries", [r], f"part-{r['query_id']}.parquet")
    specs = {s["query_ids"][0]: s for s in stage.plan_sampling(root, 1, RolloutParams())}
    child = next(r for r in rows if r["parent_query_ids"])
    sources = specs[child["query_id"]]["task_sources"]
    chain = {child["query_id"], *child["parent_query_ids"]}
    assert sources["queries"] == sorted(root.path("queries", f"part-{q}.parquet") for q in chain)
    assert len(sources["catalog_tables"]) == len(sources["catalog_files"]) == 1

    whole, _ = load_tasks(root, [child["query_id"]])
    opened = []
    real, real_source = type(root).open, shards.parquet_source
    monkeypatch.setattr(
        type(root), "open", lambda self, path, *a, **kw: opened.append(path) or real(self, path, *a, **kw)
    )
    monkeypatch.setattr(shards, "parquet_source", lambda r, path: opened.append(path) or real_source(r, path))
    hinted, errors = load_tasks(root, [child["query_id"]], sources)
    assert not errors and hinted == whole and [t.chain for t in hinted.values()] == [t.chain for t in whole.values()]
    assert opened and set(opened) <= {p for paths in sources.values() for p in paths}, opened
    stale = {"queries": [root.path("queries", "part-q1.parquet")], "catalog_tables": [], "catalog_files": []}
    assert load_tasks(root, [child["query_id"]], stale)[0] == whole  # what the hint misses is looked up


def test_shards_take_their_queries_from_as_few_files_as_they_can(root):
    """Ids are hashes, so a shard cut in id order draws from every file of its input; the sampling and
    judging planners take queries by the file they are in (a judging shard at 5,000 sources read 80 files
    for 20 queries)."""
    from datamind.judge.stage import plan_judging

    queries = _queries(1000)
    ids = [q["query_id"] for q in queries]
    for k in range(4):  # file k holds every 4th query: any 250 consecutive ids touch all four files
        write_shard(root, QUERIES, "queries", queries[k::4], f"part-{k}.parquet")
    specs = stage.plan_sampling(root, 250, RolloutParams())
    assert [len(s["task_sources"]["queries"]) for s in specs] == [1, 1, 1, 1]
    assert sorted(q for s in specs for q in s["query_ids"]) == ids

    for k in range(4):
        write_shard(root, TRAJECTORIES, "trajectories", _trajectories(ids[k::4]), f"part-{k}.parquet")
    specs = plan_judging(root, 250, JudgeParams())
    assert [len(s["sources"]) for s in specs] == [1, 1, 1, 1]
    assert sorted(q for s in specs for q in s["query_ids"]) == ids
