"""The offline self-consistency judge: the answers of a query's trajectories grouped by programmatic
equivalence (``datamind.agent.equivalence``), no LLM."""

from __future__ import annotations

from datamind.agent.equivalence import REL_TOL, cluster, parse_answer
from datamind.judge.verdict import Verdict


class OfflineJudge:
    name = "offline"

    def __init__(self, rel_tol: float = REL_TOL) -> None:
        if not 0 <= rel_tol < 1:
            raise ValueError("rel_tol must be in [0, 1)")
        self.rel_tol = rel_tol

    async def judge(self, question: str, answers: list[str]) -> Verdict:
        return self.judge_sync(question, answers)

    def judge_sync(self, question: str, answers: list[str]) -> Verdict:
        groups, notes = cluster(answers, self.rel_tol)
        biggest = max(groups, key=lambda g: (len(g), -g[0]))
        best = min(biggest, key=lambda i: (len(answers[i].strip()), i))
        consistent = len(groups) == 1 and not parse_answer(answers[0]).empty
        lines = [f"{len(answers)} answers compared (numbers within {self.rel_tol:.0%}, normalised wording)."]
        if consistent:
            lines.append("All answers agree.")
        else:
            lines.append(
                f"They split into {len(groups)} groups: "
                + "; ".join("{" + ", ".join(str(i + 1) for i in g) + "}" for g in groups)
                + "."
            )
            lines.extend(n[0].upper() + n[1:] + "." for n in notes)
        lines.append(f"Answer {best + 1} is the most concise of the largest agreeing group.")
        return Verdict(
            reasoning=" ".join(lines),
            consistent=consistent,
            best_index=best,
            judge=self.name,
            clusters=tuple(tuple(g) for g in groups),
        )
