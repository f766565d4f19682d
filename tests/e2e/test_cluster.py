"""The multi-worker deployment, for real: PostgreSQL, Redis, an S3 server holding the data root, and Airflow with
the CeleryExecutor (api-server, scheduler, dag-processor, triggerer, two Celery workers with their own working
directories and names, sharing nothing but the bucket), started by scripts/cluster.py as `make cluster` does.
ingest_files is triggered over the REST API, as the UI form does; the Asset chain runs by itself to
publish_dataset and train_agent (a tiny CPU model on the `gpu` worker). A rerun pays nothing and duplicates nothing.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
from script_modules import load_script

REPO = Path(__file__).resolve().parents[2]
CHAIN = (
    "ingest_files",
    "profile_files",
    "synthesize_queries",
    "sample_trajectories",
    "judge_trajectories",
    "publish_dataset",
    "train_agent",
)
pytestmark = [pytest.mark.scheduler, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = [b for b in ("redis-server", "pg_config", "runuser") if shutil.which(b) is None]
    if missing:
        pytest.skip(f"missing {missing} (scripts/install_system_deps.sh installs them)")
    mod = load_script("cluster")
    directory = tmp_path_factory.mktemp("cluster")
    t0 = time.monotonic()
    try:
        c = mod.start(str(directory), mod.free_port())
        print(f"\ncluster up in {time.monotonic() - t0:.0f} s")
        yield mod, c
    finally:
        stopped = mod.remove(str(directory))  # its database lives under /tmp when run as root
        print(f"stopped: {stopped}")


def _session(c) -> requests.Session:
    token = requests.post(f"{c.base_url}/auth/token", json={"username": c.user, "password": c.password}, timeout=60)
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
    return s


def _s3(c):
    import boto3

    return boto3.client("s3", endpoint_url=c.s3_endpoint, aws_access_key_id="cluster",
                        aws_secret_access_key="cluster-secret", region_name="us-east-1")  # fmt: skip


def _keys(c) -> list[str]:
    pages = _s3(c).get_paginator("list_objects_v2").paginate(Bucket="datamind", Prefix="root/")
    return [o["Key"] for p in pages for o in p.get("Contents", [])]


def _runs(s, c, dag_id) -> list[dict]:
    r = s.get(f"{c.base_url}/api/v2/dags/{dag_id}/dagRuns", params={"order_by": "run_after"}, timeout=60)
    assert r.status_code == 200, (dag_id, r.status_code, r.text[:2000])
    return r.json()["dag_runs"]


def _settled(s, c) -> bool:
    return all(r["state"] not in ("queued", "running") for d in CHAIN for r in _runs(s, c, d))


def _trained(s, c) -> bool:
    return any(x["state"] == "success" for x in _runs(s, c, "train_agent"))


def _failed(s, c) -> bool:
    return any(x["state"] == "failed" for d in CHAIN for x in _runs(s, c, d))


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(3)
    pytest.fail(f"timed out waiting for {what}")


def _check_lineage(c, ours: list[dict]) -> None:
    """The OpenLineage events the workers wrote (file transport): one START and one COMPLETE per run of every
    task that reads or writes a table, and each table of the chain an output of one stage and the next one's
    input, with its schema, row counts and the stage's own facet."""
    import json

    from datamind.assets import DIRS
    from datamind.schemas import DATASET
    from datamind.stages import STAGES

    events = [json.loads(line) for line in c.path("lineage", "events.jsonl").read_text().splitlines() if line]
    tasks = [e for e in events if "." in e["job"]["name"]]  # dag_id.task_id (a DAG run's own events have none)
    with_tables = {e["job"]["name"] for e in tasks if e["eventType"] == "COMPLETE" and (e["inputs"] or e["outputs"])}
    assert {n.split(".")[0] for n in with_tables} == set(CHAIN), with_tables
    runs = Counter(f"{t['dag_id']}.{t['task_id']}" for t in ours)
    for name in with_tables:
        kinds = Counter(e["eventType"] for e in tasks if e["job"]["name"] == name)
        assert kinds["START"] == kinds["COMPLETE"] == runs[name], (name, kinds, runs[name])

    def names(dag_id: str, side: str) -> set[str]:
        return {d["name"] for e in tasks if e["job"]["name"].startswith(f"{dag_id}.") and e["eventType"] == "COMPLETE"
                for d in e[side]}  # fmt: skip

    for a, b in zip(CHAIN, CHAIN[1:], strict=False):
        shared = names(a, "outputs") & names(b, "inputs")
        table = DIRS[STAGES[a].writes]
        assert any(n.rstrip("/").endswith("/" + table) or "/dataset/v" in n for n in shared), (a, b, shared)
    (release,) = [e for e in tasks if e["job"]["name"] == "publish_dataset.publish" and e["eventType"] == "COMPLETE"]
    (out,) = release["outputs"]
    assert out["name"].endswith("dataset/v1") and out["namespace"] == "s3://datamind"
    assert [f["name"] for f in out["facets"]["schema"]["fields"]] == DATASET.schema.names
    assert out["outputFacets"]["outputStatistics"]["rowCount"] > 0
    facet = release["run"]["facets"]["datamind"]
    assert (
        facet["audit"] is not None
        and facet["counts"]["n_samples"] == out["outputFacets"]["outputStatistics"]["rowCount"]
    )


def _parsed(s, c) -> bool:
    """Every DAG of the chain is registered (the dag-processor reads each stage's settings Variable through the
    api-server while parsing, so the files land a while after the api-server answers)."""
    r = s.get(f"{c.base_url}/api/v2/dags", params={"limit": 100}, timeout=60)
    return r.status_code == 200 and set(CHAIN) <= {d["dag_id"] for d in r.json()["dags"]}


def test_the_chain_runs_across_two_workers_on_a_shared_bucket_and_a_rerun_pays_nothing(cluster):
    mod, c = cluster
    s = _session(c)
    _wait(lambda: _parsed(s, c), 180, "every DAG of the chain to be parsed")
    errors = s.get(f"{c.base_url}/api/v2/importErrors", timeout=60).json()
    assert errors["total_entries"] == 0, errors
    _s3(c).upload_file(str(REPO / "samples" / "files" / "sales_orders.csv"), "datamind", "drop/sales_orders.csv")
    conf = {"source_uri": "s3://datamind/drop/", "source_name": "drop"}
    t0 = time.monotonic()
    r = s.post(f"{c.base_url}/api/v2/dags/ingest_files/dagRuns", json={"logical_date": None, "conf": conf}, timeout=60)
    assert r.status_code in (200, 201), r.text
    _wait(lambda: _trained(s, c) or _failed(s, c), 600, "the chain to reach train_agent")
    _wait(lambda: _settled(s, c), 120, "the chain to settle")
    wall = time.monotonic() - t0
    states = {d: [x["state"] for x in _runs(s, c, d)] for d in CHAIN}
    assert all(v == ["success"] for v in states.values()), states

    tis = s.get(f"{c.base_url}/api/v2/dags/~/dagRuns/~/taskInstances", params={"limit": 500}, timeout=60).json()
    ours = [
        t
        for t in tis["task_instances"]
        if t["dag_id"] in CHAIN
        and t["state"] == "success"
        # an EmptyOperator (publish_dataset's audit_passed) is marked done by the scheduler, on no worker
        and (t.get("operator_name") or t.get("operator")) != "EmptyOperator"
    ]
    per_worker = Counter(t["hostname"] for t in ours)
    assert set(per_worker) == {"127.0.0.2", "127.0.0.3"}, per_worker  # both workers did work
    train = [t for t in ours if t["dag_id"] == "train_agent" and t["task_id"] == "train"]
    assert [t["hostname"] for t in train] == ["127.0.0.3"]  # only worker-b serves the gpu queue

    keys = _keys(c)
    assert any(k.startswith("root/dataset/v1/part-") and k.endswith(".parquet") for k in keys)
    assert any(k.startswith("root/runs/train/") and k.endswith("model.safetensors") for k in keys)
    for name in mod.WORKERS:  # the workers share no disk: nothing of the data root lies in their folders
        assert not list(Path(c.dir, name).rglob("*.parquet")), name
    print(f"chain wall time {wall:.0f} s; tasks per worker {dict(per_worker)}; {len(keys)} objects in the bucket")
    _check_lineage(c, ours)

    # The same trigger again: every file is known, nothing downstream is woken, no object is added.
    before = set(keys)
    r = s.post(f"{c.base_url}/api/v2/dags/ingest_files/dagRuns", json={"logical_date": None, "conf": conf}, timeout=60)
    assert r.status_code in (200, 201), r.text
    _wait(lambda: len(_runs(s, c, "ingest_files")) == 2 and _settled(s, c), 300, "the rerun")
    assert [x["state"] for x in _runs(s, c, "ingest_files")] == ["success", "success"]
    assert [len(_runs(s, c, d)) for d in CHAIN[1:]] == [1] * (len(CHAIN) - 1)  # no downstream run
    added = {k for k in set(_keys(c)) - before if not k.startswith("root/reports/")}
    assert added == set(), sorted(added)[:10]
