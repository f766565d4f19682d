"""The table layer: a shard is done when its commit record exists, files of an uncommitted shard are not part of
the table, partitions written before commit markers keep what they held (and are migrated on their first
commit), and a release is complete, latest and trainable as its manifest says."""

from __future__ import annotations

import json
import posixpath
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quality"))
import quality_rows as Q  # noqa: E402

from datamind import tables  # noqa: E402
from datamind.assets import DIRS  # noqa: E402
from datamind.schemas import DATASET, QUERIES, REJECTIONS, TRAJECTORIES  # noqa: E402
from datamind.shards import write_shard  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402

PART = "params=abc123"


@pytest.fixture()
def root(tmp_path) -> DataRoot:
    return DataRoot(str(tmp_path / "data"))


def _never_retry(_recorded) -> int:
    return 1


def test_an_item_is_done_only_when_its_shard_committed(root):
    part = tables.judged(root, PART)
    assert part.done() == set() and not part.marked()  # an empty partition: nothing done
    part.commit("s0", [], {})  # (marks it: from now on only commit records count)
    written = write_shard(root, DATASET, part.dir, [Q.sample_row(1, query_id="q1")], "part-s1.parquet")
    part.commit("s1", ["q1"], {"judged": written})
    # a second shard killed after writing its file, before its marker
    write_shard(root, DATASET, part.dir, [Q.sample_row(2, query_id="q2")], "part-s2.parquet")
    assert part.done() == {"q1"}
    assert part.files("judged") == [written]
    assert part.record("s1")["items"] == ["q1"] and part.record("s2") is None
    # records name files relative to the data root: a root moved elsewhere keeps its records
    raw = json.loads(root.read_text(part.dir, "_commits", "s1.json"))
    assert raw["files"]["judged"] == [posixpath.join(part.dir, "part-s1.parquet")]
    with pytest.raises(ValueError, match="alphanumeric"):
        part.commit("../x", ["q3"], {})


def test_a_first_shard_killed_between_its_writes_leaves_nothing_done(root):
    """A shard marks its partition before writing (``begin``), so even the first shard of a new partition,
    killed before its commit, does not make its rows count as an old partition's."""
    part = tables.judged(root, PART)
    assert part.migrate() is part and not root.exists(part.dir)  # a planner creates no empty partition
    part.begin()
    write_shard(root, DATASET, part.dir, [Q.sample_row(1, query_id="q1")], "part-s1.parquet")
    assert part.done() == set() and part.migrate().done() == set()


def test_a_judging_partition_from_before_markers_keeps_its_rows_and_is_migrated_once(root):
    part = tables.judged(root, PART)
    write_shard(root, DATASET, part.dir, [Q.sample_row(1, query_id="q1")], "part-old.parquet")
    rejected = Q.rejection_row(1, stage="judge", query_id="q2")
    write_shard(root, REJECTIONS, posixpath.join(tables.judge_rejections_dir(), PART), [rejected], "part-old.parquet")
    assert part.done() == {"q1", "q2"}  # before markers every written row counted
    part.commit("s3", ["q3"], {})
    assert part.marked() and part.done() == {"q1", "q2", "q3"}
    assert sorted(part.records()) == ["legacy", "s3"]
    # judging's first markers named their items query_ids and their files at the top level
    root.write_text(posixpath.join(part.commits_dir, "s4.json"), json.dumps({"query_ids": ["q4"], "judged": None}))
    assert part.done() == {"q1", "q2", "q3", "q4"}


def test_synthesis_summaries_from_before_markers_are_its_commits(root):
    part = tables.queries(root, "abc123")
    summary = {"shard_id": "s1", "table_ids": ["t1", "t2"], "n_queries": 5, "skips": {"ranking": {"few_rows": 1}}}
    root.write_text(posixpath.join(part.dir, "part-s1.summary.json"), json.dumps(summary))
    assert part.done() == {"t1", "t2"} and part.record("s1")["n_queries"] == 5
    part.commit("s2", ["t3"], {"queries": None}, n_queries=2)
    # migrated shard by shard: the old summary is now a commit record of its own, counts and skips included
    assert sorted(part.records()) == ["s1", "s2"] and part.record("s1")["skips"] == summary["skips"]
    assert part.done() == {"t1", "t2", "t3"}


def test_sampling_state_reads_committed_shards_and_keeps_old_files(root):
    part = tables.trajectories(root)
    old = [Q.trajectory_row(1, query_id="q1"), Q.trajectory_row(2, query_id="q1", sample_index=1)]
    write_shard(root, TRAJECTORIES, part.dir, old, "part-old.parquet")
    reflected = [Q.trajectory_row(9, query_id="q9", reflection_round=1)]
    write_shard(root, TRAJECTORIES, tables.reflected_dir(PART), reflected, "part-r.parquet")
    assert tables.sampling_state(root, _never_retry).done == {"q1"}  # round 0 only, reflections aside

    new = write_shard(root, TRAJECTORIES, part.dir, [Q.trajectory_row(3, query_id="q2")], "part-new.parquet")
    rej = write_shard(
        root, REJECTIONS, tables.rollout_rejections_dir(), [Q.rejection_row(4, query_id="q3")], "part-new.parquet"
    )
    part.commit("new", ["q2", "q3"], {"trajectories": new, "rejections": rej})
    # killed before its marker: a shard's trajectories are not part of the table yet
    write_shard(root, TRAJECTORIES, part.dir, [Q.trajectory_row(5, query_id="q4")], "part-killed.parquet")
    state = tables.sampling_state(root, _never_retry)
    assert state.done == {"q1", "q2", "q3"}
    assert {q: sorted(posixpath.basename(f) for f in fs) for q, fs in state.files.items()} == {
        "q1": ["part-old.parquet"],
        "q2": ["part-new.parquet"],
    }


def test_a_transient_failure_waits_to_be_sampled_again_until_its_attempts_run_out(root):
    part = tables.trajectories(root)
    failed = Q.trajectory_row(1, query_id="q1", status="error", error="llm_rate_limited: 429 three times")
    path = write_shard(root, TRAJECTORIES, part.dir, [failed], "part-a.parquet")
    part.commit("a", ["q1"], {"trajectories": path})
    waiting = tables.sampling_state(root, lambda _recorded: 2)
    assert waiting.done == set() and waiting.resample == {"q1": {0: 1}}
    assert tables.sampling_state(root, _never_retry).done == {"q1"}  # no attempt left: final as it is


def test_releases_complete_latest_and_trainable(root):
    def release(n: int, promotion: dict | None, complete: bool = True) -> None:
        root.write_text(posixpath.join(tables.release_dir(n), "part-00000.parquet"), "x")
        if complete:
            doc = {"version": n, **({"promotion": promotion} if promotion else {})}
            root.write_text(posixpath.join(tables.release_dir(n), tables.MANIFEST), json.dumps(doc))

    assert tables.read_manifest(root) is None and tables.trainable_manifest(root) is None
    release(1, None)  # published before promotion existed: trained on as it was
    release(2, {"status": tables.PROMOTED})
    release(3, {"status": tables.REJECTED})
    release(4, {"status": tables.PROMOTED}, complete=False)  # no manifest: never a release
    assert tables.versions(root) == [(1, True), (2, True), (3, True), (4, False)]
    assert tables.read_manifest(root)["version"] == 3
    assert tables.trainable_manifest(root)["version"] == 2
    tables.mark_latest(root, 3)
    assert root.read_text(DIRS["dataset"], tables.LATEST).strip() == "v3"


def test_reading_a_table_by_name_counts_committed_shards_only(root):
    """``tables.read``: of a partition with markers, the rows of committed shards (queries, sampling's round 0)
    or of done items (judging, whose migrated partitions name items, not files); rows written beside the
    partitions and in partitions from before markers all count."""
    part = tables.queries(root, "abc123")
    kept = write_shard(root, QUERIES, part.dir, [Q.query_row(1), Q.query_row(2)], "part-s1.parquet")
    part.commit("s1", ["t1"], {"queries": kept})
    write_shard(root, QUERIES, part.dir, [Q.query_row(3)], "part-killed.parquet")  # killed before its marker
    write_shard(root, QUERIES, tables.queries(root, "old").dir, [Q.query_row(4)], "part-0.parquet")
    write_shard(root, QUERIES, DIRS["queries"], [Q.query_row(5)], "part-loose.parquet")
    everything = [Q.query_row(i)["query_id"] for i in (1, 2, 4, 5)]
    assert sorted(tables.read(root, "queries", ["query_id"]).column(0).to_pylist()) == sorted(everything)
    committed = tables.read(root, "queries", ["query_id"], partition="params=abc123")
    assert sorted(committed.column(0).to_pylist()) == sorted(everything[:2])

    judged = tables.judged(root, PART)
    write_shard(root, DATASET, judged.dir, [Q.sample_row(1, query_id="q1")], "part-old.parquet")
    judged.commit(
        "s2",
        ["q2"],
        {"judged": write_shard(root, DATASET, judged.dir, [Q.sample_row(2, query_id="q2")], "part-s2.parquet")},
    )
    write_shard(root, DATASET, judged.dir, [Q.sample_row(3, query_id="q3")], "part-s3.parquet")  # not committed
    rows = tables.read(root, "judged", ["query_id"], partition=PART)
    assert sorted(rows.column("query_id").to_pylist()) == ["q1", "q2"]  # q1: the migrated partition's old row
    assert [sorted(t.column("query_id").to_pylist()) for _, t in tables.each(root, "judged", ["query_id"])] == [
        ["q1"],
        ["q2"],
        [],
    ]

    traj = tables.trajectories(root)
    r0 = write_shard(root, TRAJECTORIES, traj.dir, [Q.trajectory_row(1, query_id="q1")], "part-a.parquet")
    traj.commit("a", ["q1"], {"trajectories": r0})
    write_shard(
        root,
        TRAJECTORIES,
        tables.reflected_dir(PART),
        [Q.trajectory_row(2, query_id="q1", reflection_round=1)],
        "part-r.parquet",
    )
    assert tables.read(root, "trajectories", ["reflection_round"]).column(0).to_pylist() == [0]


def test_a_hint_is_read_first_and_a_stale_one_costs_no_rows(root):
    rows = [Q.query_row(i) for i in range(4)]
    paths = [write_shard(root, QUERIES, DIRS["queries"], [r], f"part-{i}.parquet") for i, r in enumerate(rows)]
    where = tables.key_paths(root, "queries", "query_id")
    assert where == {r["query_id"]: {p} for r, p in zip(rows, paths, strict=True)}
    wanted = {rows[0]["query_id"], rows[3]["query_id"]}
    # the hint holds one of the two (stale for the other) and names a file of another data root
    hinted = tables.read(
        root, "queries", ["query_id"], where=("query_id", wanted), hint=[paths[0], "/elsewhere/x.parquet"]
    )
    assert sorted(hinted.column("query_id").to_pylist()) == sorted(wanted)
    assert tables.read(root, "queries", ["query_id"], where=("query_id", set()), hint=paths).num_rows == 0


def test_a_release_is_read_from_the_shards_its_manifest_lists(root):
    folder = tables.release_dir(1)
    listed = write_shard(root, DATASET, folder, [Q.sample_row(1)], "part-0.parquet")
    write_shard(root, DATASET, folder, [Q.sample_row(2)], "part-stray.parquet")
    assert tables.release_rows(root, folder).num_rows == 2  # no manifest: every shard of the folder
    root.write_text(
        posixpath.join(folder, tables.MANIFEST),
        json.dumps({"version": 1, "shards": [{"name": posixpath.basename(listed)}]}),
    )
    assert tables.release_rows(root, folder, ["sample_id"]).column(0).to_pylist() == [Q.sample_row(1)["sample_id"]]
