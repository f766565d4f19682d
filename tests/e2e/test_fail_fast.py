"""Permanent errors fail the task at once with the cause; transient ones keep Airflow's retries."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))

from datamind_airflow import runtime  # noqa: E402


@pytest.mark.parametrize("exc", [FileNotFoundError("no such source"), ValueError("Protocol not known: s4")])
def test_permanent_errors_become_a_failure_without_retries(exc):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="permanent: not retried") as err:
        with runtime.fail_fast_on_permanent_errors("cannot list source"):
            raise exc
    assert str(exc) in str(err.value) and "cannot list source" in str(err.value)


def test_a_missing_folder_fails_with_one_line_first_and_no_chained_trace(caplog, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from datamind.ingest.sources import list_sources
    from datamind.settings import Limits

    missing = str(tmp_path / "no_such_folder")
    with caplog.at_level("ERROR", logger="datamind_airflow.runtime"):
        with pytest.raises(AirflowFailException) as err:
            with runtime.fail_fast_on_permanent_errors("ingest_files cannot list its source"):
                list_sources([missing], Limits())
    said = f"ingest_files cannot list its source: source '{missing}' does not exist (permanent: not retried)"
    assert str(err.value) == said
    # logged as one line of its own, before Airflow prints the traceback, which holds no second exception
    assert [r.getMessage() for r in caplog.records] == [said]
    assert err.value.__cause__ is None and err.value.__suppress_context__
    # the OS's own wording loses its errno, keeps the path
    with pytest.raises(AirflowFailException, match=r"^read: Permission denied: '/root/x' \(permanent"):
        with runtime.fail_fast_on_permanent_errors("read"):
            raise PermissionError(13, "Permission denied", "/root/x")


@pytest.mark.parametrize("exc", [TimeoutError("read timed out"), ConnectionResetError("peer reset")])
def test_transient_errors_pass_through_to_the_retry_machinery(exc):
    with pytest.raises(type(exc)):
        with runtime.fail_fast_on_permanent_errors("cannot list source"):
            raise exc


def test_a_mistyped_source_fails_the_run_at_once(airflow_db, tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    dag = DagBag(dag_folder=str(REPO / "dags" / "ingest_files.py")).dags["ingest_files"]
    t0 = time.monotonic()
    run = dag.test(run_conf={"source_uri": str(tmp_path / "no_such_folder"), "source_name": "typo"})
    elapsed = time.monotonic() - t0
    assert run.state == "failed"
    plan = next(ti for ti in run.get_task_instances() if ti.task_id == "plan")
    assert plan.state == "failed" and plan.try_number <= 1  # failed, not up_for_retry
    print(f"mistyped source_uri: run failed in {elapsed:.1f} s (dag.test, one try)")


def test_missing_kaggle_credentials_fail_the_crawl_at_once(airflow_db, tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("DATAMIND_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "no-kaggle-config"))  # no kaggle.json, no token
    for var in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    dag = DagBag(dag_folder=str(REPO / "dags" / "ingest_kaggle.py")).dags["ingest_kaggle"]
    t0 = time.monotonic()
    run = dag.test(run_conf={"kaggle_conn_id": "no_such_connection"})
    elapsed = time.monotonic() - t0
    crawl = next(ti for ti in run.get_task_instances() if ti.task_id == "crawl")
    assert run.state == "failed" and crawl.state == "failed" and crawl.try_number <= 1
    print(f"missing Kaggle credentials: run failed in {elapsed:.1f} s (dag.test, one try)")
