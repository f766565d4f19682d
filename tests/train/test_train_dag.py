"""The train_agent DAG: its contract (params, pool, queue, Assets) and one real run through dag.test()."""

import json
import os
from pathlib import Path

import pytest
from train_helpers import dataset_rows, write_dataset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags" / "train_agent.py"))
    assert bag.import_errors == {}
    return bag.dags["train_agent"]


def test_contract(dag):
    params = {k: dag.params.get_param(k).schema for k in dag.params}
    described = {k: dag.params.get_param(k).description for k in dag.params}
    assert set(params) == {
        "base_model_path", "phase", "engine", "template", "overrides", "launcher", "launcher_conn_id"
    }  # fmt: skip
    assert params["phase"]["enum"] == ["sft", "sft+rl"]
    assert params["engine"]["enum"] == ["builtin", "llamafactory", "verl"] and dag.params["engine"] == "builtin"
    assert params["launcher"]["enum"] == ["local", "kubernetes", "ssh"]
    assert params["overrides"]["type"] == "object"
    assert all(s.get("title") for s in params.values()) and all(described.values())
    train = dag.get_task("train")
    assert (train.pool, train.queue) == ("gpu", "gpu")
    assert [o.uri.rstrip("/") for o in train.outlets] == ["datamind://checkpoints"]
    cond = dag.timetable.asset_condition
    uris = {getattr(cond, "uri", None)} | {o.uri for o in getattr(cond, "objects", [])}
    assert {u.rstrip("/") for u in uris if u} == {"datamind://dataset"}
    assert dag.get_task("export").downstream_task_ids == {"train"}


def test_dag_run_exports_trains_and_emits_checkpoint(dag, airflow_db, tiny_model_dir, monkeypatch):
    from datamind.storage import DataRoot

    # Launcher settings travel in the Connection's extra; plain python instead of torchrun keeps this fast
    # (torchrun itself is exercised in test_launchers).
    monkeypatch.setenv(
        "AIRFLOW_CONN_TRAIN_LOCAL", json.dumps({"conn_type": "generic", "extra": {"use_torchrun": False}})
    )

    root = DataRoot(os.environ["DATAMIND_DATA_ROOT"])
    write_dataset(root, dataset_rows())
    overrides = {"sft": {"learning_rate": 3e-3, "batch_size": 2, "micro_batch_size": 2, "max_steps": 2}}
    run = dag.test(
        run_conf={
            "base_model_path": tiny_model_dir,
            "phase": "sft",
            "overrides": overrides,
            "launcher": "local",
            "launcher_conn_id": "train_local",
        }
    )
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"export": "success", "train": "success"}, states
    result = run.get_task_instance("train").xcom_pull(task_ids="train")
    assert result["final_metrics"]["step"] == 2 and result["exit_code"] == 0
    manifest = json.loads(root.read_text(root.rel(result["manifest_uri"])))
    assert manifest["status"] == "succeeded" and manifest["config"]["base_model_path"] == tiny_model_dir
