"""The DAGs under a real Airflow: scheduler, dag-processor, api-server and metadata DB (airflow standalone).

Triggers ingest_files over the REST API like a data engineer in the UI would, and waits for
profile_files to be started by the catalog/files Asset and succeed.
"""

from __future__ import annotations

import time

import pytest
from e2e_helpers import runs, standalone_airflow, wait_for_dag, write_csv

pytestmark = [pytest.mark.scheduler, pytest.mark.timeout(420)]


@pytest.fixture
def standalone(tmp_path):
    # Airflow fails a mapped list longer than this; the ingest below asks for more shards than it allows
    with standalone_airflow(tmp_path, AIRFLOW__CORE__MAX_MAP_LENGTH="2") as running:
        yield running


def test_ingest_triggers_profiling_through_the_asset(standalone):
    base, session, tmp_path = standalone
    source = tmp_path / "source"
    source.mkdir()
    write_csv(source / "sales.csv", 60)
    write_csv(source / "tiny.csv", 5)  # must be rejected as too small
    write_csv(source / "returns.csv", 40)

    for dag_id in ("ingest_files", "profile_files"):
        wait_for_dag(session, base, dag_id)
        session.patch(f"{base}/api/v2/dags/{dag_id}", json={"is_paused": False}, timeout=60).raise_for_status()

    r = session.post(
        f"{base}/api/v2/dags/ingest_files/dagRuns",
        # one file per shard would be three mapped tasks: the plan fits them into the two allowed
        json={"logical_date": None, "conf": {"source_uri": str(source), "source_name": "e2e", "shard_size": 1}},
        timeout=60,
    )
    assert r.status_code in (200, 201), r.text

    deadline = time.monotonic() + 240
    states = {}
    while time.monotonic() < deadline:
        states = {d: [run["state"] for run in runs(session, base, d)] for d in ("ingest_files", "profile_files")}
        if "failed" in states["ingest_files"] or "failed" in states["profile_files"]:
            break
        if states["ingest_files"] == ["success"] and "success" in states["profile_files"]:
            break
        time.sleep(2)
    assert states.get("ingest_files") == ["success"], states
    assert "success" in states.get("profile_files", []), states
    profile_run = runs(session, base, "profile_files")[0]
    assert profile_run["run_type"] == "asset_triggered"

    import duckdb

    data = tmp_path / "data"
    files = duckdb.sql(
        f"SELECT rel_path, status, reason_code FROM '{data}/catalog/files/**/*.parquet' ORDER BY rel_path"
    ).fetchall()
    assert [(f[0], f[1]) for f in files] == [
        ("returns.csv", "accepted"), ("sales.csv", "accepted"), ("tiny.csv", "rejected"),
    ]  # fmt: skip
    assert files[2][2] == "too_few_rows"
    tables = duckdb.sql(f"SELECT n_rows, n_cols FROM '{data}/catalog/tables/**/*.parquet' ORDER BY 1").fetchall()
    assert tables == [(40, 4), (60, 4)]
    ingest_run = runs(session, base, "ingest_files")[0]["dag_run_id"]
    tis = session.get(
        f"{base}/api/v2/dags/ingest_files/dagRuns/{ingest_run}/taskInstances", params={"limit": 100}, timeout=60
    ).json()["task_instances"]
    mapped = sorted(ti["map_index"] for ti in tis if ti["task_id"] == "ingest_shard")
    assert mapped == [0, 1], tis
