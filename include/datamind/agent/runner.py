"""Run the N trajectories of a query through sandbox sessions; shared by sampling (round 0) and reflection rounds.

Concurrency model inside one shard: every trajectory is an asyncio task (LLM calls overlap freely);
sandbox work (opening a session, executing a cell, closing it) runs on a small thread pool of
``exec_workers`` threads, because it is blocking and CPU-bound and the machine has few cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from datamind.agent import rewrite, templates
from datamind.agent.loop import AgentResult, run_agent
from datamind.agent.params import RolloutParams
from datamind.agent.policies.llm_expert import LLMExpertPolicy
from datamind.agent.policies.offline_expert import (
    HopProgram,
    OfflineExpertPolicy,
    as_python,
    describe_program,
    inspect_code,
    is_bare_sql,
    localize,
    variant_programs,
)
from datamind.agent.tasks import QueryTask, TaskError, build_prompts
from datamind.data_source import default_read_suffices, reading_block
from datamind.ids import stable_id
from datamind.references import threshold_check

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Critique:
    """What a reflection round shows the agent: the previous attempts (their steps and answers) and the
    judge's reasoning (paper eq. 3)."""

    answers: list[str | None]
    reasoning: str
    round: int
    attempts: list[str] = field(default_factory=list)  # protocol.attempt_digest of each previous trajectory


@dataclass
class Sampled:
    task: QueryTask
    sample_index: int
    reflection_round: int
    result: AgentResult
    policy: str
    template_versions: dict[str, str]
    n_variants: int | None = None  # offline: distinct programs available for this query
    parent_trajectory_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def trajectory_id(query_id: str, sample_index: int, reflection_round: int, fingerprint: str, salt: str = "") -> str:
    """Stable id; ``salt`` (the judging parameters) keeps reflections of side-by-side judge runs apart."""
    parts = ("trajectory", query_id, sample_index, reflection_round, fingerprint) + ((salt,) if salt else ())
    return stable_id(*parts)


def n_offline_samples(task: QueryTask, n: int) -> int:
    return min(n, len(variant_programs(task.query)))


def offline_policy(
    task: QueryTask, sample_index: int, *, cross_check: bool = False, max_turns: int = 10
) -> OfflineExpertPolicy:
    paths = [task.data_path, task.staged_uri or "", (task.staged_uri or "").split("://", 1)[-1]]

    def hop_program(row: dict, prog: str) -> HopProgram:
        lang = row.get("solution_lang")
        sql = localize(prog.strip(), paths, task.file_name) if is_bare_sql(prog, lang) else None
        code = localize(
            as_python(prog, lang, int(row["hop"]), expected=row.get("reference_answer")), paths, task.file_name
        )
        return HopProgram(
            row["question"], code, int(row["hop"]), row.get("description") or "", row.get("reference_answer"), sql
        )

    hops: list[HopProgram] = []
    for row in task.chain:
        progs = variant_programs(row)
        if not progs:
            raise TaskError(
                "no_reference_solution", f"query {row['query_id']} (hop {row['hop']}) has no runnable solution program"
            )
        hops.append(hop_program(row, progs[sample_index % len(progs)]))
    final_progs = variant_programs(task.query)
    label = f"variant={sample_index}/{len(final_progs)}:{describe_program(hops[-1].program)}"
    # A last hop that only compares the previous result with a threshold is settled in words, not re-run.
    settle = threshold_check(final_progs[0])
    # The cross-check re-computes with the reference program; the reference sample itself just re-solves.
    own = final_progs[sample_index % len(final_progs)]
    checked = cross_check and own != final_progs[0] and settle is None
    reference = hop_program(task.query, final_progs[0]).program if checked else None
    fixed_read = reading_block(hops[0].program, task.data_format, task.read_options, task.file_name)
    reuse_first_read = default_read_suffices(fixed_read, task.data_format, task.read_options, task.file_name)
    return OfflineExpertPolicy(
        hops=hops,
        inspect=inspect_code(
            task.data_format, task.file_name, task.read_kwargs, seed=f"{task.query_id}:{sample_index}"
        ),
        data_format=task.data_format,
        file_name=task.file_name,
        variant_label=label,
        cross_check=reference,
        fixed_read=fixed_read,
        reuse_first_read=reuse_first_read,
        seed=f"{task.query_id}:{sample_index}",
        max_turns=max_turns + (1 if cross_check else 0),
        question=task.query["question"],
        settle_threshold=settle[1] if settle else None,
    )


class SandboxPool:
    """One sandbox for a shard plus the thread pool its blocking calls run on."""

    def __init__(self, params: RolloutParams, sandbox: Any | None = None) -> None:
        self.params = params
        self._own_sandbox = sandbox is None
        self._sandbox = sandbox
        self.threads = ThreadPoolExecutor(max_workers=params.exec_workers, thread_name_prefix="sandbox")

    def __enter__(self) -> SandboxPool:
        if self._sandbox is None:
            from datamind.sandbox import Sandbox, SandboxLimits

            self._sandbox = Sandbox(limits=SandboxLimits.from_env(), mode=self.params.resolved_sandbox_mode)
            self._sandbox.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.threads.shutdown(wait=True)
        if self._own_sandbox and self._sandbox is not None:
            self._sandbox.__exit__(None, None, None)

    @contextlib.asynccontextmanager
    async def session(self, task: QueryTask, files: list[str] | None = None) -> AsyncIterator[Any]:
        """A sandbox session with ``files`` staged (default: the task's data file)."""
        loop = asyncio.get_running_loop()
        files = [task.data_path] if files is None else files
        cm = self._sandbox.session(files, language=task.language, mode=self.params.resolved_sandbox_mode)
        sess = await loop.run_in_executor(self.threads, cm.__enter__)
        try:
            yield sess
        finally:
            await loop.run_in_executor(self.threads, cm.__exit__, None, None, None)


async def run_one(
    task: QueryTask,
    sample_index: int,
    params: RolloutParams,
    pool: SandboxPool,
    *,
    llm_client: Any | None = None,
    critique: Critique | None = None,
) -> Sampled:
    prompts = build_prompts(task, params.max_turns)
    versions = dict(prompts.versions)
    user_view = None
    if critique is not None:
        reflect_t = templates.load("rollout/reflect.j2")
        versions["reflect"] = reflect_t.version
        user_view = reflect_t.render(
            task=prompts.user,
            answers=critique.answers,
            attempts=critique.attempts,
            own_index=sample_index,
            critique=critique.reasoning,
        )
    n_variants = None
    if params.backend == "offline":
        policy = offline_policy(task, sample_index, cross_check=critique is not None, max_turns=params.max_turns)
        n_variants = len(variant_programs(task.query))
    else:
        if llm_client is None:
            raise ValueError("backend='llm' needs an llm_client")
        policy = LLMExpertPolicy(
            llm_client,
            params=params.sampling(),
            sample_index=sample_index,
            template_version=json.dumps(versions, sort_keys=True),
            last_turn=params.max_turns if params.last_turn_answers else None,
        )
    async with pool.session(task) as sess:
        result = await run_agent(
            policy,
            sess.run,
            system=prompts.system,
            system_view=prompts.system_view,
            user=prompts.user,
            user_view=user_view,
            max_turns=params.max_turns + (1 if critique is not None and params.backend == "offline" else 0),
            max_consecutive_void=params.max_consecutive_void,
            executor=pool.threads,
        )
    # (a reflection round resampled by a judge without a connection keeps the pattern thoughts)
    if params.rewrites and result.status == "answered" and (llm_client is not None or critique is None):
        result, versions = await _reworded(result, task, versions, llm_client, every=params.backend == "offline")
    return Sampled(
        task=task,
        sample_index=sample_index,
        reflection_round=critique.round if critique else 0,
        result=result,
        policy=policy.name,
        template_versions=versions,
        n_variants=n_variants,
    )


async def _reworded(
    result: AgentResult, task: QueryTask, versions: dict, llm_client: Any, *, every: bool
) -> tuple[AgentResult, dict]:
    """The trajectory with its thoughts in the expert model's words (``agent.rewrite``: all of an offline
    replay's, those of a model's own that copy the question); the trajectory's model names both writers where
    they differ, and its template versions the rewrite's."""
    if llm_client is None:
        raise ValueError("rewrite_thoughts needs an llm_client (an LLM connection)")
    question = task.query["question"]
    only = None if every else rewrite.copied(question)
    done = await rewrite.rewrite_thoughts(llm_client, result.messages, question, only)
    versions = {**versions, "rewrite": templates.load(rewrite.TEMPLATE).version}
    if done.kept:
        kept = ", ".join(f"{why}: {n}" for why, n in sorted(done.kept.items()))
        log.info("query %s: %d thoughts reworded, the others kept as written (%s)", task.query_id, done.rewritten, kept)
    reworded = done.rewritten and done.model and done.model != result.model
    model = f"{result.model}+thoughts:{done.model}" if reworded else result.model
    return (
        replace(
            result,
            messages=done.messages,
            model=model,
            prompt_tokens=result.prompt_tokens + done.prompt_tokens,
            completion_tokens=result.completion_tokens + done.completion_tokens,
        ),
        versions,
    )


def trajectory_row(
    s: Sampled, params: RolloutParams, run_id: str | None, now: datetime | None = None, *, id_salt: str = ""
) -> dict:
    r = s.result
    return {
        "trajectory_id": trajectory_id(
            s.task.query_id, s.sample_index, s.reflection_round, params.fingerprint, id_salt
        ),
        "query_id": s.task.query_id,
        "sample_index": s.sample_index,
        "reflection_round": s.reflection_round,
        "messages": [{"role": m["role"], "content": m["content"]} for m in r.messages],
        "final_answer": r.final_answer,
        "n_turns": r.n_turns,
        "n_void_turns": r.n_void_turns,
        "status": r.status,
        "model": r.model,
        "policy": s.policy,
        "template_version": json.dumps(s.template_versions, sort_keys=True),
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "cached_prompt_tokens": r.cached_prompt_tokens,
        "cached_completion_tokens": r.cached_completion_tokens,
        "created_at": now or datetime.now(UTC),
        "run_id": run_id,
        "error": f"{r.error}: {r.error_detail}" if r.error else None,
        "sampling_params": json.dumps(params.to_dict(), sort_keys=True),
    }
