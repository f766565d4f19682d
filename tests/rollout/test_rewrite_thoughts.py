"""The optional pass in which a model rewords the offline expert's thoughts: over a real OpenAI-protocol server
and a real sandboxed offline replay, the code, the outputs and the answers stay byte for byte, a rewrite that
adds a number or a name or breaks the format keeps the original thought, and the switch off changes no id."""

from __future__ import annotations

import asyncio
import re

import pytest

from datamind.agent import protocol
from datamind.agent.params import RolloutParams
from datamind.agent.rewrite import check, rewrite_thoughts
from datamind.filters import rules
from datamind.rollout.stage import plan_sampling, sample_shard
from datamind.schemas import TRAJECTORIES
from datamind.shards import read_rows

QUESTION = "What is the average price of the products sold in the north region?"


@pytest.mark.parametrize(
    "new, why",
    [
        ("The frame has 30 rows; next I average `price` for the north.", None),
        ("The frame has 30 rows and the mean is 41.7, so I average `price`.", "new_number"),  # 41.7 never printed
        ("I average `unit_price` next.", "new_name"),  # a column nobody printed
        ("What is the average price of the products sold in the north? I compute it.", "copies_question"),
        ("```python\ndf.price.mean()\n```", "code_or_tags"),
        ("", "empty"),
    ],
)
def test_a_rewrite_replaces_a_thought_only_when_it_adds_nothing(new, why):
    old = "Thirty rows came back. Now the mean of `price` in the north group, kept as `avg_price`."
    context = "(30, 4)\nanswer = df[df.region == 'north']['price'].mean()"
    assert check(new, old, context, QUESTION) == why


def _messages() -> list[dict]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": protocol.format_code_turn(
            "Nothing has run yet. Load sales.csv and print its shape.", "print(df.shape)")},
        {"role": "tool", "content": protocol.format_interpreter("(30, 4)")},
        {"role": "assistant", "content": protocol.format_code_turn(
            "Thirty rows came back. Now the mean of `price` in the north group.",
            "print(df[df.region == 'north']['price'].mean())")},
        {"role": "tool", "content": protocol.format_interpreter("12.5")},
        {"role": "assistant", "content": protocol.format_answer_turn("The mean is 12.5.", "12.5")},
    ]  # fmt: skip


def _note(body: dict) -> str:
    prompt = body["messages"][0]["content"]  # (a parse retry adds the bad reply and a note after it)
    return prompt.split("## The note to rewrite\n", 1)[1].split("\n\n## ", 1)[0]


def _reword(body: dict) -> str:
    note = _note(body)
    if "Thirty rows" in note:  # a rewrite that makes up a number: refused
        return "<think>30 rows, so the median of 99.9 is next.</think>"
    if "mean is 12.5" in note:
        return "no tags at all"  # unparseable, every time
    return "<think>Nothing ran so far; the file's shape comes first.</think>"


def test_only_thoughts_change_and_a_refused_rewrite_keeps_the_original(server, llm_client):
    server.responder = _reword
    before = _messages()

    async def run():
        try:
            return await rewrite_thoughts(llm_client, before, QUESTION)
        finally:
            await llm_client.aclose()

    done = asyncio.run(run())
    assert done.rewritten == 1 and dict(done.kept) == {"new_number": 1, "unparsed": 1}
    assert done.model == "expert-model"
    after = done.messages
    thinks = [protocol.parse_turn(m["content"]).think for m in after if m["role"] == "assistant"]
    assert thinks[0] == "Nothing ran so far; the file's shape comes first."
    assert thinks[1:] == [protocol.parse_turn(m["content"]).think for m in before if m["role"] == "assistant"][1:]
    for a, b in zip(before, after, strict=True):  # code, outputs and the answer exactly as they ran
        if a["role"] != "assistant":
            assert a == b
        else:
            ta, tb = protocol.parse_turn(a["content"]), protocol.parse_turn(b["content"])
            assert (ta.code, ta.answer) == (tb.code, tb.answer)
    # the model saw what the analyst saw before the thought: the last output, then the cell the thought leads to
    second = next(b["messages"][0]["content"] for b in server.bodies if "Thirty rows" in _note(b))
    assert second.index("(30, 4)") < second.index("Thirty rows") < second.index("df.region == 'north'")


def test_the_switch_off_keeps_every_partition_id_and_needs_no_connection():
    assert RolloutParams().fingerprint == RolloutParams(rewrite_thoughts=False).fingerprint
    assert RolloutParams(rewrite_thoughts=True).fingerprint != RolloutParams().fingerprint
    llm = RolloutParams(backend="llm")
    assert RolloutParams(backend="llm", rewrite_thoughts=True).fingerprint != llm.fingerprint


def test_offline_trajectories_sampled_with_reworded_thoughts_pass_the_rule_filters(corpus, sandbox, server, llm_client):
    def reword(body: dict) -> str:
        return f"<think>In my words: {_note(body)}</think>"  # the same facts, so every rewrite is taken

    server.responder = reword
    params = RolloutParams(rewrite_thoughts=True, n_samples=1)
    with pytest.raises(ValueError, match="rewrite_thoughts"):
        sample_shard(corpus, plan_sampling(corpus, 3, params)[0], params, "run-0", sandbox=sandbox)
    spec = plan_sampling(corpus, 3, params)[0]
    sample_shard(corpus, spec, params, "run-1", sandbox=sandbox, llm_client=llm_client)
    rows = [r for r in read_rows(corpus, TRAJECTORIES, "trajectories") if r["status"] == "answered"]
    assert rows
    for r in rows:
        thinks = [protocol.parse_turn(m["content"]).think for m in r["messages"] if m["role"] == "assistant"]
        assert all(t.startswith("In my words:") for t in thinks)
        assert r["model"] == "offline-expert+thoughts:expert-model"
        assert rules.first_failure({**r, "messages": r["messages"]}) is None
        assert re.search(r'"rewrite": "', r["template_version"])


def test_a_models_own_trajectory_has_only_the_thoughts_that_copy_the_question_reworded(server, llm_client):
    from datamind.agent.rewrite import copied

    messages = _messages()
    copying = "What is the average price of the products sold in the north region? Thirty rows came back."
    messages[4] = {"role": "assistant", "content": protocol.format_code_turn(
        copying, "print(df[df.region == 'north']['price'].mean())")}  # fmt: skip
    seen: list[str] = []

    def reword(body: dict) -> str:
        seen.append(_note(body))
        return "<think>Thirty rows; the north mean of `price` is next.</think>"

    server.responder = reword

    async def run():
        try:
            return await rewrite_thoughts(llm_client, messages, QUESTION, copied(QUESTION))
        finally:
            await llm_client.aclose()

    done = asyncio.run(run())
    assert seen == [copying] and done.rewritten == 1  # the other thoughts were the model's words already
    thinks = [protocol.parse_turn(m["content"]).think for m in done.messages if m["role"] == "assistant"]
    assert thinks[1] == "Thirty rows; the north mean of `price` is next."
    assert thinks[0] == protocol.parse_turn(messages[2]["content"]).think
