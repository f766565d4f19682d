"""A backfill's chain in Airflow's own records (the api-server's metadata database): the runs an ingest run's
Asset events woke, and the runs theirs woke, down to publish_dataset; and, the other way, the ingest runs whose
events led to a publish_dataset run. What a page makes of them is ``datamind.review.chain``'s business."""

from __future__ import annotations

from collections import deque
from typing import Any
from urllib.parse import quote

MAX_RUNS = 60


def run_href(dag_id: str, run_id: str) -> str:
    """The run's page in the Airflow UI."""
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def _run(run, events, woken_by: str | None) -> dict[str, Any]:
    return {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "state": str(getattr(run.state, "value", run.state)),
        "start_date": run.start_date.isoformat(timespec="seconds") if run.start_date else None,
        "end_date": run.end_date.isoformat(timespec="seconds") if run.end_date else None,
        "run_href": run_href(run.dag_id, run.run_id),
        "woken_by": woken_by,
        "events": [{"asset": e.asset.name if e.asset else None, "extra": dict(e.extra or {})} for e in events],
    }


def _find(session, dag_id: str, run_id: str, limit: int = 500):
    """The run ``run_id`` of ``dag_id``, named as Airflow names it or as the tables and reports record it
    (``ids.safe_run_id``: a report links its backfill by the id it knows)."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    from datamind.ids import safe_run_id

    run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if run is not None:
        return run
    recent = session.scalars(
        select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).limit(limit)
    ).all()
    return next((r for r in recent if safe_run_id(r.run_id) == run_id), None)


def downstream(dag_id: str, run_id: str) -> dict[str, Any] | None:
    """{"runs": the run, then every run its events woke, breadth first; "source": the run's source name;
    "truncated"} or None when there is no such run (``run_id``: Airflow's or the tables' form of it)."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        start = _find(session, dag_id, run_id)
        if start is None:
            return None
        conf = start.conf or {}
        source = conf.get("source_name") or _default_source(start)
        runs, seen, queue = [], set(), deque([(start, None)])
        while queue and len(runs) < MAX_RUNS:
            run, woken_by = queue.popleft()
            if (run.dag_id, run.run_id) in seen:
                continue
            seen.add((run.dag_id, run.run_id))
            events = session.scalars(
                select(AssetEvent)
                .where(AssetEvent.source_dag_id == run.dag_id, AssetEvent.source_run_id == run.run_id)
                .order_by(AssetEvent.timestamp)
            ).all()
            runs.append(_run(run, events, woken_by))
            for event in events:
                for woken in sorted(event.created_dagruns, key=lambda r: r.run_after or r.start_date):
                    queue.append((woken, f"{run.dag_id} ({event.asset.name if event.asset else 'an Asset'})"))
        return {"runs": runs, "source": source, "truncated": bool(queue)}


def _default_source(run) -> str | None:
    """The source name a run without conf ran under: its DAG's form default (a drop folder's name)."""
    try:
        from airflow.models.serialized_dag import SerializedDagModel

        dag = SerializedDagModel.get_dag(run.dag_id)
        return dag.params["source_name"] if dag is not None and "source_name" in dag.params else None
    except Exception:  # noqa: BLE001 - the page still shows the chain without the name
        return None


def ingests_of(dag_id: str, run_id: str, limit: int = 200) -> list[tuple[str, str]]:
    """(dag_id, run_id) of the ingest runs whose Asset events led, stage by stage, to run ``run_id``."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    found: list[tuple[str, str]] = []
    with create_session() as session:
        start = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        queue, seen = deque([start] if start is not None else []), set()
        while queue and len(seen) < limit:
            run = queue.popleft()
            if (run.dag_id, run.run_id) in seen:
                continue
            seen.add((run.dag_id, run.run_id))
            if run.dag_id.startswith("ingest_"):
                found.append((run.dag_id, run.run_id))
                continue
            for event in run.consumed_asset_events:
                if event.source_dag_id and event.source_run_id:
                    queue.append(
                        session.scalar(
                            select(DagRun).where(
                                DagRun.dag_id == event.source_dag_id, DagRun.run_id == event.source_run_id
                            )
                        )
                    )
            queue = deque(r for r in queue if r is not None)
    return found


def publish_run_of(safe_id: str, limit: int = 500) -> str | None:
    """The publish_dataset run whose id the tables record as ``safe_id`` (``ids.safe_run_id``)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from datamind.ids import safe_run_id

    with create_session() as session:
        ids = session.scalars(
            select(DagRun.run_id).where(DagRun.dag_id == "publish_dataset").order_by(DagRun.id.desc()).limit(limit)
        ).all()
    return next((r for r in ids if safe_run_id(r) == safe_id), None)
