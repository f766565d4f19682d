"""Trajectory sampling stage: ``queries`` -> ``trajectories`` (+ ``rejections``), one shard of queries per task.

Inputs: ``queries`` (question, category, chain lineage, reference programs), ``catalog_tables`` /
``catalog_files`` (the staged data file of each query).  Output: one ``trajectories`` shard per planned
shard, named after the query ids it covers, so a retried or rerun task rewrites the same file; queries
that cannot be sampled go to ``rejections/rollout`` under the same shard name.  Nothing is written until
the whole shard is done, each write is atomic, and the shard then commits (``datamind.tables``): a task
killed between its writes leaves files that are not part of the table, and its queries are sampled again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

from datamind import tables
from datamind.agent.params import RolloutParams
from datamind.agent.runner import SandboxPool, n_offline_samples, run_one, trajectory_row
from datamind.agent.tasks import TaskError, TaskSources, load_tasks
from datamind.assets import DIRS
from datamind.ids import stable_id
from datamind.llm.errors import EndpointUnavailable
from datamind.progress import counted, progress_log
from datamind.schemas import REJECTIONS, TRAJECTORIES, rejection
from datamind.shards import chunk, fit_shard_size, write_shard
from datamind.stages import STAGES
from datamind.storage import DataRoot
from datamind.tables import SamplingState

log = logging.getLogger(__name__)

STAGE = STAGES["sample_trajectories"].rejections
REJECTIONS_DIR = tables.rollout_rejections_dir()


def shard_id(query_ids: list[str], resample: dict[str, dict[int, int]] | None = None) -> str:
    """Names the shard after the queries it covers: a retry or rerun of the same work writes the same file.
    A re-sampling shard also names the attempt of each trajectory it redoes, so no attempt overwrites another."""
    if not resample:
        return stable_id(sorted(query_ids))
    return stable_id(sorted(query_ids), sorted((q, sorted(a.items())) for q, a in resample.items()))


def sampling_state(root: DataRoot, max_attempts: int | None = None) -> SamplingState:
    """Round-0 outcome per query (``tables.sampling_state``); ``max_attempts`` defaults to what each row's own
    sampling parameters recorded."""
    cap = RolloutParams.attempts_allowed if max_attempts is None else (lambda _sp: max_attempts)
    return tables.sampling_state(root, cap)


def plan_sampling(
    root: DataRoot | str,
    shard_size: int | None,
    params: RolloutParams,
    max_shards: int | None = None,
) -> list[dict]:
    """Shard specs (JSON-able, for XCom / dynamic task mapping; at most ``max_shards``) over queries not sampled
    yet, then over trajectories to sample again (a transient failure with attempts left), named by attempt. Queries are
    taken by the file they are in, then by id: a shard's tasks come from a few query files rather than one
    file each (ids are hashes, so id order alone scatters a shard over the whole table)."""
    root = DataRoot.of(root)
    p = RolloutParams.given(params)
    index = TaskSources.build(root)  # one pass over the inputs: each shard reads only the files its tasks are in
    ids = sorted(index.query_path, key=lambda q: (index.query_path[q], q))
    tables.trajectories(root).migrate()
    state = sampling_state(root, p.max_attempts)  # one pass over the output, never one per query
    todo = [q for q in ids if q not in state.done and q not in state.resample]
    again = [q for q in ids if q in state.resample]
    size = fit_shard_size([len(todo), len(again)], shard_size or p.shard_size, max_shards)
    specs = [
        {"shard_id": shard_id(part), "query_ids": part, "task_sources": index.of(part)} for part in chunk(todo, size)
    ]
    for part in chunk(again, size):
        resample = {q: state.resample[q] for q in part}
        specs.append(
            {
                "shard_id": shard_id(part, resample),
                "query_ids": part,
                "resample": {q: sorted(a) for q, a in resample.items()},
                "task_sources": index.of(part),
            }
        )
    return specs


def _rejection(
    query_id: str, code: str, reason: str, run_id: str | None, now: datetime, file_id: str | None = None
) -> dict:
    return rejection(STAGE, query_id, code, reason, file_id=file_id, query_id=query_id, run_id=run_id, created_at=now)


def _not_an_error(result) -> bool:
    return getattr(result, "status", "") != "error"


async def _sample_all(jobs: list[tuple], params: RolloutParams, pool: SandboxPool, llm_client: Any | None) -> list:
    sem = asyncio.Semaphore(params.concurrency)
    try:
        async with progress_log(log, "sampling trajectories", total=len(jobs)) as progress:
            results = await asyncio.gather(
                *(
                    counted(progress, run_one(t, i, params, pool, llm_client=llm_client), _not_an_error, sem)
                    for t, i in jobs
                ),
                return_exceptions=True,
            )
    finally:
        if llm_client is not None:  # its HTTP connections belong to this event loop
            await llm_client.aclose()
    for r in results:
        if isinstance(r, EndpointUnavailable):  # no trajectory can succeed: fail the task, write nothing
            raise r
    return results


def sample_shard(
    root: DataRoot | str,
    spec: dict,
    params: RolloutParams,
    run_id: str | None,
    llm_client: Any | None = None,
    *,
    sandbox: Any | None = None,
) -> dict:
    """Sample N trajectories for each query of ``spec``; returns a JSON-able summary."""
    root = DataRoot.of(root)
    p = RolloutParams.given(params)
    if p.backend == "llm" and llm_client is None:
        raise ValueError("backend='llm' needs an llm_client")
    if p.rewrites and llm_client is None:
        raise ValueError("rewrite_thoughts needs an llm_client (an LLM connection)")
    t0 = time.perf_counter()
    now = datetime.now(UTC)
    qids = sorted(spec["query_ids"])
    tasks, errors = load_tasks(root, qids, spec.get("task_sources"))
    rejections = [_rejection(q, e.code, str(e), run_id, now) for q, e in sorted(errors.items())]
    jobs: list[tuple] = []
    fewer = 0
    for qid in qids:
        task = tasks.get(qid)
        if task is None:
            continue
        n = n_offline_samples(task, p.n_samples) if p.backend == "offline" else p.n_samples
        if n == 0:
            why = "the offline backend replays the query's programs, and it has none"
            if task.data_format == "sqlite" and (task.query.get("reference_solution") or "").strip():
                why += " that the SQL session can run (programs opening the database with sqlite3 are refused there)"
            rejections.append(_rejection(qid, "no_reference_solution", why, run_id, now, task.query["file_id"]))
            continue
        fewer += n < p.n_samples
        again = spec.get("resample", {}).get(qid)
        jobs.extend((task, i) for i in (again if again is not None else range(n)))

    results: list = []
    if jobs:
        with SandboxPool(p, sandbox) as pool:
            results = asyncio.run(_sample_all(jobs, p, pool, llm_client))

    rows: list[dict] = []
    failed_queries: dict[str, str] = {}
    for (task, i), res in zip(jobs, results, strict=True):
        if isinstance(res, TaskError):
            failed_queries.setdefault(task.query_id, f"{res.code}: {res}")
        elif isinstance(res, BaseException):
            log.warning("sampling %s #%d failed: %s", task.query_id, i, res, exc_info=res)
            failed_queries.setdefault(task.query_id, f"sampling_failed: {type(res).__name__}: {res}")
        else:
            rows.append(trajectory_row(res, p, run_id, now))
    for qid, reason in sorted(failed_queries.items()):
        code = reason.split(":", 1)[0]
        rejections.append(_rejection(qid, code, reason, run_id, now, tasks[qid].query["file_id"]))
        rows = [r for r in rows if r["query_id"] != qid]  # a query is sampled whole or not at all

    sid = str(spec.get("shard_id") or shard_id(qids))  # a re-sampling spec always carries its own
    if not sid.isalnum():
        raise ValueError(f"shard_id must be alphanumeric (it names a file), got {sid!r}")
    name = f"part-{sid}.parquet"
    partition = tables.trajectories(root).begin()
    path = write_shard(root, TRAJECTORIES, DIRS["trajectories"], sorted(rows, key=lambda r: r["trajectory_id"]), name)
    rej_path = write_shard(root, REJECTIONS, REJECTIONS_DIR, rejections, name)
    partition.commit(sid, qids, {"trajectories": path, "rejections": rej_path})
    answered = sum(r["status"] == "answered" for r in rows)
    summary = {
        "shard_id": sid,
        "path": path,
        "rejections_path": rej_path,
        "n_queries": len(qids),
        "n_trajectories": len(rows),
        "n_answered": answered,
        "n_max_turns": sum(r["status"] == "max_turns" for r in rows),
        "n_error": sum(r["status"] == "error" for r in rows),
        "n_void_turns": sum(r["n_void_turns"] for r in rows),
        "n_rejected_queries": len(rejections),
        "n_queries_fewer_variants": fewer,
        "backend": p.backend,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    log.info("sampling shard %s: %s", sid, summary)
    return summary
