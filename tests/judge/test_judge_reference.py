"""Verification against the synthesizer's executed reference answer, and N as the default set size."""

from __future__ import annotations

import pytest

from datamind.agent.tasks import QueryTask
from datamind.judge.stage import CHECK_REFUTED, CHECK_UNVERIFIED, CHECK_VERIFIED, JudgeParams, reference_check


def task(reference: str | None) -> QueryTask:
    query = {"query_id": "q", "question": "What is the mean price?", "reference_answer": reference}
    return QueryTask(query, [query], "/tmp/x.csv", "csv")


@pytest.mark.parametrize(
    ("answer", "reference", "expected"),
    [
        ("102.5", "100.0", CHECK_VERIFIED),  # inside the paper's 3 %
        ("The mean price is 99.1", "99.0", CHECK_VERIFIED),
        ("110", "100.0", CHECK_REFUTED),  # three trajectories agreeing on a wrong value are still wrong
        ("East", "West", CHECK_REFUTED),
        ("42", None, CHECK_UNVERIFIED),  # LLM-written queries without an executed program
        ("42", "  ", CHECK_UNVERIFIED),
    ],
)
def test_selected_answer_against_the_reference(answer, reference, expected):
    verdict, reason = reference_check({"final_answer": answer}, task(reference), JudgeParams())
    assert verdict == expected and reason
    if expected == CHECK_REFUTED:
        assert reference in reason  # the recorded reason names what it disagreed with


def test_tolerance_and_switch_are_parameters():
    row = {"final_answer": "102"}
    assert reference_check(row, task("100"), JudgeParams(rel_tol=0.01))[0] == CHECK_REFUTED
    assert reference_check(row, task("100"), JudgeParams(verify_reference=False))[0] == CHECK_UNVERIFIED


def test_a_set_must_hold_n_trajectories_by_default():
    assert JudgeParams().min_samples is None  # N of the trajectories judged (test_judge_stage shows it)
    assert JudgeParams(rollout={"n_samples": 5}).min_samples is None  # reflection's fallback, not the input's N
    assert JudgeParams(min_samples=2).min_samples == 2
    assert JudgeParams().fingerprint != JudgeParams(min_samples=2).fingerprint
