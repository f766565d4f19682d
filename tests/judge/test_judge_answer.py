"""The rule-based answer judge: the paper's grading rules on hand-worked cases."""

from __future__ import annotations

import asyncio

import pytest

from datamind.agent.answer import RuleAnswerJudge, parse_score_reply
from datamind.llm.tags import TagParseError

CASES = [
    # (prediction, reference, correct) — each line one rule of appendix G.4 or one way to get it wrong
    ("115624", "115624", True),
    ("The mean is 102.9", "100", True),  # 2.9 % off: inside 3 %
    ("The mean is 103.1", "100", False),  # 3.1 % off
    ("-97.5", "-100", True),
    ("97", "-100", False),  # sign matters
    ("25%", "0.25", True),  # same value, other scale
    ("1,080", "1080", True),
    ("10", "1080", False),
    ("North: 12, South: 7", "North: 12, South: 7", True),
    ("North: 7, South: 12", "North: 12, South: 7", False),  # labels keep values in place
    ("12, 7", "7, 12", True),  # an unlabelled list matches as a multiset
    ("12", "12, 7", False),  # incomplete
    ("Yes", "true", True),
    ("No", "yes", False),
    ("Germany", "germany", True),
    ("France", "Germany", False),
    ("", "5", False),
    (None, "5", False),
]


@pytest.mark.parametrize(("prediction", "reference", "correct"), CASES)
def test_rule_judge_applies_the_papers_rules(prediction, reference, correct):
    verdict = RuleAnswerJudge().judge_sync("q", prediction, reference)
    assert verdict.correct is correct, verdict.reasoning
    assert verdict.judge == "rule" and verdict.reasoning


def test_tolerance_is_a_parameter():
    assert not RuleAnswerJudge(rel_tol=0.01).judge_sync("q", "102", "100").correct
    assert RuleAnswerJudge(rel_tol=0.05).judge_sync("q", "104", "100").correct
    with pytest.raises(ValueError):
        RuleAnswerJudge(rel_tol=1.5)


def test_async_and_sync_agree():
    judge = RuleAnswerJudge()
    assert asyncio.run(judge.judge("q", "3.0", "3")) == judge.judge_sync("q", "3.0", "3")


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("<thought>Exact match.</thought> <score>1</score>", 1),
        ("<thought>Off by 40%.</thought>\n<score> 0 </score>", 0),
        ("<thought>ok</thought><score>1.</score>", 1),
    ],
)
def test_score_reply_parses(reply, score):
    assert parse_score_reply(reply).score == score


@pytest.mark.parametrize(
    "reply",
    ["<score>1</score>", "<thought>fine</thought><score>0.5</score>", "<thought></thought><score>1</score>",
     "correct!", "<thought>unclosed <score>1</score>"],
)  # fmt: skip
def test_malformed_score_replies_are_refused(reply):
    with pytest.raises(TagParseError):
        parse_score_reply(reply)
