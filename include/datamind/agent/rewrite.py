"""An optional pass over sampled trajectories: a model rewrites thoughts in its own words while the code, the
outputs and the answer stay exactly as they ran (``RolloutParams.rewrite_thoughts``). An offline replay has
every thought reworded; a model's own trajectory only those that copy the question's wording, which a small
teacher does although its prompt says not to (Qwen2.5-Coder-1.5B: 23% of its demo samples).

The offline expert's thoughts are assembled from sentence patterns, so a release written by it alone teaches a
few dozen frames; a model's wording varies them. The model only edits prose, so it cannot break a trajectory's
facts, and each rewrite is checked before it replaces anything: a rewrite that adds a number no output, cell
or original thought holds, names something in backticks that none of them names, copies the question, holds
code or tags, or cannot be parsed keeps the original thought, with the reason counted. Calls go through the
LLM client, so they are cached and retried like every other call.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from datamind.agent import protocol, templates
from datamind.agent.policies.measures import copies_question
from datamind.agent.shown import unshown_number
from datamind.llm.errors import ParseFailure
from datamind.llm.grammars import grammar
from datamind.llm.tags import extract_tag

TEMPLATE = "rollout/rewrite.j2"
ROLE = "expert"  # the model that would otherwise write the trajectories writes their thoughts
PARAMS = {"temperature": 0.0, "max_tokens": 256}  # one deterministic rewrite per thought: cached and replayable
MAX_OUTPUT_CHARS = 1500  # of the last output shown to the model: the head of a long print says what it held
_NAME = re.compile(r"`([^`\n]{1,80})`")
_CODE_OR_TAGS = re.compile(r"```|</?(?:think|code|answer|interpreter)>|^\s*(?:import |df\s*=|SELECT\s)", re.I | re.M)


@dataclass
class Rewritten:
    messages: list[dict]
    kept: Counter = field(default_factory=Counter)  # reason -> thoughts kept as they were
    rewritten: int = 0
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


def check(new: str, old: str, context: str, question: str) -> str | None:
    """Why ``new`` may not replace the thought ``old`` (``context``: the last output and the cell); None if it
    may."""
    if not new.strip():
        return "empty"
    if _CODE_OR_TAGS.search(new):
        return "code_or_tags"
    if len(new) > 2 * len(old) + 200:
        return "too_long"
    if copies_question(new, question):
        return "copies_question"
    seen = [{"role": "tool", "content": context}, {"role": "user", "content": old}]
    if unshown_number(new, seen) is not None:
        return "new_number"
    known = f"{old}\n{context}"
    if any(name not in known for name in _NAME.findall(new)):
        return "new_name"
    return None


def _parse(text: str) -> str:
    return extract_tag(text, "think", occurrence="first", allow_unclosed=True).strip()


def copied(question: str) -> Callable[[str], bool]:
    """The thoughts a model's own trajectory has reworded: those that copy the question's wording (the rest
    are its words already)."""
    return lambda think: copies_question(think, question)


async def rewrite_thoughts(
    client: Any, messages: list[dict], question: str, only: Callable[[str], bool] | None = None
) -> Rewritten:
    """``messages`` with every assistant turn's thought (``only``: those it selects) rewritten by the model where
    the rewrite passes :func:`check`; code, outputs and answers unchanged."""
    template = templates.load(TEMPLATE)
    out = [dict(m) for m in messages]
    last_output: dict[int, str] = {}
    previous = ""
    for i, m in enumerate(out):
        if m["role"] == "tool":
            previous = protocol.interpreter_body(m["content"]) or ""
        elif m["role"] == "assistant":
            last_output[i] = previous

    async def one(i: int) -> tuple[int, str | None, str, Any]:
        turn = protocol.parse_turn(out[i]["content"])
        if not turn.think or turn.is_void:
            return i, None, "no_thought", None
        if only is not None and not only(turn.think):
            return i, None, "not_selected", None
        action = turn.answer if turn.is_answer else turn.code
        output = last_output[i][:MAX_OUTPUT_CHARS]
        prompt = template.render(
            question=question, output=output, thought=turn.think, action=action, is_answer=turn.is_answer
        )
        try:  # (an endpoint that fails raises: an infrastructure failure fails the trajectory, to be retried)
            res = await client.chat_parsed(
                ROLE, [{"role": "user", "content": prompt}], _parse, template_version=template.version,
                params=PARAMS, max_parse_retries=1, grammar=grammar("rewrite_think"),
            )  # fmt: skip
        except ParseFailure:
            return i, None, "unparsed", None
        why = check(res.value, turn.think, f"{output}\n{action}", question)
        return i, (None if why else res.value), why or "", res

    result = Rewritten(out)
    for i, new, why, res in await asyncio.gather(*(one(i) for i in last_output)):
        if res is not None:
            result.model = res.model
            result.prompt_tokens += res.prompt_tokens
            result.completion_tokens += res.completion_tokens
        if new is None:
            if why != "not_selected":
                result.kept[why] += 1
            continue
        turn = protocol.parse_turn(out[i]["content"])
        fmt = protocol.format_answer_turn if turn.is_answer else protocol.format_code_turn
        out[i]["content"] = fmt(new, turn.answer if turn.is_answer else turn.code)
        result.rewritten += 1
    return result
