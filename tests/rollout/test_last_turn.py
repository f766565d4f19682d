"""The model's last allowed turn answers: a grammar-constrained endpoint gets the answer-only grammar and the
model reads a note, while the trajectory records the sandbox's output as it was (a real llama.cpp server
would make the reply follow the grammar; the stand-in replies as a constrained model must)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from rollout.corpus import build_corpus, queries

from datamind.agent.params import RolloutParams
from datamind.agent.policies.llm_expert import LAST_TURN_NOTE
from datamind.assets import DIRS
from datamind.llm import LLMClient, ResponseCache
from datamind.rollout.stage import plan_sampling, sample_shard
from datamind.schemas import TRAJECTORIES
from datamind.shards import read_rows


def _root_rule(gbnf: str) -> str:
    return re.search(r"^root\s*::=(.*)$", gbnf, re.MULTILINE).group(1)


def keeps_exploring(body: dict) -> str:
    """A model that always wants one more look at the data, unless its grammar leaves only an answer."""
    if "code" not in _root_rule(body["grammar"]):
        return "<think>\nThe row count printed above is what the question needs.\n</think>\n<answer>\n30\n</answer>"
    return "<think>\nOne more look at the rows.\n</think>\n<code>\n```python\nprint(len(df))\n```\n</code>"


@pytest.mark.parametrize("last_turn_answers", [True, False])
def test_the_last_allowed_turn_answers_without_changing_what_is_recorded(
    last_turn_answers, root, tmp_path, server, llm_client, sandbox
):
    server.responder = keeps_exploring
    client = LLMClient(dataclasses.replace(llm_client.config, grammar="llama.cpp"), cache=ResponseCache(root))
    build_corpus(root, str(tmp_path), [q for q in queries() if q["query_id"] == "q1"])
    params = RolloutParams(backend="llm", n_samples=2, max_turns=3, last_turn_answers=last_turn_answers)
    sample_shard(root, plan_sampling(root, 10, params)[0], params, "run", llm_client=client, sandbox=sandbox)

    trajs = read_rows(root, TRAJECTORIES, DIRS["trajectories"])
    assert len(trajs) == 2 and all(t["n_turns"] == 3 for t in trajs)
    third = [b for b in server.bodies if sum(m["role"] == "assistant" for m in b["messages"]) == 2]
    assert len(third) == 2
    if last_turn_answers:
        assert {(t["status"], t["final_answer"]) for t in trajs} == {("answered", "30")}
        assert all(b["messages"][-1]["content"].endswith(LAST_TURN_NOTE) for b in third)
    else:
        assert {(t["status"], t["final_answer"]) for t in trajs} == {("max_turns", None)}
        assert not any(LAST_TURN_NOTE in m["content"] for b in server.bodies for m in b["messages"])
    # the earlier turns could still run code; the note never reaches the stored conversation
    firsts = [b for b in server.bodies if sum(m["role"] == "assistant" for m in b["messages"]) < 2]
    assert firsts and all("code" in _root_rule(b["grammar"]) for b in firsts)
    assert not any(LAST_TURN_NOTE.strip() in m["content"] for t in trajs for m in t["messages"])
