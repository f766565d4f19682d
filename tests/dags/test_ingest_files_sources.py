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


def test_an_ingest_form_is_read_once_into_its_classes_and_a_stray_key_is_refused():
    import pytest

    from datamind.ingest.kaggle_config import KaggleCrawlConfig
    from datamind.ingest.params import FilesSource, KaggleRun
    from datamind.settings import Limits
    from datamind.stage_params import form_schema
    from datamind_airflow.ingest_tasks import read_form

    limits_form = {k: v["default"] for k, v in form_schema(Limits).items()}
    form = {**limits_form, **FilesSource().to_dict(), "more_source_uris": None, "sample_rows_over_limit": 300}
    limits, source = read_form(form, FilesSource)
    assert source == FilesSource()  # the form's empty list of more sources reads back as none
    # every limit the form shows reaches the ingest: the row sample size used to be left out
    assert limits.sample_rows_over_limit == 300 and limits.min_rows == Limits().min_rows
    with pytest.raises(ValueError, match=r"unknown ingest parameter\(s\) \['sourec_uri'\]"):
        read_form({**form, "sourec_uri": "/typo"}, FilesSource)

    crawl_form = {k: v["default"] for k, v in form_schema(KaggleCrawlConfig).items()}
    kaggle = {**limits_form, **KaggleRun(shard_size=7).to_dict(), **crawl_form, "max_pages": 2}
    _, run, crawl = read_form(kaggle, KaggleRun, KaggleCrawlConfig)
    assert run.shard_size == 7 and crawl.max_pages == 2 and crawl.queries == KaggleCrawlConfig().queries
