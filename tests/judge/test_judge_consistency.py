"""Offline judge equivalence rules, LLM judge reply parsing, and the four selection strategies."""

from __future__ import annotations

import asyncio

import pytest

from datamind.agent.equivalence import equivalent
from datamind.judge import selection
from datamind.judge.consistency import OfflineJudge
from datamind.judge.llm_judge import parse_judge_reply
from datamind.judge.verdict import Verdict, judge_answers
from datamind.llm.tags import TagParseError


@pytest.mark.parametrize(
    "a, b, same",
    [
        ("42", "42", True),
        ("100", "102.9", True),  # 2.9 % apart
        ("100", "103.5", False),  # 3.5 % apart
        ("25%", "0.25", True),
        ("The final answer is 1,234.5", "1234.5", True),
        ("Germany", "germany.", True),
        ("True", "Yes", True),
        ("No", "yes", False),
        ("North: 71, South: 65", "North: 71, South: 65.5", True),
        ("North: 71, South: 65", "North: 65, South: 71", False),  # same labels, swapped values
        ("Mean 5.2, median 4", "mean 5.2", False),  # incomplete
        ("71 units", "71", True),  # a unit on one side only
        ("Product E", "Product D", False),
        ("", "", False),
        ("nan", "NaN", True),
        ("-3.0", "3.0", False),
    ],
)
def test_offline_equivalence_table(a, b, same):
    assert equivalent(a, b)[0] is same
    assert equivalent(b, a)[0] is same


def test_offline_judge_clusters_and_picks_the_most_concise_of_the_majority():
    v = OfflineJudge().judge_sync("q", ["The answer is 19.65", "22.10", "19.65"])
    assert not v.consistent and v.clusters == ((0, 2), (1,))
    assert v.best_index == 2  # "19.65" is shorter than "The answer is 19.65"
    assert "22.1" in v.reasoning and "19.65" in v.reasoning
    ok = OfflineJudge().judge_sync("q", ["71", "71.0", "71 units"])
    assert ok.consistent and ok.best_index == 0 and ok.label == "yes"


def test_missing_answers_and_single_samples_fail_without_calling_the_judge():
    class Exploding:
        name = "never"

        async def judge(self, question, answers):
            raise AssertionError("judge must not be called")

    v = asyncio.run(judge_answers(Exploding(), "q", ["1", None, "1"]))
    assert not v.consistent and "[2]" in v.reasoning
    v1 = asyncio.run(judge_answers(Exploding(), "q", ["1"], min_samples=2))
    assert not v1.consistent and "at least 2" in v1.reasoning
    # Explicitly allowed single samples pass, but are labelled as not checked rather than "yes".
    lone = asyncio.run(judge_answers(Exploding(), "q", ["1"], min_samples=1))
    assert lone.consistent and lone.label == "unverified"
    assert not asyncio.run(judge_answers(Exploding(), "q", [None], min_samples=1)).consistent


@pytest.mark.parametrize(
    "reply, consistent, best",
    [
        ("<reasoning>all say 5</reasoning>\n<correct>yes</correct>\n<number>2</number>", True, 1),
        ("<reasoning>2 differs</reasoning><correct>No.</correct><number> 3 </number>", False, 2),
        (
            "Let me use <correct> tags.\n<reasoning>r</reasoning><correct>YES</correct><number>Answer 1</number>",
            True,
            0,
        ),
    ],
)
def test_parse_judge_reply_good(reply, consistent, best):
    r = parse_judge_reply(reply, 3)
    assert (r.consistent, r.best_index) == (consistent, best)
    assert r.reasoning


@pytest.mark.parametrize(
    "reply, code",
    [
        (None, "no_text"),
        ("", "no_text"),
        ("looks consistent to me", "missing"),
        ("<reasoning>r</reasoning><correct>maybe</correct><number>1</number>", "bad_choice"),
        ("<reasoning>r</reasoning><correct>yes</correct><number>4</number>", "bad_number"),
        ("<reasoning>r</reasoning><correct>yes</correct><number>first</number>", "bad_number"),
        ("<reasoning>r</reasoning><correct>yes</correct>", "missing"),
        ("<reasoning>r<correct>yes</correct><number>1</number>", "unclosed"),
    ],
)
def test_parse_judge_reply_garbage(reply, code):
    with pytest.raises(TagParseError) as exc:
        parse_judge_reply(reply, 3)
    assert exc.value.code == code


CONSISTENT = Verdict("ok", True, 2, "offline")
INCONSISTENT = Verdict("differ", False, 0, "offline")


def test_con_select_keeps_the_judges_best_only_when_consistent():
    assert selection.select("con_select", CONSISTENT, [True, True, True]) == [2]
    assert selection.select("con_select", INCONSISTENT, [True, True, True]) == []
    # The judge's pick has no answer (cannot happen with judge_answers, but must not crash): first answered.
    assert selection.select("con_select", CONSISTENT, [True, True, False]) == [0]


def test_random_select_is_seeded_per_query_and_covers_candidates():
    picks = {q: selection.select("random_select", CONSISTENT, [True] * 3, seed_key=q) for q in map(str, range(60))}
    assert all(len(p) == 1 and 0 <= p[0] < 3 for p in picks.values())
    assert {p[0] for p in picks.values()} == {0, 1, 2}  # not always the same index
    assert picks == {q: selection.select("random_select", CONSISTENT, [True] * 3, seed_key=q) for q in picks}
    assert selection.select("random_select", INCONSISTENT, [True] * 3, seed_key="x") == []
    assert selection.select("random_select", CONSISTENT, [False, True, False], seed_key="x") == [1]


def test_non_select_keeps_all_consistent_and_non_con_keeps_everything_answered():
    assert selection.select("non_select", CONSISTENT, [True, False, True]) == [0, 2]
    assert selection.select("non_select", INCONSISTENT, [True, True, True]) == []
    assert selection.select("non_con", INCONSISTENT, [True, False, True]) == [0, 2]
    assert selection.select("non_con", CONSISTENT, [True, True, True]) == [0, 1, 2]
    with pytest.raises(ValueError):
        selection.select("best", CONSISTENT, [True])


class _CountingModel:
    """The LLM judge's interface; says "no" to everything, so a call shows up in the verdict."""

    name = "judge-model"
    template_version = "consistency@test"

    def __init__(self):
        self.asked: list[list[str]] = []

    async def judge(self, question, answers):
        self.asked.append(answers)
        return Verdict("the model looked", False, 0, self.name)


@pytest.mark.parametrize(
    "answers, reference, asks",
    [
        (["Engineering", "engineering.", "Engineering"], "Engineering", False),  # equal and confirmed
        (["68", "68.0", "68"], "0", True),  # equal, but the executed reference says otherwise
        (["68", "0", "68"], "68", True),  # a split: the model reads them
        (["North", "North", "North"], None, True),  # nothing to confirm them with
    ],
)
def test_agreement_first_asks_the_model_only_where_rule_and_reference_leave_it_open(answers, reference, asks):
    from datamind.agent.answer import RuleAnswerJudge
    from datamind.judge.llm_judge import AgreementFirst

    model = _CountingModel()

    def confirms(answer):
        return reference is not None and RuleAnswerJudge().judge_sync("q", answer, reference).correct

    v = asyncio.run(AgreementFirst(model, OfflineJudge(), confirms).judge("Which department?", answers))
    assert bool(model.asked) is asks
    assert v.consistent is (not asks) and (v.judge == "agreement") is (not asks)


def test_the_agreement_switch_is_part_of_an_llm_judges_partition_only():
    from datamind.judge.params import JudgeParams

    assert JudgeParams().fingerprint == JudgeParams(agree_by_rule=False).fingerprint  # offline judge: the rule
    on, off = JudgeParams(judge_backend="llm"), JudgeParams(judge_backend="llm", agree_by_rule=False)
    assert on.fingerprint != off.fingerprint


class _YesModel(_CountingModel):
    """A judge model that calls every set consistent and picks the first answer."""

    async def judge(self, question, answers):
        self.asked.append(answers)
        return Verdict("they all say the same", True, 0, self.name)


@pytest.mark.parametrize(
    "answers, overruled",
    [
        (["79", "2", "79"], True),  # the 1.5B judge's "yes" on the demo
        (["11.48°C", "9.75", "11.48°C"], True),
        (["Mean 4.2, median 3.9", "Mean 4.2, median 4.6", "Mean 4.2, median 3.9"], True),
        (["Engineering", "The Engineering department", "engineering dept."], False),  # words: the model reads them
        (["3 records", "three records", "3"], False),  # a number spelt out is the model's to read
        (["12.5%", "0.125", "12.5 %"], False),  # the same value written two ways
    ],
)
def test_a_models_yes_over_answers_whose_numbers_differ_is_overruled(answers, overruled):
    from datamind.judge.llm_judge import AgreementFirst

    v = asyncio.run(AgreementFirst(_YesModel(), OfflineJudge(), lambda a: False).judge("How many?", answers))
    assert v.consistent is (not overruled)
    assert v.judge.endswith("+overruled") is overruled
    if overruled:
        assert "Overruled" in v.reasoning and v.best_index in (0, 2)  # the majority's answer, not the odd one
