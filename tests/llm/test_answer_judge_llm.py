"""The model-as-judge through the real openai client against the local OpenAI-protocol server."""

from __future__ import annotations

import re

from datamind.agent.answer import LLMAnswerJudge
from datamind.llm import ParseFailure, run_all


def grader(body: dict) -> str:
    """A judge that applies the 3 % rule to the numbers it is shown (so the test knows the right verdicts)."""
    prompt = body["messages"][-1]["content"]
    ref = float(re.search(r"# Reference answer\n(\S+)", prompt).group(1))
    pred = float(re.search(r"# Predicted answer\n(\S+)", prompt).group(1))
    ok = abs(pred - ref) <= 0.03 * abs(ref)
    return f"<thought>relative error {abs(pred - ref) / abs(ref):.3f}</thought><score>{int(ok)}</score>"


def test_llm_judge_grades_caches_and_names_the_model(server, make_client):
    server.responder = grader
    client = make_client()
    judge = LLMAnswerJudge(client)
    verdicts = run_all(
        [judge.judge("q", "102", "100"), judge.judge("q", "110", "100"), judge.judge("q", None, "100")], client=client
    )
    assert [v.correct for v in verdicts] == [True, False, False]
    assert verdicts[0].judge == "llm:judge-model" and "relative error 0.020" in verdicts[0].reasoning
    assert verdicts[2].judge == "llm" and server.request_count == 2  # no call for a missing answer
    body = server.bodies[0]
    assert body["model"] == "judge-model" and body["temperature"] == 0.0
    assert "3%" in body["messages"][-1]["content"]

    client2 = make_client()
    again = run_all([LLMAnswerJudge(client2).judge("q", "102", "100")], client=client2)
    assert again[0].correct and server.request_count == 2  # answered from the content-hash cache


def test_garbage_judge_replies_end_in_a_parse_failure(server, make_client):
    server.responder = lambda body: "I think it is fine."
    client = make_client()
    (result,) = run_all([LLMAnswerJudge(client, max_parse_retries=1).judge("q", "1", "1")], client=client)
    assert isinstance(result, ParseFailure)
    assert server.request_count == 2  # one re-ask, then a recorded failure
