"""Construction of ``queries`` and ``rejections`` rows (schemas.QUERIES / schemas.REJECTIONS)."""

from __future__ import annotations

from datetime import UTC, datetime

from datamind.ids import stable_id
from datamind.schemas import rejection
from datamind.stages import STAGES

STAGE = STAGES["synthesize_queries"].rejections
MAX_RAW_CHARS = 4000


def now() -> datetime:
    return datetime.now(UTC)


def query_id(
    fingerprint: str, table_id: str, backend: str, hop: int, question: str, parents: list[str], solution: str | None
) -> str:
    """Same table, parameters, question, lineage and solution -> same id, on every rerun."""
    return stable_id("query", fingerprint, table_id, backend, hop, question, sorted(parents), solution or "")


def query_row(
    *,
    fingerprint: str,
    table: dict,
    tables: list[str],
    category: str,
    hop: int,
    parents: list[str],
    root_id: str | None,
    question: str,
    description: str | None,
    lang: str | None,
    solution: str | None,
    answer: str | None,
    backend: str,
    model: str | None,
    template_version: str,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    cached_prompt_tokens: int | None = None,
    cached_completion_tokens: int | None = None,
    run_id: str | None = None,
    variants: list[str] | None = None,
) -> dict:
    qid = query_id(fingerprint, table["table_id"], backend, hop, question, parents, solution)
    return {
        "query_id": qid,
        "file_id": table["file_id"],
        "table_id": table["table_id"],
        "tables": tables,
        "data_format": table["format"],
        "category": category,
        "hop": hop,
        "parent_query_ids": parents,
        "root_query_id": root_id or qid,
        "question": question,
        "description": description,
        "solution_lang": lang,
        "reference_solution": solution,
        "solution_variants": list(variants or []),
        "reference_answer": answer,
        "backend": backend,
        "model": model,
        "template_version": template_version,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "cached_prompt_tokens": cached_prompt_tokens,
        "cached_completion_tokens": cached_completion_tokens,
        "created_at": now(),
        "run_id": run_id,
    }


def rejection_row(
    *,
    key: tuple,
    reason_code: str,
    reason: str,
    file_id: str | None = None,
    query_id: str | None = None,
    raw: str | None = None,
    run_id: str | None = None,
) -> dict:
    return rejection(
        STAGE,
        stable_id(STAGE, *key),
        reason_code,
        reason,
        file_id=file_id,
        query_id=query_id,
        raw=raw[:MAX_RAW_CHARS] if raw else raw,
        run_id=run_id,
        created_at=now(),
    )
