"""A real Airflow (``airflow standalone``: api-server, scheduler, dag-processor, triggerer, SQLite metadata DB)
for the end-to-end tests, and small REST helpers. Used through the ``standalone`` fixture (tests/e2e/conftest.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests

from datamind.llm.serving import free_port

REPO = Path(__file__).resolve().parents[2]


def write_csv(path: Path, rows: int) -> None:
    lines = ["day,region,units,price"]
    for i in range(rows):
        lines.append(
            f"2024-01-{i % 28 + 1:02d},{['north', 'south', 'east'][i % 3]},{(i * 7) % 50 + 1},{10 + (i % 9) * 1.5}"
        )
    path.write_text("\n".join(lines) + "\n")


@contextlib.contextmanager
def standalone_airflow(tmp_path: Path, **airflow_env: str):
    port = free_port()
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
    env.update(airflow_env)
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
            except (requests.ConnectionError, requests.Timeout):  # still starting, or a busy machine
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
        stop_group(proc)
        log.close()


def stop_group(proc: subprocess.Popen) -> None:
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


def wait_for_dag(session, base, dag_id, timeout=150):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = session.get(f"{base}/api/v2/dags/{dag_id}", timeout=60)
        if r.status_code == 200:
            return
        time.sleep(1)
    pytest.fail(f"DAG {dag_id} never appeared")


def runs(session, base, dag_id):
    r = session.get(f"{base}/api/v2/dags/{dag_id}/dagRuns", timeout=60)
    r.raise_for_status()
    return r.json()["dag_runs"]
