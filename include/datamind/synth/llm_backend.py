"""LLM backend: render the synthesis prompts, ask the model, parse ``<question>/<description>/<type>/<code>``,
and execute the model's reference program.

Single-hop questions come from ``prompts/synthesis/query.j2`` (one call per requested question, the
questions already written for the same table and category shown so the next one differs). Multi-hop
chains start from an executed offline hop-1 question of a requested category, whose result is known, and
grow with ``prompts/synthesis/compose.j2``; the category of each further hop follows the offline chain's
walk, so the chain's task types stay ones the table supports, except where the walk steps into a category
the run did not ask for: that hop is asked as one of the requested categories instead.

Every question comes with the program that answers it. The program runs in the sandbox (see
``reference.py``); what it prints is the query's reference answer, and in a chain it is the result the
next hop's prompt builds on. A program that fails is shown to the model with its error, at most
``reference_repairs`` times; a question whose program never runs is a ``reference_failed`` rejection.
A reply that stays malformed after the client's re-asking becomes a ``rejections`` row with the raw text.
"""

from __future__ import annotations

import asyncio
import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any

from datamind import categories, grounding, references
from datamind.ids import stable_id
from datamind.llm import LLMCallError, LLMClient, ParseFailure, extract_all, extract_tags
from datamind.llm.errors import BatchPending
from datamind.llm.grammars import grammar
from datamind.llm.usage import cached_part
from datamind.phrasing import answer_form_problem, scope_question
from datamind.roles import ROLES, parse_overrides, table_roles
from datamind.synth import rows as R
from datamind.synth.offline.execute import ExecutionError
from datamind.synth.prompts import (
    PromptError,
    all_category_specs,
    category_spec,
    meta_for_prompt,
    program_context,
    render_compose_prompt,
    render_query_prompt,
)
from datamind.synth.reference import ReferenceRunner, complete_program, strip_fences

ROLE = "synthesizer"
MIN_QUESTION_CHARS = 10
MAX_QUESTION_CHARS = 1000


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def parse_query_output(text: str, category_id: str, with_code: bool = False) -> dict[str, str]:
    """Model reply -> {question, description, type[, code]}; ValueError (the client re-asks) when malformed."""
    tags = extract_tags(
        text, required=("question", "description", "type", "code") if with_code else ("question", "description", "type")
    )
    if len(extract_all(text, "question")) > 1:
        raise ValueError("several <question> blocks; exactly one question is required")
    question = " ".join(tags["question"].split())
    if not MIN_QUESTION_CHARS <= len(question) <= MAX_QUESTION_CHARS:
        raise ValueError(
            f"question length {len(question)} outside {MIN_QUESTION_CHARS}-{MAX_QUESTION_CHARS} characters"
        )
    slots = sorted(set(_SLOT.findall(question)) & _template_slots())
    if slots:
        raise ValueError(f"the question still holds the template's slots {', '.join(slots)}: fill each with a "
                         "column name, value or condition taken from the file")  # fmt: skip
    if _norm(question) in _exemplars(category_id):
        raise ValueError("the question copies an example written for another data set: ask about this file")
    cat = categories.get(category_id)
    got = _norm(tags["type"])
    if got not in (_norm(cat.id), _norm(cat.name)):
        raise ValueError(f"<type> is {tags['type']!r}, expected {cat.name!r}")
    out = {"question": question, "description": " ".join(tags["description"].split()), "type": cat.id}
    if with_code:
        code = strip_fences(tags["code"])
        if not code.strip():
            raise ValueError("<code> is empty; the program that computes the answer is required")
        out["code"] = code
    return out


@dataclass
class LLMTableOutput:
    rows: list[dict] = field(default_factory=list)
    rejections: list[dict] = field(default_factory=list)


@dataclass
class Answered:
    """A parsed question with its program and what the program printed (None without a runner)."""

    parsed: dict
    res: object  # the ParsedResult of the reply that was kept
    answer: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0  # of the tokens above, those the response cache answered
    cached_completion_tokens: int = 0


_SLOT = re.compile(r"\[[^\[\]]{1,60}\]")


@functools.cache
def _template_slots() -> frozenset[str]:
    """Every ``[slot]`` of every category's question templates: text a question must fill, never keep."""
    templates = [t for spec in all_category_specs() for t in spec.question_templates]
    return frozenset(slot for t in templates for slot in _SLOT.findall(t))


@functools.cache
def _exemplars(category_id: str) -> frozenset[str]:
    return frozenset(_norm(ex) for ex in category_spec(category_id).exemplars)


def _repair_message(error: str) -> str:
    return (
        "Running your <code> on the real file failed:\n"
        f"{error}\n"
        "Fix the program (the question may stay the same) and reply again in the same format."
    )


def _form_message(problem: str) -> str:
    return (
        f"Your <code> ran, but {problem}.\n"
        "Fix the program so that it prints only the answer, in the form the question asks for, and reply again "
        "in the same format."
    )


async def _ask(
    client: LLMClient,
    out: LLMTableOutput,
    prompt,
    category_id: str,
    key: tuple,
    table: dict,
    run_id: str | None,
    runner: tuple[ReferenceRunner, object] | None = None,
    repairs: int = 1,
    parse_retries: int = 2,
    schema: grounding.Schema | None = None,
    scope: tuple[str, str] | None = None,
) -> Answered | None:
    """One parsed question (and its executed reference answer when ``runner`` is given), or None with a
    rejection recorded."""
    messages = [{"role": "user", "content": prompt.text}]
    parser = functools.partial(parse_query_output, category_id=category_id, with_code=runner is not None)
    lang = runner[0].lang_for(runner[1]) if runner is not None else None
    shape = grammar("synth_query", type_name=categories.get(category_id).name, lang=lang)
    tokens = [0, 0, 0, 0]  # prompt, completion, and the cached part of each
    error, failure = "", "reference_failed"
    for _ in range(repairs + 1):
        try:
            res = await client.chat_parsed(
                ROLE, messages, parser, template_version=prompt.version, max_parse_retries=parse_retries, grammar=shape
            )
        except BatchPending:
            raise  # not a failure: the sequence waits for the answer (batch mode)
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
        cached = cached_part(res)
        tokens[0] += res.prompt_tokens
        tokens[1] += res.completion_tokens
        tokens[2] += cached[0]
        tokens[3] += cached[1]
        res.value["question"] = scope_question(res.value["question"], scope)
        leave_out = getattr(runner[1], "exclude", None) if runner is not None else None
        if leave_out is not None and leave_out.sentence() not in res.value["question"]:
            # its program reads the table without its aggregate rows (``Source.exclude``): the question says so
            res.value["question"] = f"{res.value['question']} {leave_out.sentence()}"
        problem = grounding.check_question(res.value["question"], schema) if schema is not None else None
        if problem is not None:  # a question the agent could not answer from what it sees, or should not ask
            out.rejections.append(
                R.rejection_row(
                    key=key, reason_code=problem[0], reason=problem[1], file_id=table["file_id"], raw=res.text,
                    run_id=run_id,
                )
            )  # fmt: skip
            return None
        if runner is None:
            return Answered(res.value, res, None, *tokens)
        reference, source = runner
        lang = reference.lang_for(source)
        res.value["code"] = complete_program(lang, res.value["code"], source)
        try:
            answer = await asyncio.to_thread(reference.run, lang, res.value["code"], source)
        except ExecutionError as exc:
            error, failure, feedback = str(exc), "reference_failed", _repair_message(str(exc))
        else:
            form = answer_form_problem(res.value["question"], answer, res.value["code"])
            literal = references.planted_answer(res.value["code"], answer, lang) if form is None else None
            if literal is not None:  # a reference that writes its answer verifies itself: no ground truth
                out.rejections.append(
                    R.rejection_row(
                        key=key,
                        reason_code=references.LITERAL_ANSWER,
                        reason=f"the question's program writes its answer as the literal {literal}",
                        file_id=table["file_id"],
                        raw=res.text,
                        run_id=run_id,
                    )
                )
                return None
            if form is None:
                return Answered(res.value, res, answer, *tokens)
            # it ran, but printed what no agent should learn to answer: asked to fix like a crash
            error, failure, feedback = form, references.ANSWER_FORM_MISMATCH, _form_message(form)
        messages = [*messages, {"role": "assistant", "content": res.text}, {"role": "user", "content": feedback}]
    why = "did not run" if failure == "reference_failed" else "printed no answer of the question's form"
    out.rejections.append(
        R.rejection_row(
            key=key,
            reason_code=failure,
            reason=f"the question's program {why} after {repairs + 1} attempt(s): {error}"[:2000],
            file_id=table["file_id"],
            raw=res.text,
            run_id=run_id,
        )
    )
    return None


def question_rules(
    table: dict, source, roles: dict[str, str]
) -> tuple[grounding.Schema | None, tuple[str, str] | None]:
    """(what the agent will see of the data, the table scope a question needs): the grounding rules an
    LLM-written question is held to, with the table's column roles (``table_roles``, corrections applied)."""
    name = str(table.get("table_name"))
    if source is not None and source.schema is not None:
        # read with the source, in the parser child (``open_source``): this process never opens the file
        schema = replace(source.schema, roles={})
    else:
        columns = list(table.get("columns") or roles)
        schema = grounding.Schema({name: columns}, file_name=source.file_name if source is not None else "")
    schema.roles = {f"{name}.{col}": role for col, role in roles.items()}
    return schema, (source.scope if source is not None else None)


def grounding_context(table: dict, schema, scope, roles: dict[str, str]) -> dict:
    """What the synthesis prompts say about names and roles (``rules`` of query.j2 / compose.j2)."""
    by_role: dict[str, list[str]] = {}
    for col, role in roles.items():
        by_role.setdefault(role, []).append(col)
    return {
        "scope": f"the {scope[1]} {scope[0]}" if scope else None,
        "others": sorted(t for t in (schema.tables if schema else {}) if t != table.get("table_name")),
        "roles": {role: by_role[role] for role in ROLES if role in by_role},
    }


async def synthesize_table_llm(
    client: LLMClient,
    table: dict,
    tables: list[str],
    params,
    fingerprint: str,
    seeds: list[list[dict]],
    run_id: str | None,
    gate: asyncio.Semaphore | None = None,
    source=None,
    reference: ReferenceRunner | None = None,
) -> LLMTableOutput:
    """LLM questions for one table. ``seeds``: offline chains (rows, hop order) to compose from.

    With ``source`` (how the table is read) and ``reference`` (where programs run), every question
    carries its executed reference answer and each chain hop builds on the previous hop's result."""
    out = LLMTableOutput()
    try:
        meta = meta_for_prompt(table.get("meta_info"))
    except PromptError as exc:
        out.rejections.append(
            R.rejection_row(
                key=(fingerprint, table["table_id"], "meta_info"),
                reason_code="bad_meta_info",
                reason=str(exc),
                file_id=table["file_id"],
                run_id=run_id,
            )
        )
        return out
    runner = (reference, source) if reference is not None and source is not None else None
    roles = table_roles(table, parse_overrides(params.column_roles))
    schema, scope = question_rules(table, source, roles)
    asker = _TableAsker(
        client=client,
        out=out,
        table=table,
        tables=tables,
        params=params,
        fingerprint=fingerprint,
        run_id=run_id,
        gate=gate or asyncio.Semaphore(params.llm_concurrency),
        runner=runner,
        meta=meta,
        data=program_context(source) if runner else None,
        schema=schema,
        scope=scope,
        rules=grounding_context(table, schema, scope, roles),
    )
    batches = await asyncio.gather(*(asker.singles(c) for c in params.categories), *(asker.chain(s) for s in seeds))
    for batch in batches:
        out.rows.extend(batch)
    return out


@dataclass
class _TableAsker:
    """One table's questions: single-hop ones per category, and chains composed hop by hop on seeds."""

    client: LLMClient
    out: LLMTableOutput
    table: dict
    tables: list[str]
    params: Any
    fingerprint: str
    run_id: str | None
    gate: asyncio.Semaphore
    runner: tuple[ReferenceRunner, Any] | None
    meta: dict
    data: dict | None
    schema: grounding.Schema | None = None
    scope: tuple[str, str] | None = None
    rules: dict | None = None

    async def _ask(self, prompt, category: str, key: tuple) -> Answered | None:
        async with self.gate:
            return await _ask(
                self.client,
                self.out,
                prompt,
                category,
                key,
                self.table,
                self.run_id,
                self.runner,
                self.params.reference_repairs,
                self.params.parse_retries,
                self.schema,
                self.scope,
            )

    def row(self, category: str, hop: int, parents: list[str], root_id: str | None, got: Answered, version) -> dict:
        parsed, res = got.parsed, got.res
        return R.query_row(
            fingerprint=self.fingerprint,
            table=self.table,
            tables=self.tables,
            category=category,
            hop=hop,
            parents=parents,
            root_id=root_id,
            question=parsed["question"],
            description=parsed["description"],
            lang=self.data["lang"] if got.answer is not None else None,
            solution=parsed.get("code") if got.answer is not None else None,
            answer=got.answer,
            backend="llm",
            model=res.model,
            template_version=version,
            prompt_tokens=got.prompt_tokens,
            completion_tokens=got.completion_tokens,
            cached_prompt_tokens=got.cached_prompt_tokens,
            cached_completion_tokens=got.cached_completion_tokens,
            run_id=self.run_id,
        )

    async def singles(self, category: str) -> list[dict]:
        made: list[dict] = []
        tid = self.table["table_id"]
        for i in range(self.params.queries_per_category):
            avoid = [r["question"] for r in made]
            prompt = render_query_prompt(self.meta, category, i, avoid=avoid, data=self.data, rules=self.rules)
            try:
                got = await self._ask(prompt, category, (self.fingerprint, tid, category, i))
            except BatchPending:
                return made  # the next prompts show this question: they wait for it (batch mode's dry pass)
            if got is not None:
                made.append(self.row(category, 1, [], None, got, prompt.version))
        return made

    def hop_category(self, walked: str, root_id: str, hop: int) -> str:
        """The walk's category when it was requested, else a requested one (picked per chain and hop, so
        substituted hops spread over the requested categories)."""
        wanted = self.params.categories
        if walked in wanted:
            return walked
        return wanted[int(stable_id("hop-category", root_id, hop), 16) % len(wanted)]

    async def chain(self, seed: list[dict]) -> list[dict]:
        root = seed[0]
        tid = self.table["table_id"]
        made: list[dict] = []
        prev_q, prev_result, prev_id = root["question"], root["reference_answer"], root["query_id"]
        for hop in range(2, len(seed) + 1):
            category = self.hop_category(seed[hop - 1]["category"], root["query_id"], hop)
            prompt = render_compose_prompt(
                self.meta, category, prev_q, prev_result, hop, self.params.max_hops, data=self.data, rules=self.rules
            )
            try:
                got = await self._ask(prompt, category, (self.fingerprint, tid, "chain", root["query_id"], hop))
            except BatchPending:
                return made  # the next hop needs this one's result (batch mode's dry pass)
            if got is None:
                # a chain cannot skip a hop (later hops would lose their input): each hop not written is
                # recorded, so no drop goes unexplained
                for later in range(hop + 1, len(seed) + 1):
                    self.out.rejections.append(
                        R.rejection_row(
                            key=(self.fingerprint, tid, "chain", root["query_id"], later),
                            reason_code="chain_hop_skipped",
                            reason=f"hop {later} of the chain from {root['query_id']} was not asked: hop {hop} failed",
                            file_id=self.table["file_id"],
                            run_id=self.run_id,
                        )
                    )
                break
            r = self.row(category, hop, [prev_id], root["query_id"], got, prompt.version)
            made.append(r)
            # the next hop builds on this hop's executed result (None only when no program ran)
            prev_q, prev_result, prev_id = r["question"], got.answer, r["query_id"]
        return made
