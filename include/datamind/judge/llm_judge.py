"""The LLM self-consistency judge (the paper uses GPT-4o-mini): ``prompts/judge/consistency.j2``.

The reply must hold ``<reasoning>``, ``<correct>yes|no</correct>`` and ``<number>k</number>`` with k in 1..N;
anything else is re-asked (bounded) by the LLM client and finally raises ``ParseFailure``.

:class:`AgreementFirst` asks it only where its reading adds something: answers the programmatic equivalence
finds equal, and that the query's executed reference confirms, are consistent without a call; answers whose
numbers differ are not consistent, whatever the model says.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from datamind.agent import templates
from datamind.agent.equivalence import numbers_differ
from datamind.judge.consistency import OfflineJudge
from datamind.judge.verdict import Verdict
from datamind.llm.grammars import grammar
from datamind.llm.tags import TagParseError, extract_choice, extract_tag

TEMPLATE = "judge/consistency.j2"
AGREEMENT = "agreement"  # a verdict's judge where equal, confirmed answers were passed without the model
OVERRULED = "+overruled"  # appended to a verdict's judge where the rule overruled the model's "yes"


@dataclass(frozen=True)
class JudgeReply:
    reasoning: str
    consistent: bool
    best_index: int  # 0-based


def parse_judge_reply(text: str, n_answers: int) -> JudgeReply:
    """Parse a judge reply; raises ``TagParseError`` (a ValueError) with a stable code when malformed."""
    reasoning = extract_tag(text, "reasoning", occurrence="first", allow_unclosed=False)
    verdict = extract_choice(text, "correct", ("yes", "no"))
    raw_num = extract_tag(text, "number", occurrence="last")
    m = re.fullmatch(r"\s*(?:answer\s*)?#?\s*(\d+)\s*\.?\s*", raw_num, re.IGNORECASE)
    if not m:
        raise TagParseError(
            "bad_number", f"<number> holds {raw_num[:40]!r}; expected an integer 1..{n_answers}", "number"
        )
    k = int(m.group(1))
    if not 1 <= k <= n_answers:
        raise TagParseError("bad_number", f"<number> is {k}; expected 1..{n_answers}", "number")
    return JudgeReply(reasoning, verdict == "yes", k - 1)


class LLMJudge:
    def __init__(self, client: Any, *, params: dict | None = None, max_parse_retries: int = 2) -> None:
        self.client = client
        self.params = {"temperature": 0.0, **(params or {})}
        self.max_parse_retries = max_parse_retries
        self.template = templates.load(TEMPLATE)
        self.name = "llm"

    @property
    def template_version(self) -> str:
        return self.template.version

    def render(self, question: str, answers: list[str]) -> str:
        return self.template.render(question=question, answers=answers)

    async def judge(self, question: str, answers: list[str]) -> Verdict:
        prompt = self.render(question, answers)
        res = await self.client.chat_parsed(
            "judge",
            [{"role": "user", "content": prompt}],
            lambda text: parse_judge_reply(text, len(answers)),
            template_version=self.template_version,
            params=self.params,
            max_parse_retries=self.max_parse_retries,
            grammar=grammar("judge_consistency", n=len(answers)),
        )
        reply: JudgeReply = res.value
        return Verdict(
            reasoning=reply.reasoning,
            consistent=reply.consistent,
            best_index=reply.best_index,
            judge=res.model,
            raw=res.text,
            template_version=self.template_version,
            prompt_tokens=res.prompt_tokens,
            completion_tokens=res.completion_tokens,
        )


class AgreementFirst:
    """The LLM judge of one query, asked only about answers that differ or that the reference does not confirm.

    Equal answers that the executed reference confirms leave a judge nothing to decide, and a small judge
    decides them wrongly: Qwen2.5-Coder-1.5B called three identical, correct "Engineering" answers inconsistent
    and sent the query through a reflection round. Equal answers the reference contradicts still go to the
    model, whose critique can start a reflection that finds the right value. A model's "yes" over answers whose
    numbers differ beyond the tolerance is overruled (the verdict's judge says so)."""

    def __init__(self, llm: LLMJudge, rule: OfflineJudge, confirms: Callable[[str], bool]) -> None:
        self.llm, self.rule, self.confirms = llm, rule, confirms
        self.name = llm.name

    async def judge(self, question: str, answers: list[str]) -> Verdict:
        by_rule = self.rule.judge_sync(question, answers)
        if by_rule.consistent and self.confirms(answers[by_rule.best_index]):
            return replace(
                by_rule,
                reasoning=f"{by_rule.reasoning} The executed reference agrees, so the LLM judge was not asked.",
                judge=AGREEMENT,
                template_version=self.llm.template_version,
            )
        verdict = await self.llm.judge(question, answers)
        if not verdict.consistent:
            return verdict
        # A "yes" over answers whose numbers differ is a reading error, not a judgement: the 1.5B judge called
        # "79", "2", "79" consistent. Words may be paraphrases the model reads better than the rule; numbers
        # beyond the tolerance are not.
        split = numbers_differ(answers, self.rule.rel_tol)
        if split is None:
            return verdict
        i, j, why = split
        return replace(
            verdict,
            consistent=False,
            best_index=by_rule.best_index,
            judge=verdict.judge + OVERRULED,
            reasoning=f"{verdict.reasoning}\nOverruled: answers {i + 1} and {j + 1} do not agree, {why}; "
            "answers whose numbers differ are not the same answer.",
        )
