"""ingest_files over sources that are single files: each file is cataloged, staged and identified under its
own name, however many sources the run lists."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from airflow.dag_processing.dagbag import DagBag

from datamind.assets import DIRS
from datamind.ids import stable_id
from datamind.schemas import CATALOG_FILES
from datamind.shards import read_rows
from datamind.storage import DataRoot

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "files" / "sales_orders.csv"


def test_a_single_file_source_keeps_its_name_in_the_catalog_and_the_staged_copy(airflow_db, tmp_path, monkeypatch):
    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    (tmp_path / "exports").mkdir()
    (tmp_path / "2024-q2").mkdir()
    single = tmp_path / "exports" / "sales_orders.csv"
    shutil.copy(SAMPLE, single)
    shutil.copy(REPO / "samples" / "files" / "wetter_muenchen.csv", tmp_path / "2024-q2" / "wetter.csv")
    dag = DagBag(dag_folder=str(REPO / "dags" / "ingest_files.py")).dags["ingest_files"]
    conf = {"source_uri": str(single), "source_name": "drop", "more_source_uris": [str(tmp_path / "2024-q2")]}
    assert dag.test(run_conf=conf).state == "success"

    root = DataRoot(str(tmp_path / "data"))
    rows = {r["rel_path"]: r for r in read_rows(root, CATALOG_FILES, DIRS["catalog_files"])}
    assert sorted(rows) == ["2024-q2/wetter.csv", "sales_orders.csv"]
    row = rows["sales_orders.csv"]
    data = SAMPLE.read_bytes()
    assert row["status"] == "accepted" and row["source_uri"] == str(single)
    assert row["file_id"] == stable_id("drop", "sales_orders.csv", hashlib.sha256(data).hexdigest())
    staged = Path(row["staged_uri"])
    assert staged == Path(root.path("raw", "drop", row["file_id"], "sales_orders.csv"))
    assert staged.read_bytes() == data
