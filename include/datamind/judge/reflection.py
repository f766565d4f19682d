"""Reflection rescue (paper eq. 3): for an inconsistent set, show the agent the judge's reasoning and resample.

Round r feeds the round r-1 candidates (trajectories and answers) and the critique to ``revise``, which
returns the N revised candidates (each a new trajectory tagged with reflection_round r), and the judge runs
again.  The loop stops at the
first consistent set or after ``max_rounds``; every round's candidates and verdict are returned so the
stage can store all of them (the paper keeps the rescued trajectories as extra thinking patterns).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from datamind.judge.verdict import ConsistencyJudge, Verdict, judge_answers
from datamind.llm.errors import ParseFailure

C = TypeVar("C")  # a candidate: anything with an ``answer`` attribute or item


@dataclass(frozen=True)
class Round(Generic[C]):
    round: int
    candidates: list[C]
    verdict: Verdict


def _answer(c: Any) -> str | None:
    return c["final_answer"] if isinstance(c, dict) else getattr(c, "final_answer", None)


async def reflect(
    question: str,
    first: Round[C],
    *,
    judge: ConsistencyJudge,
    revise: Callable[[int, Sequence[C], Verdict], Awaitable[list[C]]],
    max_rounds: int,
    min_samples: int = 2,
) -> list[Round[C]]:
    """Rounds after ``first`` (possibly none); the last one is consistent unless the budget ran out."""
    rounds: list[Round[C]] = []
    current = first
    for r in range(1, max_rounds + 1):
        if current.verdict.consistent:
            break
        revised = await revise(r, list(current.candidates), current.verdict)
        try:
            verdict = await judge_answers(judge, question, [_answer(c) for c in revised], min_samples)
        except ParseFailure as exc:  # keep the round (its trajectories exist) but stop: no usable verdict
            rounds.append(
                Round(r, revised, Verdict(f"judge reply unusable: {exc.reason}", False, 0, judge.name, raw=exc.raw))
            )
            break
        current = Round(r, revised, verdict)
        rounds.append(current)
    return rounds
