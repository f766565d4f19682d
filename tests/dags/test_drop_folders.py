"""Drop folders: ingest_files / ingest_bird watch a folder on a schedule only when a deployment says so; a
scheduled run ingests what is new and, when nothing is, ends without waking the next DAGs."""

from __future__ import annotations

from pathlib import Path

from airflow.dag_processing.dagbag import DagBag

REPO = Path(__file__).resolve().parents[2]


def _dag(dag_id: str):
    return DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py")).dags[dag_id]


def test_off_by_default(monkeypatch):
    for var in ("DATAMIND_DROP_FILES_URI", "DATAMIND_DROP_FILES_SCHEDULE", "DATAMIND_DROP_BIRD_URI"):
        monkeypatch.delenv(var, raising=False)
    for dag_id in ("ingest_files", "ingest_bird"):
        assert _dag(dag_id).schedule is None, dag_id


def test_a_configured_drop_folder_is_polled_on_its_schedule(tmp_path, monkeypatch):
    monkeypatch.setenv("DATAMIND_DROP_FILES_URI", str(tmp_path / "drop"))
    monkeypatch.setenv("DATAMIND_DROP_FILES_SCHEDULE", "*/15 * * * *")
    dag = _dag("ingest_files")
    assert dag.schedule == "*/15 * * * *"
    assert dag.params["source_uri"] == str(tmp_path / "drop") and dag.params["source_name"] == "drop"
    monkeypatch.setenv("DATAMIND_DROP_BIRD_URI", str(tmp_path / "bird-drop"))  # a URI without a schedule: off
    assert _dag("ingest_bird").params["source_uri"] != str(tmp_path / "bird-drop")


def test_a_poll_that_finds_nothing_new_wakes_nothing(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    drop = tmp_path / "drop"
    drop.mkdir()
    lines = ["day,region,units"] + [f"2024-01-{i % 28 + 1:02d},{'nse'[i % 3]},{i}" for i in range(40)]
    (drop / "sales.csv").write_text("\n".join(lines) + "\n")
    dag = _dag("ingest_files")
    conf = {"source_uri": str(drop), "source_name": "drop"}
    runs = [dag.test(run_conf=conf), dag.test(run_conf=conf)]
    publish = [next(t for t in run.get_task_instances() if t.task_id == "publish_catalog") for run in runs]
    assert [r.state for r in runs] == ["success", "success"]
    assert [t.state for t in publish] == ["success", "skipped"]  # the second emits no Asset event
