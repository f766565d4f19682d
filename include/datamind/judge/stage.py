"""Judging stage: ``trajectories`` (round 0) -> ``judged`` (DATASET schema, before rule filters) + ``rejections``.

Per query: the N final answers go to the consistency judge (offline or LLM, one interface); an
inconsistent set is sent through reflection rounds (critique -> resample -> judge again), whose new
trajectories are stored in ``trajectories`` with their round number; the selection strategy then picks
the samples to keep.  Every trajectory not kept is recorded in ``rejections/judge`` with the reason.
Output shards are named after the planned shard, written only when the shard is complete, atomically.

Outputs are partitioned by the judging parameters, so the paper's selection settings (or other judges)
can run side by side on the same trajectories without mixing::

    judged/params=<fp>/part-<shard>.parquet            schemas.DATASET (before rule filters)
    judged/params=<fp>/params.json                     the JudgeParams that produced the partition
    rejections/judge/params=<fp>/part-<shard>.parquet  schemas.REJECTIONS
    trajectories/reflect/params=<fp>/part-<shard>.parquet   reflected trajectories (round >= 1)
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import posixpath
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow.compute as pc

from datamind import tables
from datamind.agent.answer import RuleAnswerJudge
from datamind.agent.params import RolloutParams
from datamind.agent.policies.offline_expert import OFFLINE_MODEL
from datamind.agent.protocol import attempt_digest
from datamind.agent.runner import Critique, SandboxPool, n_offline_samples, run_one, trajectory_row
from datamind.agent.tasks import QueryTask, TaskSources, load_tasks
from datamind.assets import DIRS
from datamind.ids import stable_id
from datamind.judge import selection
from datamind.judge.consistency import OfflineJudge
from datamind.judge.llm_judge import AgreementFirst, LLMJudge
from datamind.judge.params import JUDGE_BACKENDS, JudgeParams  # noqa: F401 - part of the stage's API
from datamind.judge.reflection import Round, reflect
from datamind.judge.verdict import Verdict, judge_answers
from datamind.llm.errors import BatchPending, EndpointUnavailable, LLMError, ParseFailure
from datamind.progress import counted, progress_log
from datamind.schemas import DATASET, REJECTIONS, TRAJECTORIES, rejection
from datamind.shards import chunk, write_shard
from datamind.stages import STAGES
from datamind.storage import DataRoot

log = logging.getLogger(__name__)

STAGE = STAGES["judge_trajectories"].rejections
REJECTIONS_DIR = tables.judge_rejections_dir()


def judged_dir(p: JudgeParams) -> str:
    return posixpath.join(DIRS["judged"], p.partition)


def rejections_dir(p: JudgeParams) -> str:
    return posixpath.join(REJECTIONS_DIR, p.partition)


def reflected_dir(p: JudgeParams) -> str:
    return tables.reflected_dir(p.partition)


RAW_LIMIT = 4000


def shard_id(query_ids: list[str]) -> str:
    """Names the shard after the queries it covers: a retry or rerun of the same work writes the same file."""
    return stable_id(sorted(query_ids))


def plan_judging(
    root: DataRoot | str,
    shard_size: int | None,
    params: JudgeParams,
    max_shards: int | None = None,
) -> list[dict]:
    """Shard specs (at most ``max_shards``) over queries that have round-0 trajectories and no judging outcome
    yet, taken by the trajectory file they are in, then by id (a shard reads a few sampling shards, not one per
    query)."""
    root = DataRoot.of(root)
    p = JudgeParams.given(params)
    # Queries with a trajectory still to be sampled again (a transient LLM failure) wait for it.
    state = tables.sampling_state(root, RolloutParams.attempts_allowed)
    done = tables.judged(root, p.partition).migrate().done()
    todo = sorted(state.done - done, key=lambda q: (min(state.files.get(q) or [""]), q))
    index = TaskSources.build(root) if todo else None
    return [
        # the shard's trajectory, query and catalog files travel with it: a task reads those, not every shard
        {
            "shard_id": shard_id(part),
            "query_ids": part,
            "sources": sorted(set().union(*(state.files.get(q, ()) for q in part))),
            "task_sources": index.of(part),
        }
        for part in chunk(todo, shard_size or p.shard_size, max_shards)
    ]


@dataclass
class Outcome:
    query_id: str
    rounds: list[Round[dict]]
    selected: list[dict] = field(default_factory=list)
    failure: tuple[str, str, str | None] | None = None  # (reason_code, reason, raw) when the query was not judged
    no_reflection: str | None = None  # why an inconsistent query could not be reflected in this run
    min_samples: int = 1  # the trajectories this query needed to be judged (JudgeParams.min_samples, else its N)


@dataclass(frozen=True)
class _Rejections:
    """What every rejection of one judging shard shares: its run and its time."""

    run_id: str | None
    now: datetime

    def query(self, qid: str, code: str, reason: str, *, raw: str | None = None, file_id: str | None = None) -> dict:
        return self.trajectory(qid, qid, code, reason, raw=raw, file_id=file_id)

    def trajectory(
        self, item: str, qid: str, code: str, reason: str, *, raw: str | None = None, file_id: str | None = None
    ) -> dict:
        return rejection(
            STAGE, item, code, reason, file_id=file_id, query_id=qid, raw=raw, run_id=self.run_id, created_at=self.now
        )


CHECK_VERIFIED, CHECK_UNVERIFIED, CHECK_REFUTED = "verified", "consistent_unverified", "refuted"


def reference_check(row: dict, task: QueryTask, p: JudgeParams) -> tuple[str, str]:
    """(verdict, reason) of a selected answer against the query's executed reference answer.

    The reference is what the synthesizer's program printed when it ran on the data: ground truth that
    self-consistency alone cannot give (three trajectories can agree on a wrong value)."""
    reference = task.query.get("reference_answer")
    if not p.verify_reference or not reference or not str(reference).strip():
        return CHECK_UNVERIFIED, "no executed reference answer to compare with"
    verdict = RuleAnswerJudge(p.rel_tol).judge_sync(task.query["question"], row.get("final_answer"), reference)
    if verdict.correct:
        return CHECK_VERIFIED, verdict.reasoning
    return (
        CHECK_REFUTED,
        f"the agreed answer disagrees with the executed reference {str(reference)[:200]!r}: {verdict.reasoning}",
    )


def _judge_version(judge: Any, p: JudgeParams) -> str:
    if not isinstance(judge, LLMJudge):
        return f"offline-judge@rel_tol={p.rel_tol}"
    # a sample says whether the rule could decide (agreeing answers passed, differing numbers overruled)
    return f"{judge.template_version}+agreement2@rel_tol={p.rel_tol}" if p.agree_by_rule else judge.template_version


def _query_judge(judge: Any, task: QueryTask, p: JudgeParams) -> Any:
    """The judge of one query: an LLM judge sees only what the rule and the query's reference leave open."""
    if not (isinstance(judge, LLMJudge) and p.agree_by_rule):
        return judge

    def confirmed(answer: str) -> bool:
        return reference_check({"final_answer": answer}, task, p)[0] == CHECK_VERIFIED

    return AgreementFirst(judge, OfflineJudge(p.rel_tol), confirmed)


OFFLINE_QUESTIONS = "offline"  # the question writer of a query the offline engine synthesized (its ``backend``)


def trajectory_writer(traj: dict) -> str:
    """Who wrote a trajectory's turns: the model it recorded (the served model's name for an LLM, the offline
    expert's ``offline-expert``); a row without one says which engine from its policy, never nothing."""
    if traj.get("model"):
        return str(traj["model"])
    return "llm" if str(traj.get("policy") or "").startswith("llm:") else OFFLINE_MODEL


def question_writer(query: dict) -> str:
    """Who wrote a query's question: the synthesizer's model, else its backend (``offline``: the offline engine)."""
    return str(query.get("model") or query.get("backend") or OFFLINE_QUESTIONS)


def dataset_row(
    traj: dict,
    task: QueryTask,
    verdict: Verdict,
    p: JudgeParams,
    judge_version: str,
    now: datetime,
    answer_check: str = CHECK_UNVERIFIED,
) -> dict:
    versions = {}
    try:
        versions.update(json.loads(traj.get("template_version") or "{}"))
    except json.JSONDecodeError:
        versions["rollout"] = traj.get("template_version")
    versions["judge"] = judge_version
    if task.query.get("template_version"):
        versions["synth"] = task.query["template_version"]
    return {
        "sample_id": stable_id("sample", traj["trajectory_id"], p.strategy),
        "query_id": traj["query_id"],
        "trajectory_id": traj["trajectory_id"],
        "file_id": task.query["file_id"],
        "data_uri": task.staged_uri or task.data_path,
        "data_format": task.data_format,
        "category": task.query["category"],
        "hop": task.query["hop"],
        "question": task.query["question"],
        "messages": traj["messages"],
        "final_answer": traj["final_answer"],
        "reference_answer": task.query.get("reference_answer"),
        "judge_verdict": verdict.label,
        "answer_check": answer_check,
        "judge_reasoning": verdict.reasoning,
        "selection_strategy": p.strategy,
        "reflection_round": traj["reflection_round"],
        "model": trajectory_writer(traj),
        "question_model": question_writer(task.query),
        "template_versions": json.dumps(versions, sort_keys=True),
        "created_at": now,
    }


class Rescue:
    """The reflection rescue loop's resampler (paper, eq. 3): an inconsistent query is sampled again with a
    critique of what its earlier attempts did. A context manager owning a sandbox pool that opens on first
    use, so a shard whose queries are all consistent never starts a sandbox; reflected trajectories collect
    in ``reflected``."""

    def __init__(
        self, rp: RolloutParams, sandbox: Any | None, llm_client: Any | None, run_id: str | None, now, salt: str
    ):
        self.rp, self.sandbox, self.llm_client = rp, sandbox, llm_client
        self.run_id, self.now, self.salt = run_id, now, salt  # what each reflected trajectory row records
        self.reflected: list[dict] = []
        self._pool: SandboxPool | None = None
        self._lock = asyncio.Lock()

    def __enter__(self) -> Rescue:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.__exit__(*exc)
            self._pool = None

    async def _sandbox_pool(self) -> SandboxPool:
        async with self._lock:
            if self._pool is None:
                pool = SandboxPool(self.rp, self.sandbox)
                await asyncio.get_running_loop().run_in_executor(None, pool.__enter__)
                self._pool = pool
            return self._pool

    def resampler(self, task: QueryTask, rows0: list[dict]):
        """(the resampler for this query, None) or (None, why it cannot be reflected in this run)."""
        same = sampled_with(rows0, self.rp)  # round 0 and reflection sample alike (backend, turns, top-p, ...)
        if same.backend == "llm" and self.llm_client is None:
            return None, "sampled by an LLM, and this judging run has no LLM connection (backend=llm rescues it)"
        if same.backend == "offline" and n_offline_samples(task, same.n_samples) == 0:
            return None, "the offline expert has no program for this query"
        return functools.partial(self._resample, task, rows0, same), None

    async def _resample(
        self, task: QueryTask, rows0: list[dict], same: RolloutParams, r: int, previous: list[dict], verdict: Verdict
    ) -> list[dict]:
        pool = await self._sandbox_pool()
        # the agent sees what each earlier attempt did, not only where it ended (paper eq. 3)
        critique = Critique(
            [t.get("final_answer") for t in previous],
            verdict.reasoning,
            r,
            [attempt_digest(t.get("messages") or []) for t in previous],
        )
        sampled = await asyncio.gather(
            *(
                run_one(task, row["sample_index"], same, pool, llm_client=self.llm_client, critique=critique)
                for row in rows0
            )
        )
        out = [trajectory_row(s, same, self.run_id, self.now, id_salt=self.salt) for s in sampled]
        self.reflected.extend(out)
        return out


async def _judge_query(
    qid: str, rows0: list[dict], task: QueryTask, judge: Any, p: JudgeParams, rescue: Rescue
) -> Outcome:
    """Judge a query's round 0; rescue an inconsistent one by reflection; select the samples to keep."""
    question = task.query["question"]
    judge = _query_judge(judge, task, p)
    need = p.min_samples or sampled_with(rows0, p.rollout_params).n_samples
    try:
        v0 = await judge_answers(judge, question, [r["final_answer"] for r in rows0], need)
    except ParseFailure as exc:
        return Outcome(qid, [], failure=("judge_parse_failed", exc.reason, exc.raw), min_samples=need)
    rounds: list[Round[dict]] = [Round(0, rows0, v0)]
    can_reflect = (
        not v0.consistent and selection.needs_consistency(p.strategy) and p.reflection_rounds > 0 and len(rows0) >= need
    )
    no_reflection = None
    if can_reflect:
        revise, no_reflection = rescue.resampler(task, rows0)
        if revise is not None:
            rounds += await reflect(
                question,
                rounds[0],
                judge=judge,
                revise=revise,
                max_rounds=p.reflection_rounds,
                min_samples=need,
            )
    final = rounds[-1]
    answered = [r["status"] == "answered" and bool(r["final_answer"]) for r in final.candidates]
    keep = selection.select(p.strategy, final.verdict, answered, seed_key=qid, seed=p.seed)
    return Outcome(qid, rounds, [final.candidates[i] for i in keep], no_reflection=no_reflection, min_samples=need)


# -- the steps of a judging shard: group, decide (judge + rescue + select), collect rows, write ------------------


def _group(
    root: DataRoot,
    qids: list[str],
    reject: _Rejections,
    sources: list[str] | None,
    task_sources: dict[str, list[str]] | None = None,
) -> tuple[dict[str, list[dict]], dict[str, QueryTask], list[dict]]:
    """Round-0 trajectories per query (one per sample index), the queries' tasks, and the rejections of
    queries that cannot be judged (no trajectories, or a task that does not load)."""
    by_query: dict[str, list[dict]] = {}
    for r in round0_trajectories(root, qids, sources):  # sorted by query, sample index, trajectory id
        group = by_query.setdefault(r["query_id"], [])
        if not group or group[-1]["sample_index"] != r["sample_index"]:  # one row per sample (reruns overwrite)
            group.append(r)
    tasks, errors = load_tasks(root, qids, task_sources)
    rejections = []
    for qid in qids:
        if qid not in by_query:
            rejections.append(reject.query(qid, "no_trajectories", "no round-0 trajectories for this query"))
        elif qid in errors:
            rejections.append(reject.query(qid, errors[qid].code, str(errors[qid])))
    return by_query, tasks, rejections


def _judged(outcome: Outcome) -> bool:
    return outcome.failure is None


async def _decide_all(
    todo: list[str],
    by_query: dict[str, list[dict]],
    tasks: dict[str, QueryTask],
    judge: Any,
    p: JudgeParams,
    rescue: Rescue,
    llm_client: Any | None,
) -> list[Outcome | BaseException]:
    """Each query's outcome (or the exception it raised), ``p.concurrency`` at a time, with progress logs."""
    sem = asyncio.Semaphore(p.concurrency)
    try:
        async with progress_log(log, "judging queries", total=len(todo)) as progress:
            outcomes = await asyncio.gather(
                *(
                    counted(progress, _judge_query(q, by_query[q], tasks[q], judge, p, rescue), _judged, sem)
                    for q in todo
                ),
                return_exceptions=True,
            )
    finally:
        if llm_client is not None:  # its HTTP connections belong to this event loop
            await llm_client.aclose()
    for r in outcomes:
        if isinstance(r, EndpointUnavailable):  # no query can be judged: fail the task, write nothing
            raise r
    return outcomes


@dataclass
class Collected:
    judged: list[dict] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)
    consistent_round0: int = 0
    rescued: int = 0
    verified: int = 0
    refuted: int = 0


def _collect(
    outcome: Outcome | BaseException,
    task: QueryTask,
    p: JudgeParams,
    jversion: str,
    reject: _Rejections,
    into: Collected,
) -> None:
    """The rows one query's outcome produces: its kept samples, and a rejection for every other trajectory."""
    qid, fid = task.query_id, task.query["file_id"]
    if isinstance(outcome, BaseException):
        code = getattr(outcome, "reason_code", "judge_failed") if isinstance(outcome, LLMError) else "judge_failed"
        if isinstance(outcome, BatchPending):  # batch mode's dry pass: waiting, not failing
            log.debug("judging %s waits for its batch", qid)
        else:
            log.warning("judging %s failed: %s", qid, outcome, exc_info=outcome)
        into.rejections.append(reject.query(qid, code, f"{type(outcome).__name__}: {outcome}", file_id=fid))
        return
    if outcome.failure:
        code, reason, raw = outcome.failure
        into.rejections.append(reject.query(qid, code, reason, raw=raw, file_id=fid))
        return
    final = outcome.rounds[-1]
    into.consistent_round0 += outcome.rounds[0].verdict.consistent
    into.rescued += len(outcome.rounds) > 1 and final.verdict.consistent
    kept = {r["trajectory_id"] for r in outcome.selected}
    for row in outcome.selected:
        check, why = reference_check(row, task, p)
        into.refuted += check == CHECK_REFUTED
        # The ablation strategies without a consistency filter keep every answer, refuted ones marked.
        if check == CHECK_REFUTED and selection.needs_consistency(p.strategy):
            into.rejections.append(
                reject.trajectory(
                    row["trajectory_id"], qid, "refuted_by_reference", why, raw=row["final_answer"], file_id=fid
                )
            )
            continue
        into.verified += check == CHECK_VERIFIED
        into.judged.append(dataset_row(row, task, final.verdict, p, jversion, reject.now, check))
    for rnd in outcome.rounds:
        for row in rnd.candidates:
            if row["trajectory_id"] in kept:
                continue
            code, reason = _why_not_kept(row, rnd, outcome, p)
            into.rejections.append(
                reject.trajectory(
                    row["trajectory_id"],
                    qid,
                    code,
                    f"round {rnd.round}: {reason}",
                    raw=row["final_answer"],
                    file_id=fid,
                )
            )


def _why_not_kept(row: dict, rnd: Round[dict], outcome: Outcome, p: JudgeParams) -> tuple[str, str]:
    if row["status"] != "answered" or not row["final_answer"]:
        return "no_answer", f"trajectory ended with status {row['status']}: {row.get('error') or ''}".strip()
    if len(rnd.candidates) < outcome.min_samples:
        return "too_few_samples", rnd.verdict.reasoning
    if not rnd.verdict.consistent and selection.needs_consistency(p.strategy):
        reason = rnd.verdict.reasoning
        return "inconsistent", f"{reason} (not reflected: {outcome.no_reflection})" if outcome.no_reflection else reason
    return "not_selected", f"{p.strategy} kept another trajectory of this query"


def _write(
    root: DataRoot, p: JudgeParams, sid: str, qids: list[str], got: Collected, reflected: list[dict]
) -> dict[str, str]:
    """Write the shard's three outputs, then commit them together with one marker (a kill before the marker
    leaves the queries planned again, and the rerun's files replace these under the same names)."""
    name = f"part-{sid}.parquet"
    partition = tables.judged(root, p.partition).begin()
    paths = {
        "reflected": write_shard(
            root, TRAJECTORIES, reflected_dir(p), sorted(reflected, key=lambda r: r["trajectory_id"]), name
        ),
        "judged": write_shard(root, DATASET, judged_dir(p), sorted(got.judged, key=lambda r: r["sample_id"]), name),
        "rejections": write_shard(
            root, REJECTIONS, rejections_dir(p), sorted(got.rejections, key=lambda r: r["item_id"]), name
        ),
    }
    partition.commit(sid, qids, paths)
    params_file = posixpath.join(judged_dir(p), "params.json")
    if not root.exists(params_file):
        root.write_text(params_file, json.dumps(p.to_dict(), sort_keys=True, indent=2))
    return paths


def judge_shard(
    root: DataRoot | str,
    spec: dict,
    params: JudgeParams,
    run_id: str | None,
    llm_client: Any | None = None,
    *,
    sandbox: Any | None = None,
) -> dict:
    """Judge, rescue and select the queries of ``spec``; returns a JSON-able summary."""
    root = DataRoot.of(root)
    p = JudgeParams.given(params)
    if (p.judge == "llm" or p.rollout_params.backend == "llm") and llm_client is None:
        raise ValueError("an LLM judge or LLM reflection needs an llm_client")
    sid = str(spec.get("shard_id") or shard_id(spec["query_ids"]))
    if not sid.isalnum():
        raise ValueError(f"shard_id must be alphanumeric (it names a file), got {sid!r}")
    t0 = time.perf_counter()
    now = datetime.now(UTC)
    qids = sorted(spec["query_ids"])

    reject = _Rejections(run_id, now)
    by_query, tasks, rejections = _group(root, qids, reject, spec.get("sources"), spec.get("task_sources"))
    judge = (
        OfflineJudge(p.rel_tol)
        if p.judge == "offline"
        else LLMJudge(llm_client, params={"temperature": p.judge_temperature})
    )
    todo = [q for q in qids if q in by_query and q in tasks]
    with Rescue(p.rollout_params, sandbox, llm_client, run_id, now, p.fingerprint) as rescue:
        outcomes = asyncio.run(_decide_all(todo, by_query, tasks, judge, p, rescue, llm_client))
    got = Collected(rejections=rejections)
    version = _judge_version(judge, p)
    for qid, outcome in zip(todo, outcomes, strict=True):
        _collect(outcome, tasks[qid], p, version, reject, got)
    paths = _write(root, p, sid, qids, got, rescue.reflected)

    summary = {
        "shard_id": sid,
        "path": paths["judged"],
        "reflected_path": paths["reflected"],
        "rejections_path": paths["rejections"],
        "n_queries": len(qids),
        "n_consistent_round0": got.consistent_round0,
        "n_rescued_by_reflection": got.rescued,
        "n_reflected_trajectories": len(rescue.reflected),
        "n_judged_samples": len(got.judged),
        "n_verified": got.verified,
        "n_refuted": got.refuted,
        "n_rejections": len(got.rejections),
        "strategy": p.strategy,
        "judge": p.judge,
        "partition": p.partition,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    log.info("judging shard %s: %s", sid, summary)
    return summary


def sampled_with(rows0: list[dict], fallback: RolloutParams) -> RolloutParams:
    """The parameters a query's round-0 trajectories recorded (the first one's), else ``fallback``."""
    recorded = next((r.get("sampling_params") for r in rows0 if r.get("sampling_params")), None)
    return RolloutParams.from_form(json.loads(recorded)) if recorded else fallback


def round0_trajectories(root: DataRoot, query_ids: list[str], sources: list[str] | None = None) -> list[dict]:
    """Round-0 trajectories of ``query_ids``, the committed ones, read from ``sources`` (the shards the planner
    found them in) first, then from the other shards for queries they lacked (only those holding them are read
    beyond their query ids)."""
    t = tables.read(root, "trajectories", where=("query_id", query_ids), hint=sources)
    return latest_attempts(t.filter(pc.equal(t.column("reflection_round"), 0)).to_pylist())


def latest_attempts(rows: list[dict]) -> list[dict]:
    """One row per (query, sample index): a trajectory sampled again supersedes its earlier attempt."""
    latest: dict[tuple[str, int], dict] = {}
    for r in rows:
        key = (r["query_id"], r["sample_index"])
        if key not in latest or r["created_at"] > latest[key]["created_at"]:
            latest[key] = r
    return sorted(latest.values(), key=lambda r: (r["query_id"], r["sample_index"], r["trajectory_id"]))
