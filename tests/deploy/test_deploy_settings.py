"""One source for the deployment's Airflow settings: config/cluster.env. docker-compose.yaml must set the same
keys to the same values (its service names in the host slots), and scripts/cluster.py runs with exactly them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from script_modules import load_script

REPO = Path(__file__).resolve().parents[2]
COMPOSE_HOSTS = {
    "POSTGRES_PASSWORD": "${POSTGRES_PASSWORD}",
    "POSTGRES_HOST": "postgres",
    "REDIS_HOST": "redis:6379",
    "API_HOST": "airflow-apiserver:8080",
}


def _cluster():
    return load_script("cluster")


def _compose_env() -> dict[str, str]:
    doc = yaml.safe_load((REPO / "docker-compose.yaml").read_text())
    env = doc["x-airflow-common"]["environment"]
    # ${VAR:-default} and ${VAR:?message} are compose's spelling of ${VAR}
    return {k: re.sub(r"\$\{(\w+):[-?][^}]*\}", r"${\1}", str(v)) for k, v in env.items()}


def test_compose_sets_every_shared_setting_to_the_same_value():
    cluster = _cluster()
    shared = cluster.shared_settings(COMPOSE_HOSTS)
    compose = _compose_env()
    assert shared, "config/cluster.env is empty"
    mismatched = {k: (v, compose.get(k)) for k, v in shared.items() if compose.get(k) != v}
    assert mismatched == {}


def test_the_local_cluster_runs_with_the_shared_settings(tmp_path):
    cluster = _cluster()
    c = cluster.Cluster(str(tmp_path), 8080, 5433, 6380, 9000, "s" * 64)
    env = cluster.airflow_env(c, tmp_path / "home")
    shared = cluster.shared_settings(
        {"POSTGRES_PASSWORD": "airflow", "POSTGRES_HOST": "127.0.0.1:5433", "REDIS_HOST": "127.0.0.1:6380",
         "API_HOST": "127.0.0.1:8080"}
    )  # fmt: skip
    assert {k: env[k] for k in shared} == shared
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor" and env["DATAMIND_DATA_ROOT"].startswith("s3://")
