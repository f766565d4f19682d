"""The backfill page's walk over Airflow's own records (metadata database): from an ingest run along its Asset
events to the runs each created, and back from a publish_dataset run to the ingest runs that led to it."""

from __future__ import annotations

import airflow  # noqa: F401  (puts the plugins folder on sys.path, as in a deployment)
import pendulum
import pytest

from datamind_airflow import chain

T = pendulum.datetime(2026, 11, 28, 10, tz="UTC")


@pytest.fixture(scope="module")
def records(airflow_db):
    """Two backfills whose chains meet: ingest a and b each wake a profiling run; b's profiling and a's both feed
    one synthesis run (the scheduler gathers queued events into one run), which feeds publish_dataset."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    def run(dag_id: str, run_id: str, minutes: int, **kw) -> DagRun:
        kind = DagRunType.MANUAL if run_id.startswith("manual") else DagRunType.ASSET_TRIGGERED
        return DagRun(dag_id=dag_id, run_id=run_id, run_type=kind, state=kw.pop("state", DagRunState.SUCCESS),
                      run_after=T.add(minutes=minutes), **kw)  # fmt: skip

    with create_session() as session:
        assets = {}
        for name in ("catalog/files", "catalog/tables", "queries"):
            assets[name] = AssetModel(name=f"chain-test://{name}", uri=f"chain-test://{name}", group="asset")
        session.add_all(assets.values())
        ingest_a = run("ingest_files", "manual__2026-11-28T10:00:00+00:00", 0, conf={"source_name": "a_csvs"})
        ingest_b = run("ingest_files", "manual__2026-11-28T10:01:00+00:00", 1, conf={"source_name": "b_csvs"})
        profile_a = run("profile_files", "asset_triggered__chain_a", 2)
        profile_b = run("profile_files", "asset_triggered__chain_b", 3)
        synth = run("synthesize_queries", "asset_triggered__chain_s", 4, state=DagRunState.RUNNING)
        publish = run("publish_dataset", "asset_triggered__2026-11-28T10:09:00+00:00_x", 9)
        session.add_all([ingest_a, ingest_b, profile_a, profile_b, synth, publish])
        session.flush()

        def event(asset: str, source: DagRun, woke: list[DagRun], **extra) -> None:
            e = AssetEvent(asset_id=assets[asset].id, source_dag_id=source.dag_id, source_run_id=source.run_id,
                           source_task_id="publish", extra=extra)  # fmt: skip
            e.created_dagruns.extend(woke)
            session.add(e)

        event("catalog/files", ingest_a, [profile_a], rows_in=3, rows_out=3, rejected={})
        event("catalog/files", ingest_b, [profile_b], rows_in=2, rows_out=1, rejected={"too_few_rows": 1})
        event("catalog/tables", profile_a, [synth], rows_in=3, rows_out=3)
        event("catalog/tables", profile_b, [synth], rows_in=1, rows_out=1)
        event("queries", synth, [publish], rows_in=4, rows_out=30)  # (the stages between, left out)
    return ingest_a, ingest_b, publish


def test_the_walk_follows_each_event_to_the_runs_it_created_once_each(records):
    ingest_a, _, _ = records
    walk = chain.downstream("ingest_files", ingest_a.run_id)
    assert walk["source"] == "a_csvs" and walk["truncated"] is False
    got = [(r["dag_id"], r["run_id"], r["state"], r["woken_by"]) for r in walk["runs"]]
    assert got == [
        ("ingest_files", ingest_a.run_id, "success", None),
        ("profile_files", "asset_triggered__chain_a", "success", "ingest_files (chain-test://catalog/files)"),
        ("synthesize_queries", "asset_triggered__chain_s", "running", "profile_files (chain-test://catalog/tables)"),
        ("publish_dataset", records[2].run_id, "success", "synthesize_queries (chain-test://queries)"),
    ]
    assert walk["runs"][0]["events"] == [
        {"asset": "chain-test://catalog/files", "extra": {"rows_in": 3, "rows_out": 3, "rejected": {}}}
    ]
    assert walk["runs"][0]["run_href"] == "/dags/ingest_files/runs/manual__2026-11-28T10%3A00%3A00%2B00%3A00"


def test_a_run_is_found_by_the_id_its_report_knows(records):
    from datamind.ids import safe_run_id

    _, ingest_b, _ = records
    walk = chain.downstream("ingest_files", safe_run_id(ingest_b.run_id))
    assert walk["runs"][0]["run_id"] == ingest_b.run_id and walk["source"] == "b_csvs"
    assert chain.downstream("ingest_files", "manual__no_such_run") is None


def test_a_release_knows_every_backfill_that_led_to_it(records):
    from datamind.ids import safe_run_id

    ingest_a, ingest_b, publish = records
    assert chain.publish_run_of(safe_run_id(publish.run_id)) == publish.run_id
    assert sorted(chain.ingests_of("publish_dataset", publish.run_id)) == [
        ("ingest_files", ingest_a.run_id),
        ("ingest_files", ingest_b.run_id),
    ]
