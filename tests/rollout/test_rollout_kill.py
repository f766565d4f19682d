"""A sampling task killed mid-run and rerun leaves exactly one complete shard (real subprocess, SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from rollout.corpus import build_corpus, queries

from datamind.agent.params import RolloutParams
from datamind.assets import DIRS
from datamind.rollout.stage import plan_sampling, sample_shard
from datamind.schemas import TRAJECTORIES
from datamind.shards import read_rows
from datamind.storage import DataRoot

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import json, sys
    from datamind.agent.params import RolloutParams
    from datamind.rollout import stage
    spec = json.loads(sys.argv[2])
    real = stage.run_one
    async def run_one(*args, **kwargs):  # says when trajectories are really in flight
        result = await real(*args, **kwargs)
        print("ONE SAMPLED", flush=True)
        return result
    stage.run_one = run_one
    print("STARTED", flush=True)
    stage.sample_shard(sys.argv[1], spec, RolloutParams(exec_workers=1), "run-killed")
    print("DONE", flush=True)
    """
)


def _copies(n: int) -> list[dict]:
    rows = []
    for c in range(n):
        for q in queries():
            if q["query_id"] in ("q1", "q2", "q3"):
                rows.append(
                    dict(
                        q,
                        query_id=f"{q['query_id']}_{c}",
                        root_query_id=f"{q['root_query_id']}_{c}",
                        parent_query_ids=[f"{p}_{c}" for p in q["parent_query_ids"]],
                    )
                )
    return rows


def test_killed_sampling_task_leaves_nothing_partial_and_rerun_writes_one_shard(root, tmp_path, sandbox):
    import json

    build_corpus(root, str(tmp_path), _copies(8))
    [spec] = plan_sampling(root, 100, RolloutParams())
    env = {**os.environ, "PYTHONPATH": str(REPO / "include")}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, root.url, json.dumps(spec)],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "STARTED"
        assert child.stdout.readline().strip() == "ONE SAMPLED"  # sandbox up, trajectories in flight
        assert child.poll() is None, "the task finished before it could be killed; add copies"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(10)
        child.stdout.close()
    tdir = Path(root.path(DIRS["trajectories"]))
    assert not tdir.exists() or not list(tdir.glob("*.parquet"))  # nothing half-done is visible
    assert plan_sampling(root, 100, RolloutParams()) == [spec]  # the killed shard is still to do, under the same name

    summary = sample_shard(root, spec, RolloutParams(), "run-rerun", sandbox=sandbox)
    assert [p.name for p in tdir.glob("*.parquet")] == [f"part-{spec['shard_id']}.parquet"]
    rows = read_rows(root, TRAJECTORIES, DIRS["trajectories"])
    ids = [(r["query_id"], r["sample_index"]) for r in rows]
    assert len(ids) == len(set(ids)) == summary["n_trajectories"] == 8 * 3 * 3
    assert {r["run_id"] for r in rows} == {"run-rerun"}

    # The rerun equals a run that was never interrupted (same ids, conversations and answers).
    clean = DataRoot(str(tmp_path / "uninterrupted"))
    build_corpus(clean, str(tmp_path / "clean-staged"), _copies(8))
    sample_shard(clean, spec, RolloutParams(), "run-clean", sandbox=sandbox)
    volatile = ("run_id", "created_at")

    def content(r: DataRoot) -> dict:
        return {
            t["trajectory_id"]: {k: v for k, v in t.items() if k not in volatile}
            for t in read_rows(r, TRAJECTORIES, DIRS["trajectories"])
        }

    rerun, uninterrupted = content(root), content(clean)
    differing = [tid for tid in uninterrupted if rerun.get(tid) != uninterrupted[tid]]
    lost = set(uninterrupted) - set(rerun)
    print(
        f"\nkill -9 tally (sampling): partial files visible 0, lost {len(lost)}, "
        f"duplicated {len(ids) - len(set(ids))}, differing from an uninterrupted run {len(differing)}"
    )
    assert not lost and not differing
