"""The judge interface shared by the offline and the LLM judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Verdict:
    reasoning: str  # the judge's chain of thought; fed back as the critique in reflection
    consistent: bool  # paper's s: all answers equivalent and complete
    best_index: int  # 0-based index of the answer to keep (meaningful even when inconsistent)
    judge: str  # "offline" or the judge model
    raw: str | None = None  # the LLM's full reply
    template_version: str | None = None
    clusters: tuple[tuple[int, ...], ...] = field(default_factory=tuple)  # offline: groups of equivalent answers
    prompt_tokens: int = 0
    completion_tokens: int = 0
    checked: bool = True  # False: a single sample let through (min_samples=1) with nothing to compare

    @property
    def label(self) -> str:
        if not self.checked:
            return "unverified"
        return "yes" if self.consistent else "no"


class ConsistencyJudge(Protocol):
    name: str

    async def judge(self, question: str, answers: list[str]) -> Verdict:
        """``answers`` are all present (non-empty); missing ones are handled by :func:`judge_answers`."""
        ...


async def judge_answers(
    judge: ConsistencyJudge, question: str, answers: list[str | None], min_samples: int = 2
) -> Verdict:
    """Judge N answers; missing answers or too few samples fail the check without asking the judge.

    A trajectory without an answer breaks completeness (the paper's third criterion), and a single
    sample cannot show consistency with anything, so neither needs a (paid) judge call.
    """
    present = [i for i, a in enumerate(answers) if a is not None and a.strip()]
    if len(answers) == 1 and min_samples <= 1:
        ok = bool(present)
        reason = "A single trajectory: nothing to compare it with, so it is kept unverified (min_samples=1)."
        return Verdict(reason if ok else "The only trajectory has no final answer.", ok, 0, judge.name, checked=False)
    if len(answers) < min_samples:
        return Verdict(
            f"Only {len(answers)} trajectory(ies) for this query; self-consistency needs at least {min_samples}.",
            False,
            present[0] if present else 0,
            judge.name,
        )
    if len(present) < len(answers):
        missing = [i + 1 for i in range(len(answers)) if i not in present]
        reason = f"Attempt(s) {missing} produced no final answer, so the set is incomplete."
        return Verdict(reason, False, present[0] if present else 0, judge.name)
    return await judge.judge(question, list(answers))  # type: ignore[arg-type]
