"""ingest_kaggle as Airflow runs it (dag.test): Connection -> real kaggle client -> fake Kaggle API
on loopback -> landing -> catalog/files with provenance; a rerun downloads and catalogs nothing new."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakes.kaggle_server import FakeKaggleServer, weekly_catalog  # noqa: E402

USER, KEY = "tester", "kgl-key-5d1e0c7b-SECRET"
MB = 1024 * 1024


@pytest.fixture
def kaggle(tmp_path, monkeypatch):
    with FakeKaggleServer(username=USER, key=KEY) as server:
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        (tmp_path / "home").mkdir()
        monkeypatch.setenv("KAGGLE_API_ENVIRONMENT", "LOCALHOST")
        from kagglesdk import kaggle_env as sdk_env

        monkeypatch.setitem(sdk_env._env_to_endpoint, sdk_env.KaggleEnv.LOCAL, server.url)
        monkeypatch.setenv(
            "AIRFLOW_CONN_KAGGLE_DEFAULT", json.dumps({"conn_type": "generic", "login": USER, "password": KEY})
        )
        monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
        yield server


def _run(conf, logical_date=None):
    from airflow.dag_processing.dagbag import DagBag

    repo = Path(__file__).resolve().parents[2]
    dag = DagBag(dag_folder=str(repo / "dags" / "ingest_kaggle.py")).dags["ingest_kaggle"]
    return dag.test(run_conf=conf, logical_date=logical_date)


def test_crawl_lands_catalogs_and_reruns_as_a_no_op(airflow_db, kaggle, tmp_path, caplog):
    import duckdb

    conf = {"queries": ["sales"], "max_dataset_bytes": 100 * MB, "max_file_bytes": MB}
    run = _run(conf)
    assert run.state == "success"
    data = tmp_path / "data"
    landed = sorted(
        p.relative_to(data / "landing" / "kaggle").as_posix()
        for p in (data / "landing" / "kaggle").rglob("*")
        if p.is_file()
    )
    # The fake's "sales" catalog (see tests/ingest/test_kaggle.py): frank's 10 GB dataset and heidi's
    # 50 MB file exceed the caps, the rest is downloaded.
    assert landed == sorted(
        [
            "alice/retail-sales/3/sales.csv",
            "alice/retail-sales/3/stores.xlsx",
            "bob/sales-forecast/2/data/train.csv",
            "heidi/sales-bigfile/4/small.csv",
        ]
    )
    rows = duckdb.sql(
        f"SELECT rel_path, source, status, provenance FROM '{data}/catalog/files/*.parquet' ORDER BY rel_path"
    ).fetchall()
    assert [r[0] for r in rows] == landed
    assert {r[1] for r in rows} == {"kaggle"}
    for rel_path, _, _, prov in rows:
        prov = json.loads(prov)
        assert prov["dataset_ref"] == "/".join(rel_path.split("/")[:2])
        assert prov["dataset_version"] == int(rel_path.split("/")[2])
        assert prov["license"] and prov["url"]
    # Skipped and failed datasets are recorded, not lost: heidi's 50 MB file breaks the 1 MB cap, and
    # the fake serves a dataset under a disallowed license and one whose download always fails.
    codes = {r[0] for r in duckdb.sql(f"SELECT reason_code FROM '{data}/rejections/*.parquet'").fetchall()}
    assert {"file_too_large", "license_not_allowed", "failed_download"} <= codes

    rerun = _run(conf)
    assert rerun.state == "success"
    again = duckdb.sql(f"SELECT count(*) FROM '{data}/catalog/files/*.parquet'").fetchall()[0][0]
    assert again == len(rows)
    for text in [caplog.text] + [p.read_text(errors="ignore") for p in data.rglob("*.json")]:
        assert KEY not in text


def test_a_run_for_a_past_week_crawls_that_week_and_each_week_lands_once(airflow_db, kaggle, tmp_path):
    import duckdb
    import pendulum

    kaggle.catalog = weekly_catalog(8)
    conf = {"queries": ["sales"], "crawl_window": "interval"}
    for week in (2, 3, 2):  # weeks 2 and 3 of the backfill, then week 2 again
        run = _run(conf, logical_date=pendulum.datetime(2026, 1, 5, tz="UTC").add(weeks=week, hours=12))
        assert run.state == "success"
    data = tmp_path / "data"
    refs = duckdb.sql(
        f"SELECT json_extract_string(provenance, '$.dataset_ref') FROM '{data}/catalog/files/*.parquet'"
    ).fetchall()
    # a run's interval is the week its logical date falls in; the dataset updated that Monday is taken,
    # and the second run for week 2 found its version in the catalog
    assert sorted(r[0] for r in refs) == ["wk/sales-w02", "wk/sales-w03"]
    assert len(kaggle.calls_to("DownloadDataset")) == 2
