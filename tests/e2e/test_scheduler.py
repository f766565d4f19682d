"""The DAGs under a real Airflow: scheduler, dag-processor, api-server and metadata DB (airflow standalone).

Triggers ingest_files over the REST API like a data engineer in the UI would, and waits for
profile_files to be started by the catalog/files Asset and succeed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.scheduler, pytest.mark.timeout(420)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_csv(path: Path, rows: int) -> None:
    lines = ["day,region,units,price"]
    for i in range(rows):
        lines.append(
            f"2024-01-{i % 28 + 1:02d},{['north', 'south', 'east'][i % 3]},{(i * 7) % 50 + 1},{10 + (i % 9) * 1.5}"
        )
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def standalone(tmp_path):
    port = _free_port()
    home = tmp_path / "airflow_home"
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__CORE__PARALLELISM="3",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True",
        AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
        AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK="False",
        DATAMIND_DATA_ROOT=str(tmp_path / "data"),
        # standalone starts its components as `airflow ...` subprocesses found on PATH.
        PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.pop("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", None)
    home.mkdir()
    log = open(tmp_path / "standalone.log", "wb")
    subprocess.run([str(REPO / ".venv/bin/airflow"), "db", "migrate"], env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [str(REPO / ".venv/bin/airflow"), "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "standalone.log").read_text()[-3000:]
            try:
                if requests.get(f"{base}/api/v2/monitor/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(1)
        else:
            pytest.fail("api-server never became healthy:\n" + (tmp_path / "standalone.log").read_text()[-3000:])
        passwords = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
        user, password = next(iter(passwords.items()))
        token = requests.post(f"{base}/auth/token", json={"username": user, "password": password}, timeout=60).json()[
            "access_token"
        ]
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        yield base, session, tmp_path
    finally:
        _stop_group(proc)
        log.close()


def _stop_group(proc: subprocess.Popen) -> None:
    """standalone's children (api-server, scheduler, workers) share its process group: stop them all."""
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


def _wait_for_dag(session, base, dag_id, timeout=150):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = session.get(f"{base}/api/v2/dags/{dag_id}", timeout=60)
        if r.status_code == 200:
            return
        time.sleep(1)
    pytest.fail(f"DAG {dag_id} never appeared")


def _runs(session, base, dag_id):
    r = session.get(f"{base}/api/v2/dags/{dag_id}/dagRuns", timeout=60)
    r.raise_for_status()
    return r.json()["dag_runs"]


def test_ingest_triggers_profiling_through_the_asset(standalone):
    base, session, tmp_path = standalone
    source = tmp_path / "source"
    source.mkdir()
    _write_csv(source / "sales.csv", 60)
    _write_csv(source / "tiny.csv", 5)  # must be rejected as too small

    for dag_id in ("ingest_files", "profile_files"):
        _wait_for_dag(session, base, dag_id)
        session.patch(f"{base}/api/v2/dags/{dag_id}", json={"is_paused": False}, timeout=60).raise_for_status()

    r = session.post(
        f"{base}/api/v2/dags/ingest_files/dagRuns",
        json={"logical_date": None, "conf": {"source_uri": str(source), "source_name": "e2e"}},
        timeout=60,
    )
    assert r.status_code in (200, 201), r.text

    deadline = time.monotonic() + 240
    states = {}
    while time.monotonic() < deadline:
        states = {d: [run["state"] for run in _runs(session, base, d)] for d in ("ingest_files", "profile_files")}
        if "failed" in states["ingest_files"] or "failed" in states["profile_files"]:
            break
        if states["ingest_files"] == ["success"] and "success" in states["profile_files"]:
            break
        time.sleep(2)
    assert states.get("ingest_files") == ["success"], states
    assert "success" in states.get("profile_files", []), states
    profile_run = _runs(session, base, "profile_files")[0]
    assert profile_run["run_type"] == "asset_triggered"

    import duckdb

    data = tmp_path / "data"
    files = duckdb.sql(
        f"SELECT rel_path, status, reason_code FROM '{data}/catalog/files/**/*.parquet' ORDER BY rel_path"
    ).fetchall()
    assert [(f[0], f[1]) for f in files] == [("sales.csv", "accepted"), ("tiny.csv", "rejected")]
    assert files[1][2] == "too_few_rows"
    tables = duckdb.sql(f"SELECT n_rows, n_cols FROM '{data}/catalog/tables/**/*.parquet'").fetchall()
    assert tables == [(60, 4)]
