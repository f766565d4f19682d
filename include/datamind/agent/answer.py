"""Grading one answer against a reference answer: the paper's answer reward and evaluation judge.

One module serves the RL reward, the evaluation DAG and verification of sampled answers against the
synthesizer's executed reference, so all three grade the same way:

* :class:`RuleAnswerJudge` needs no LLM: the offline equivalence of :mod:`datamind.agent.equivalence`
  (numbers within a relative tolerance, 3 % by default as in the paper's judge prompt; several values
  matched element-wise; text normalised).  It cannot recognise paraphrases.
* :class:`LLMAnswerJudge` is the paper's model-as-judge (appendix G.4: the 3 % relative rule, a binary
  score, the reasoning kept) over any OpenAI-compatible endpoint through :class:`~datamind.llm.LLMClient`,
  so its calls are cached by content hash like every other LLM call.

Both implement :class:`AnswerJudge`; every verdict names the judge that gave it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from datamind.agent import templates
from datamind.agent.equivalence import REL_TOL, equivalent
from datamind.llm.grammars import grammar
from datamind.llm.tags import TagParseError, extract_choice, extract_tag

TEMPLATE = "judge/answer.j2"
RULE_JUDGE = "rule"


@dataclass(frozen=True)
class AnswerVerdict:
    correct: bool
    judge: str  # "rule", or "llm:<model>"
    reasoning: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class AnswerJudge(Protocol):
    name: str

    async def judge(self, question: str, prediction: str | None, reference: str) -> AnswerVerdict: ...


def _missing(prediction: str | None) -> bool:
    return prediction is None or not prediction.strip()


class RuleAnswerJudge:
    """Deterministic grading; the offline fallback wherever no judge endpoint is configured."""

    name = RULE_JUDGE

    def __init__(self, rel_tol: float = REL_TOL) -> None:
        if not 0 <= rel_tol < 1:
            raise ValueError(f"rel_tol must be in [0, 1), got {rel_tol}")
        self.rel_tol = rel_tol

    def judge_sync(self, question: str, prediction: str | None, reference: str) -> AnswerVerdict:
        if _missing(prediction):
            return AnswerVerdict(False, self.name, "no final answer was given")
        ok, why = equivalent(prediction, reference, self.rel_tol)
        return AnswerVerdict(ok, self.name, why)

    async def judge(self, question: str, prediction: str | None, reference: str) -> AnswerVerdict:
        return self.judge_sync(question, prediction, reference)


@dataclass(frozen=True)
class JudgeScore:
    thought: str
    score: int


def parse_score_reply(text: str) -> JudgeScore:
    """``<thought>...</thought><score>0|1</score>``; raises ``TagParseError`` (a ValueError) otherwise."""
    thought = extract_tag(text, "thought", occurrence="first", allow_unclosed=False)
    score = extract_choice(text, "score", ("0", "1"))
    if not thought.strip():
        raise TagParseError("empty_tag", "<thought> is empty", "thought")
    return JudgeScore(thought.strip(), int(score))


class LLMAnswerJudge:
    """The model-as-judge over the ``judge`` role of an :class:`~datamind.llm.LLMClient` (temperature 0)."""

    def __init__(
        self,
        client: Any,
        *,
        role: str = "judge",
        rel_tol: float = REL_TOL,
        params: dict | None = None,
        max_parse_retries: int = 2,
    ) -> None:
        self.client = client
        self.role = role
        self.rel_tol = rel_tol
        self.params = {"temperature": 0.0, **(params or {})}
        self.max_parse_retries = max_parse_retries
        self.template = templates.load(TEMPLATE)
        self.name = "llm"

    @property
    def template_version(self) -> str:
        return self.template.version

    def render(self, question: str, prediction: str, reference: str) -> str:
        pct = f"{self.rel_tol * 100:g}"
        return self.template.render(question=question, prediction=prediction, reference=reference, tolerance_pct=pct)

    async def judge(self, question: str, prediction: str | None, reference: str) -> AnswerVerdict:
        if _missing(prediction):  # nothing to grade: no paid call
            return AnswerVerdict(False, self.name, "no final answer was given")
        res = await self.client.chat_parsed(
            self.role,
            [{"role": "user", "content": self.render(question, prediction, reference)}],
            parse_score_reply,
            template_version=self.template_version,
            params=self.params,
            max_parse_retries=self.max_parse_retries,
            grammar=grammar("judge_answer"),
        )
        reply: JudgeScore = res.value
        return AnswerVerdict(
            correct=reply.score == 1,
            judge=f"llm:{res.model}",
            reasoning=reply.thought,
            prompt_tokens=res.prompt_tokens,
            completion_tokens=res.completion_tokens,
        )
