"""docker-compose.yaml cannot start here (no docker engine); check it matches what the project needs."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _compose():
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def _env(service: dict) -> dict:
    env = service.get("environment") or {}
    return env if isinstance(env, dict) else dict(e.split("=", 1) for e in env)


def test_services_of_a_celery_deployment():
    services = _compose()["services"]
    for name in (
        "postgres",
        "redis",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-worker",
        "airflow-worker-gpu",
        "airflow-init",
    ):
        assert name in services, f"missing service {name}"
    airflow = {n: s for n, s in services.items() if n.startswith("airflow-")}
    for name, svc in airflow.items():
        env = _env(svc)
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert "postgres" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], name
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://"), name
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "false", name
        assert env["DATAMIND_DATA_ROOT"], name
        # Every worker must see the same shared data root and the same DAGs and prompts.
        vols = " ".join(svc.get("volumes", []))
        for needed in ("./dags:", "./plugins:", "./prompts:", "datamind-data:"):
            assert needed in vols, f"{name} lacks volume {needed}"
        assert svc["build"]["dockerfile"] == "Dockerfile"
    assert len({_env(s)["DATAMIND_DATA_ROOT"] for s in airflow.values()}) == 1


def test_no_secret_literals_in_compose():
    text = (REPO / "docker-compose.yaml").read_text()
    env = _env(_compose()["services"]["airflow-scheduler"])
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"].startswith("${"), "JWT secret must come from .env"
    for var in ("AIRFLOW_CONN_DATAMIND_LLM", "AIRFLOW_CONN_KAGGLE_DEFAULT"):
        assert env[var].startswith("${"), var
    assert "sk-" not in text


def test_gpu_worker_serves_the_queue_train_agent_uses():
    gpu = _compose()["services"]["airflow-worker-gpu"]
    assert "--queues gpu" in gpu["command"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia"
    cpu = _compose()["services"]["airflow-worker"]
    assert "gpu" not in cpu["command"].split("--queues", 1)[1].split()[0]
    dag_file = REPO / "dags" / "train_agent.py"
    if dag_file.exists():
        keywords = {
            kw.arg: kw.value
            for node in ast.walk(ast.parse(dag_file.read_text()))
            if isinstance(node, ast.Call)
            for kw in node.keywords
            if kw.arg in ("queue", "pool")
        }
        assert ast.literal_eval(keywords["queue"]) == "gpu"
        assert ast.literal_eval(keywords["pool"]) == "gpu"
    assert "pools set gpu" in " ".join(_compose()["services"]["airflow-init"]["command"])


def test_image_installs_the_pinned_requirements():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "requirements.txt" in dockerfile
    airflow_pin = next(
        line for line in (REPO / "requirements.txt").read_text().splitlines() if line.startswith("apache-airflow==")
    )
    version = airflow_pin.split("==")[1]
    assert f"apache/airflow:{version}" in dockerfile, "base image must match the pinned Airflow"
    assert "celery==" in (REPO / "requirements.txt").read_text()
