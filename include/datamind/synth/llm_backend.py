"""LLM backend: render the synthesis prompts, ask the model, parse ``<question>/<description>/<type>``.

Single-hop questions come from ``prompts/synthesis/query.j2`` (one call per requested question, the
questions already written for the same table and category shown so the next one differs). Multi-hop
chains start from an executed offline hop-1 question, whose result is known, and grow with
``prompts/synthesis/compose.j2``; the category of each further hop follows the offline chain's walk, so
the chain's task types stay ones the table supports. LLM questions carry no reference solution.
A reply that stays malformed after the client's re-asking becomes a ``rejections`` row with the raw text.
"""

from __future__ import annotations

import asyncio
import functools
import re
from dataclasses import dataclass, field

from datamind import categories
from datamind.llm import LLMCallError, LLMClient, ParseFailure, extract_all, extract_tags
from datamind.synth import rows as R
from datamind.synth.prompts import PromptError, meta_for_prompt, render_compose_prompt, render_query_prompt

ROLE = "synthesizer"
MIN_QUESTION_CHARS = 10
MAX_QUESTION_CHARS = 1000


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def parse_query_output(text: str, category_id: str) -> dict[str, str]:
    """Model reply -> {question, description, type}; ValueError (the client re-asks) when malformed."""
    tags = extract_tags(text, required=("question", "description", "type"))
    if len(extract_all(text, "question")) > 1:
        raise ValueError("several <question> blocks; exactly one question is required")
    question = " ".join(tags["question"].split())
    if not MIN_QUESTION_CHARS <= len(question) <= MAX_QUESTION_CHARS:
        raise ValueError(
            f"question length {len(question)} outside {MIN_QUESTION_CHARS}-{MAX_QUESTION_CHARS} characters"
        )
    cat = categories.get(category_id)
    got = _norm(tags["type"])
    if got not in (_norm(cat.id), _norm(cat.name)):
        raise ValueError(f"<type> is {tags['type']!r}, expected {cat.name!r}")
    return {"question": question, "description": " ".join(tags["description"].split()), "type": cat.id}


@dataclass
class LLMTableOutput:
    rows: list[dict] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)


async def _ask(
    client: LLMClient, out: LLMTableOutput, prompt, category_id: str, key: tuple, table: dict, run_id: str | None
):
    """One parsed question, or None with a rejection recorded."""
    messages = [{"role": "user", "content": prompt.text}]
    parser = functools.partial(parse_query_output, category_id=category_id)
    try:
        res = await client.chat_parsed(ROLE, messages, parser, template_version=prompt.version)
    except ParseFailure as exc:
        out.rejections.append(
            R.rejection_row(
                key=key,
                reason_code=exc.reason_code,
                reason=exc.reason,
                file_id=table["file_id"],
                raw=exc.raw,
                run_id=run_id,
            )
        )
        return None
    except LLMCallError as exc:
        out.rejections.append(
            R.rejection_row(
                key=key, reason_code=exc.reason_code, reason=str(exc), file_id=table["file_id"], run_id=run_id
            )
        )
        return None
    return res


async def synthesize_table_llm(
    client: LLMClient,
    table: dict,
    tables: list[str],
    params,
    fingerprint: str,
    seeds: list[list[dict]],
    run_id: str | None,
    gate: asyncio.Semaphore | None = None,
) -> LLMTableOutput:
    """LLM questions for one table. ``seeds``: offline chains (rows, hop order) to compose from."""
    out = LLMTableOutput()
    tid = table["table_id"]
    try:
        meta = meta_for_prompt(table.get("meta_info"))
    except PromptError as exc:
        out.rejections.append(
            R.rejection_row(
                key=(fingerprint, tid, "meta_info"),
                reason_code="bad_meta_info",
                reason=str(exc),
                file_id=table["file_id"],
                run_id=run_id,
            )
        )
        return out
    gate = gate or asyncio.Semaphore(params.llm_concurrency)

    def row(category, hop, parents, root_id, parsed, res, version):
        return R.query_row(
            fingerprint=fingerprint,
            table=table,
            tables=tables,
            category=category,
            hop=hop,
            parents=parents,
            root_id=root_id,
            question=parsed["question"],
            description=parsed["description"],
            lang=None,
            solution=None,
            answer=None,
            backend="llm",
            model=res.model,
            template_version=version,
            prompt_tokens=res.prompt_tokens,
            completion_tokens=res.completion_tokens,
            run_id=run_id,
        )

    async def singles(category: str) -> list[dict]:
        made: list[dict] = []
        for i in range(params.queries_per_category):
            prompt = render_query_prompt(meta, category, i, avoid=[r["question"] for r in made])
            async with gate:
                res = await _ask(client, out, prompt, category, (fingerprint, tid, category, i), table, run_id)
            if res is not None:
                made.append(row(category, 1, [], None, res.value, res, prompt.version))
        return made

    async def chain(seed: list[dict]) -> list[dict]:
        root = seed[0]
        made: list[dict] = []
        prev_q, prev_result, prev_id = root["question"], root["reference_answer"], root["query_id"]
        for hop in range(2, len(seed) + 1):
            category = seed[hop - 1]["category"]
            prompt = render_compose_prompt(meta, category, prev_q, prev_result, hop, params.max_hops)
            async with gate:
                res = await _ask(
                    client, out, prompt, category, (fingerprint, tid, "chain", root["query_id"], hop), table, run_id
                )
            if res is None:
                break  # a chain cannot skip a hop: later hops would lose their input
            r = row(category, hop, [prev_id], root["query_id"], res.value, res, prompt.version)
            made.append(r)
            prev_q, prev_result, prev_id = r["question"], None, r["query_id"]
        return made

    batches = await asyncio.gather(*(singles(c) for c in params.categories), *(chain(s) for s in seeds))
    for batch in batches:
        out.rows.extend(batch)
    return out
