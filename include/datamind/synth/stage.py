"""The query-synthesis stage: ``catalog_tables`` -> ``queries`` (+ ``rejections``), in shards.

Input: catalog_tables rows (schemas.CATALOG_TABLES). Output, per parameter set (fingerprint ``fp``):

    queries/params=<fp>/part-<shard_id>.parquet          schemas.QUERIES
    queries/params=<fp>/_commits/<shard_id>.json         the shard's tables, files and summary (counts per
                                                         category and hop, skips, rejections)
    rejections/synthesis/params=<fp>/part-<shard_id>.parquet   schemas.REJECTIONS

The commit record (``datamind.tables``) is written last and marks the shard done: ``plan_synthesis`` leaves
out tables a committed shard covers for the same parameters, and ``synthesize_shard`` returns the stored
summary without doing any work when its shard committed, so reruns neither duplicate rows nor call the LLM
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import posixpath
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from datamind import tables
from datamind.assets import DIRS
from datamind.decontamination import BenchmarkIndex, load_index
from datamind.ids import stable_id
from datamind.schemas import QUERIES, REJECTIONS
from datamind.shards import chunk, write_shard
from datamind.storage import DataRoot
from datamind.synth import rows as R
from datamind.synth.params import SynthParams
from datamind.synth.table import dedup_rows, synthesize_table_offline, table_reader, verify_rows

log = logging.getLogger(__name__)


def output_dir(params: SynthParams) -> str:
    return posixpath.join(DIRS["queries"], f"params={params.fingerprint}")


def rejections_dir(params: SynthParams) -> str:
    return tables.synthesis_rejections_dir(params.fingerprint)


def catalog_by_id(
    root: DataRoot, table_ids: list[str] | None = None, sources: list[str] | None = None
) -> dict[str, dict]:
    """Latest catalog row per table_id (a re-profiled table supersedes its older row), of ``table_ids`` only
    when given, read from ``sources`` (the shards the planner found them in) first."""
    latest: dict[str, dict] = {}
    where = None if table_ids is None else ("table_id", table_ids)
    rows = tables.read(root, "catalog_tables", where=where, hint=sources).to_pylist()
    for row in rows:
        old = latest.get(row["table_id"])
        if old is None or (row["profiled_at"] or 0) >= (old["profiled_at"] or 0):
            latest[row["table_id"]] = row
    return latest


def plan_synthesis(
    root: DataRoot, shard_size: int, params: SynthParams, max_shards: int | None = None
) -> list[dict[str, Any]]:
    """Shard specs over catalog tables not yet synthesized with these parameters (at most ``max_shards``)."""
    params = SynthParams.given(params)
    done = tables.queries(root, params.fingerprint).migrate().done()
    where = tables.key_paths(root, "catalog_tables", "table_id")  # every shard of each table
    todo = sorted(set(where) - done, key=lambda t: (min(where[t]), t))  # by location, as profiling plans
    return [
        {
            "shard_id": stable_id("synthesis", params.fingerprint, part),
            "table_ids": part,
            "params_fingerprint": params.fingerprint,
            "sources": sorted(set().union(*map(where.get, part))),
        }
        for part in chunk(todo, shard_size, max_shards)
    ]


def _summary(
    shard_id: str,
    params: SynthParams,
    run_id: str | None,
    table_ids: list[str],
    queries: list[dict],
    rejections: list[dict],
    skips: list[dict],
    llm: dict,
) -> dict[str, Any]:
    by_cat_hop: dict[str, Counter] = defaultdict(Counter)
    for q in queries:
        by_cat_hop[q["category"]][str(q["hop"])] += 1
    skip_counts: dict[str, Counter] = defaultdict(Counter)
    for s in skips:
        skip_counts[s["category"]][s["reason_code"]] += 1
    return {
        "shard_id": shard_id,
        "params_fingerprint": params.fingerprint,
        "params": params.to_dict(),
        "run_id": run_id,
        "backend": params.backend,
        "table_ids": table_ids,
        "n_tables": len(table_ids),
        "n_queries": len(queries),
        "n_rejections": len(rejections),
        "by_category": dict(sorted(Counter(q["category"] for q in queries).items())),
        "by_hop": dict(sorted(Counter(str(q["hop"]) for q in queries).items())),
        "by_category_hop": {c: dict(sorted(h.items())) for c, h in sorted(by_cat_hop.items())},
        "by_backend": dict(Counter(q["backend"] for q in queries)),
        "skips": {c: dict(r) for c, r in sorted(skip_counts.items())},
        "skip_details": skips,
        "rejections": dict(sorted(Counter(r["reason_code"] for r in rejections).items())),
        "llm": llm,
    }


@dataclass
class _ShardWork:
    """What a shard has produced so far (queries, rejections, skips, LLM usage), step after step."""

    queries: list[dict] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)
    skips: list[dict] = field(default_factory=list)
    llm_stats: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class _LLMTable:
    """A table the LLM backend extends: its offline seed chains, over ``tables``."""

    table: dict
    tables: list[str]
    chains: list[list[dict]]
    source: Any

    @property
    def roots(self) -> list[dict]:
        """The first hop of each seed chain (kept as queries beside the model's while a hop builds on them)."""
        return [chain[0] for chain in self.chains]


def without_unused_seeds(rows: list[dict]) -> list[dict]:
    """The LLM backend's rows less the offline seed roots no kept row builds on: a root is written as the
    first hop of a chain the model extended, never as an offline question on its own (the run asked the
    model for its questions; a chain whose every hop failed, or whose hops were dropped, leaves nothing)."""
    built_on = {p for r in rows for p in r["parent_query_ids"]}
    return [r for r in rows if r["backend"] != "offline" or r["query_id"] in built_on]


def synthesize_shard(
    root: DataRoot,
    shard_spec: dict[str, Any],
    params: SynthParams,
    run_id: str | None,
    llm_client=None,
    sandbox=None,
) -> dict[str, Any]:
    """Synthesize queries for the shard's tables; returns the shard summary (also written as JSON)."""
    params = SynthParams.given(params)
    if shard_spec.get("params_fingerprint", params.fingerprint) != params.fingerprint:
        raise ValueError("shard spec was planned with different synthesis parameters")
    if params.backend == "llm" and llm_client is None:
        raise ValueError("backend 'llm' needs an llm_client")
    shard_id = shard_spec["shard_id"]
    name = f"part-{shard_id}"
    partition = tables.queries(root, params.fingerprint)
    committed = partition.record(shard_id)
    if committed is not None:
        log.info("synthesis shard %s already done (%d queries); nothing to do", shard_id, committed["n_queries"])
        return {**committed, "reused": True}

    catalog = catalog_by_id(root, shard_spec["table_ids"], shard_spec.get("sources"))
    work = _ShardWork()
    llm_tables = _synthesize_offline(root, shard_spec["table_ids"], catalog, params, run_id, work)
    if llm_tables:
        _synthesize_with_llm(llm_tables, params, run_id, llm_client, sandbox, work)
    _drop_benchmark_overlap(root, params, run_id, work)
    if params.backend == "llm":
        # a hop dropped above may have been its root's only use; verifying drops no hop without its root
        work.queries = without_unused_seeds(work.queries)
    n_verified = _verify_solutions(root, catalog, params, run_id, work)

    partition.begin()
    q_path = write_shard(root, QUERIES, output_dir(params), work.queries, f"{name}.parquet")
    r_path = write_shard(root, REJECTIONS, rejections_dir(params), work.rejections, f"{name}.parquet")
    table_ids = list(shard_spec["table_ids"])
    summary = _summary(
        shard_id, params, run_id, table_ids, work.queries, work.rejections, work.skips, dict(work.llm_stats)
    )
    summary["n_verified_solutions"] = n_verified
    summary = partition.commit(shard_id, table_ids, {"queries": q_path, "rejections": r_path}, **summary)
    log.info(
        "synthesis shard %s: %d tables, %d queries %s, %d rejections %s, skips %s",
        shard_id,
        len(table_ids),
        len(work.queries),
        summary["by_category"],
        len(work.rejections),
        summary["rejections"],
        summary["skips"],
    )
    return {**summary, "reused": False}


def _synthesize_offline(
    root: DataRoot,
    table_ids: list[str],
    catalog: dict[str, dict],
    params: SynthParams,
    run_id: str | None,
    work: _ShardWork,
) -> list[_LLMTable]:
    """The offline pass over every table: its queries (offline backend) or its seed chains, returned as the
    tables the LLM backend goes on to extend. One capped parser child reads the shard's staged files (a file
    is as untrusted here as at ingestion); it ends with the pass."""
    llm_tables: list[_LLMTable] = []
    with table_reader() as parser:
        for tid in table_ids:
            table = catalog.get(tid)
            if table is None:
                work.rejections.append(
                    R.rejection_row(
                        key=(params.fingerprint, tid, "missing"),
                        reason_code="table_not_in_catalog",
                        reason=f"table {tid} is not in catalog_tables",
                        run_id=run_id,
                    )
                )
                continue
            llm = params.backend == "llm"
            # the LLM backend writes a seed chain's root as the chain's first hop: it must be of a requested category
            offline = synthesize_table_offline(
                root,
                table,
                params,
                run_id,
                with_singles=not llm,
                chain_roots=params.categories if llm else None,
                parser=parser,
            )
            work.rejections.extend(offline.rejections)
            work.skips.extend(
                {"table_id": tid, "category": s.category, "reason_code": s.reason_code, "reason": s.reason}
                for s in offline.skips
            )
            if params.backend == "offline":
                kept, dropped = dedup_rows(offline.rows, params.dedup_threshold, params.fingerprint, run_id)
                work.queries.extend(kept)
                work.rejections.extend(dropped)
            else:
                chains = offline.chain_rows
                tables = chains[0][0]["tables"] if chains else [table["table_name"]]
                llm_tables.append(_LLMTable(table, tables, chains, offline.source))
    return llm_tables


def _synthesize_with_llm(
    llm_tables: list[_LLMTable], params: SynthParams, run_id: str | None, llm_client, sandbox, work: _ShardWork
) -> None:
    """The LLM backend over the shard's tables, concurrently (``llm_concurrency`` calls at a time); the
    model's reference programs are untrusted code, so Python ones run in the sandbox."""
    from datamind.synth.reference import ReferenceRunner

    before = llm_client.usage.snapshot()
    with contextlib.ExitStack() as stack:
        box = sandbox  # a caller's sandbox stays the caller's to close
        if box is None and any(t.source is not None and t.source.solution_lang_default == "python" for t in llm_tables):
            from datamind.sandbox import Sandbox, SandboxLimits

            box = stack.enter_context(Sandbox(limits=SandboxLimits.from_env()))  # the deployment's overrides
        outputs = asyncio.run(_llm_tables_together(llm_tables, params, run_id, llm_client, ReferenceRunner(box)))
    after = llm_client.usage.snapshot()
    for t, out in zip(llm_tables, outputs, strict=True):
        # before dedup: a root no hop was built on must not push out a model's question as its near duplicate
        rows = without_unused_seeds(t.roots + out.rows)
        kept, dropped = dedup_rows(rows, params.dedup_threshold, params.fingerprint, run_id)
        work.queries.extend(kept)
        work.rejections.extend(out.rejections + dropped)
    # Paid calls and tokens of this shard (cached answers are free and counted apart).
    work.llm_stats.update(
        {k: after[k] - before[k] for k in ("calls", "cached_calls", "prompt_tokens", "completion_tokens")}
    )


async def _llm_tables_together(
    llm_tables: list[_LLMTable], params: SynthParams, run_id: str | None, llm_client, reference
) -> list:
    from datamind.synth.llm_backend import synthesize_table_llm  # imported only for the LLM backend

    gate = asyncio.Semaphore(params.llm_concurrency)
    try:
        return await asyncio.gather(
            *(
                synthesize_table_llm(
                    llm_client,
                    t.table,
                    t.tables,
                    params,
                    params.fingerprint,
                    t.chains,
                    run_id,
                    gate,
                    t.source,
                    reference,
                )
                for t in llm_tables
            )
        )
    finally:
        await llm_client.aclose()


def _drop_benchmark_overlap(root: DataRoot, params: SynthParams, run_id: str | None, work: _ShardWork) -> None:
    benchmarks = load_index(root, ngram=params.benchmark_ngram)
    if work.queries and not benchmarks.empty:
        work.queries, overlapping = drop_benchmark_questions(work.queries, benchmarks, params.fingerprint, run_id)
        work.rejections.extend(overlapping)


def _verify_solutions(
    root: DataRoot, catalog: dict[str, dict], params: SynthParams, run_id: str | None, work: _ShardWork
) -> int:
    """Run each query's reference solution where asked; returns how many queries carry a verified one."""
    if not (params.verify_solutions and work.queries):
        return 0
    work.queries, unverified = verify_rows(root, work.queries, catalog, params, run_id)
    work.rejections.extend(unverified)
    return sum(1 for q in work.queries if q.get("reference_solution"))


def summarize_run(root: DataRoot, params: SynthParams, run_id: str | None = None) -> dict[str, Any]:
    """Merge the shard summaries of these parameters (optionally one run) and write the run summary."""
    params = SynthParams.given(params)
    total: dict[str, Any] = {
        "params_fingerprint": params.fingerprint,
        "params": params.to_dict(),
        "run_id": run_id,
        "n_shards": 0,
        "n_tables": 0,
        "n_queries": 0,
        "n_rejections": 0,
    }
    counters = {k: Counter() for k in ("by_category", "by_hop", "by_backend", "rejections", "llm")}
    skips: dict[str, Counter] = defaultdict(Counter)
    for s in tables.queries(root, params.fingerprint).records().values():
        if run_id is not None and s.get("run_id") != run_id:
            continue
        total["n_shards"] += 1
        for k in ("n_tables", "n_queries", "n_rejections"):
            total[k] += s.get(k, 0)
        for k, counter in counters.items():
            counter.update(s.get(k) or {})
        for cat, reasons in (s.get("skips") or {}).items():
            skips[cat].update(reasons)
    total.update({k: dict(sorted(v.items())) for k, v in counters.items()})
    total["skips"] = {c: dict(r) for c, r in sorted(skips.items())}
    rel = posixpath.join(output_dir(params), f"run-{run_id or 'all'}.summary.json")
    root.write_text(rel, json.dumps(total, indent=2, sort_keys=True))
    log.info(
        "synthesis run %s: %d tables, %d queries by category %s by hop %s; skips %s; rejections %s",
        run_id,
        total["n_tables"],
        total["n_queries"],
        total["by_category"],
        total["by_hop"],
        total["skips"],
        total["rejections"],
    )
    return total


def drop_benchmark_questions(
    rows: list[dict], index: BenchmarkIndex, fingerprint: str, run_id: str | None
) -> tuple[list[dict], list[dict]]:
    """Questions sharing a long word run with a benchmark question go, and so do chain hops built on them."""
    bad: dict[str, str] = {}
    for row in sorted(rows, key=lambda r: r["hop"]):
        hit = index.match_question(row["question"])
        if hit:
            bad[row["query_id"]] = f"question overlaps benchmark question {hit}"
        elif any(p in bad for p in row.get("parent_query_ids") or []):
            bad[row["query_id"]] = "built on a question dropped for benchmark overlap"
    kept = [r for r in rows if r["query_id"] not in bad]
    dropped = [
        R.rejection_row(
            key=(fingerprint, r["query_id"], "benchmark_overlap"),
            reason_code="benchmark_question_overlap",
            reason=bad[r["query_id"]][:1000],
            file_id=r.get("file_id"),
            query_id=r["query_id"],
            raw=r["question"],
            run_id=run_id,
        )
        for r in rows
        if r["query_id"] in bad
    ]
    return kept, dropped
