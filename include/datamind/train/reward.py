"""Eq. 8: the rollout reward from format, answer (via a judge) and a length factor."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from datamind.agent.answer import LLMAnswerJudge, RuleAnswerJudge
from datamind.agent.equivalence import REL_TOL
from datamind.agent.protocol import final_answer, format_ok
from datamind.agent.protocol import strict_turn as parse_turn
from datamind.llm.errors import LLMError
from datamind.train.config import DEFAULT_REWARD, RewardConfig


class Judge(Protocol):
    """Decides whether ``prediction`` answers ``question`` the way ``ground_truth`` does.

    The paper uses an LLM judge (GPT-4o-mini); the pipeline's judge plugs in here.
    """

    def __call__(self, question: str, prediction: str, ground_truth: str) -> bool: ...


class MatchJudge:
    """Offline reward judge: the pipeline's shared rule-based answer judge (numbers within 3 % relative,
    the paper's judging rule; several values element-wise; text normalised).  The model-as-judge of the
    paper plugs in through :class:`LLMRewardJudge`."""

    def __init__(self, rel_tol: float = REL_TOL) -> None:
        self._judge = RuleAnswerJudge(rel_tol)

    def __call__(self, question: str, prediction: str, ground_truth: str) -> bool:
        return self._judge.judge_sync(question, prediction, ground_truth).correct


class LLMRewardJudge:
    """The paper's reward judge (appendix G.4, binary score) over an OpenAI-compatible endpoint, cached
    like every LLM call; a failed call falls back to the rule judge rather than rewarding or punishing."""

    def __init__(self, client, rel_tol: float = REL_TOL) -> None:
        self._llm = LLMAnswerJudge(client, rel_tol=rel_tol)
        self._fallback = MatchJudge(rel_tol)

    def __call__(self, question: str, prediction: str, ground_truth: str) -> bool:
        try:
            verdict = asyncio.run(self._llm.judge(question, prediction, ground_truth))
        except (LLMError, ValueError):
            return self._fallback(question, prediction, ground_truth)
        return verdict.correct


def length_factor(length: int, l_min: int = 256, l_max: int = 1024) -> float:
    """r_length: 1 up to ``l_min``, linear down to 0.5 at ``l_max``, 0.5 beyond."""
    if length <= l_min:
        return 1.0
    if length <= l_max:
        return (l_max - length) / (l_max - l_min) * 0.5 + 0.5
    return 0.5


def combine_reward(r_format: int, r_answer: int, r_length: float, format_penalty: float = -0.1) -> float:
    if r_answer == 1:
        return r_length * r_answer
    return 0.0 if r_format == 1 else format_penalty


@dataclass(frozen=True)
class RewardBreakdown:
    reward: float
    r_format: int
    r_answer: int
    r_length: float
    length: int


def score(
    messages: list[dict],
    question: str,
    ground_truth: str,
    judge: Judge,
    count_tokens: Callable[[str], int],
    cfg: RewardConfig = DEFAULT_REWARD,
) -> RewardBreakdown:
    """Reward of one trajectory (``messages`` = the generated turns, prompt excluded)."""
    r_format = int(format_ok(messages))
    answer = final_answer(messages)
    r_answer = int(answer is not None and bool(judge(question, answer, ground_truth)))
    if cfg.length_basis == "answer":
        length = count_tokens(answer or "")
    else:
        length = sum(count_tokens(m["content"]) for m in messages if m["role"] == "assistant")
    r_length = length_factor(length, cfg.l_min, cfg.l_max)
    return RewardBreakdown(
        combine_reward(r_format, r_answer, r_length, cfg.format_penalty), r_format, r_answer, r_length, length
    )


_ENV_TURN = re.compile(r"<interpreter>.*?</interpreter>", re.DOTALL)
_OPENERS = ("<think>", "<code>", "<answer>")
_ENDS = ("</code>", "</answer>")


def turns_from_text(text: str) -> list[dict]:
    """A response decoded as one string (how verl hands it to a reward function: agent and environment
    turns in a row, with the chat template's role words between them) back into turns. Environment
    turns are the ``<interpreter>`` blocks; an agent turn is what lies between two of them, from its
    first opening tag to its last closing tag (template text outside them is not the agent's)."""
    turns: list[dict] = []

    def agent(segment: str) -> None:
        starts = [i for i in (segment.find(t) for t in _OPENERS) if i >= 0]
        ends = [i + len(t) for t in _ENDS if (i := segment.rfind(t)) >= 0]
        if starts and ends and max(ends) > min(starts):
            turns.append({"role": "assistant", "content": segment[min(starts) : max(ends)]})
        elif segment.strip() and not turns:  # nothing tagged at all: the (malformed) first turn itself
            turns.append({"role": "assistant", "content": segment.strip()})

    pos = 0
    for block in _ENV_TURN.finditer(text):
        agent(text[pos : block.start()])
        turns.append({"role": "tool", "content": block.group(0)})
        pos = block.end()
    agent(text[pos:])
    return turns


def void_turns(messages: list[dict]) -> int:
    return sum(1 for m in messages if m["role"] == "assistant" and parse_turn(m["content"]).is_void)
