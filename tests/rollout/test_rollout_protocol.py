"""The ReAct turn protocol and the agent loop (real sandbox sessions, scripted policies)."""

from __future__ import annotations

import asyncio

import pytest

from datamind.agent import protocol
from datamind.agent import protocol as react
from datamind.agent.loop import PolicyGaveUp, PolicyReply, run_agent


@pytest.mark.parametrize(
    "text, kind, void_reason",
    [
        ("<think>look</think>\n<code>\n```python\nprint(1)\n```\n</code>", "code", None),
        ("<think>x</think><code>print(2)</code>", "code", None),
        ("<think>done</think>\n<answer>42</answer>", "answer", None),
        ("I will answer in <answer> tags.\n<think>t</think><answer>7</answer>", "answer", None),
        ("<think>only thinking</think>", "void", protocol.VOID_NO_ACTION),
        ("", "void", protocol.VOID_NO_ACTION),
        ("<think>t</think><code>print(1)</code><answer>1</answer>", "void", protocol.VOID_BOTH),
        ("<think>t</think><code>for x in</code>", "void", protocol.VOID_BAD_CODE),
        ("<think>t</think><code>   </code>", "void", protocol.VOID_BAD_CODE),
        ("<think>t</think><answer>  </answer>", "void", protocol.VOID_EMPTY_ANSWER),
        ("<think>t</think><code>print(1)", "void", protocol.VOID_UNCLOSED),
        ("garbage \x00 with no tags at all", "void", protocol.VOID_NO_ACTION),
    ],
)
def test_parse_turn_table(text, kind, void_reason):
    turn = protocol.parse_turn(text)
    assert turn.void_reason == void_reason
    if kind == "code":
        assert turn.code and "print" in turn.code and "```" not in turn.code
    elif kind == "answer":
        assert turn.is_answer and turn.answer.strip()
    else:
        assert turn.is_void


def test_clip_reply_drops_hallucinated_interpreter_and_restores_cut_tags():
    ran_on = "<think>a</think><code>print(1)</code>\n<interpreter>1</interpreter>\n<think>b</think><answer>1</answer>"
    assert protocol.clip_reply(ran_on) == "<think>a</think><code>print(1)</code>"
    # A stop sequence ate the closing tag: the turn must still parse as code.
    cut = protocol.clip_reply("<think>a</think>\n<code>\nprint(3)")
    assert protocol.parse_turn(cut).code == "print(3)"


def test_rendered_turns_satisfy_the_training_format():
    code_turn = protocol.format_code_turn("inspect", "import pandas as pd\nprint(1)")
    answer_turn = protocol.format_answer_turn("so", "The answer is 3.")
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": code_turn},
        {"role": "tool", "content": protocol.format_interpreter("1\n")},
        {"role": "assistant", "content": answer_turn},
    ]
    assert react.format_ok(msgs)
    assert react.final_answer(msgs).strip() == "The answer is 3."
    assert protocol.interpreter_body(protocol.format_interpreter("x </interpreter> y")) == "x </ interpreter> y"


class Scripted:
    """A policy that replays fixed replies (the protocol's text, as a model would write it)."""

    name = "scripted"

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict]] = []

    async def next_turn(self, messages, last_observation):
        self.seen.append([dict(m) for m in messages])
        if not self.replies:
            raise PolicyGaveUp("exhausted", "no more scripted replies")
        return PolicyReply(self.replies.pop(0), model="scripted-model", prompt_tokens=10, completion_tokens=5)


def _run(policy, session, **kw):
    return asyncio.run(run_agent(policy, session.run, system="sys", user="question?", **kw))


def test_agent_runs_code_in_the_sandbox_and_records_void_turns(sandbox, tmp_path):
    data = tmp_path / "nums.csv"
    data.write_text("x\n3\n4\n5\n")
    policy = Scripted(
        [
            "<think>load</think><code>import pandas as pd\ndf = pd.read_csv('nums.csv')\nprint(df['x'].sum())</code>",
            "<think>hmm, let me think more</think>",  # void: no action
            "<think>square it</think><code>print(df['x'].sum() ** 2)</code>",  # chunked mode: df still defined
            "<think>done</think><answer>144</answer>",
        ]
    )
    with sandbox.session([str(data)]) as sess:
        res = _run(policy, sess, user_view="question? (with hints)")
    assert res.status == "answered" and res.final_answer == "144"
    assert res.n_turns == 4 and res.n_void_turns == 1 and res.void_reasons == [protocol.VOID_NO_ACTION]
    roles = [m["role"] for m in res.messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 3 + ["assistant"]
    tools = [protocol.interpreter_body(m["content"]) for m in res.messages if m["role"] == "tool"]
    assert tools[0].strip() == "12"  # 3 + 4 + 5, the real interpreter output
    assert "No <code> or <answer>" in tools[1]
    assert tools[2].strip() == "144"
    # The policy saw the hinted prompt, the record keeps the plain task.
    assert policy.seen[0][1]["content"] == "question? (with hints)"
    assert res.messages[1]["content"] == "question?"
    assert res.prompt_tokens == 40 and res.completion_tokens == 20


def test_agent_feeds_back_errors_and_stops_at_max_turns(sandbox, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("a\n1\n")
    policy = Scripted(["<think>t</think><code>print(undefined_name)</code>"] * 5)
    with sandbox.session([str(data)]) as sess:
        res = _run(policy, sess, max_turns=2)
    assert res.status == "max_turns" and res.final_answer is None and res.n_turns == 2
    assert res.n_exec_errors == 2
    assert "NameError" in res.messages[3]["content"]


def test_agent_gives_up_after_consecutive_void_turns(sandbox, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("a\n1\n")
    policy = Scripted(["no tags"] * 10)
    with sandbox.session([str(data)]) as sess:
        res = _run(policy, sess, max_turns=10, max_consecutive_void=3)
    assert res.status == "error" and res.error == "void_turn_limit"
    assert res.n_void_turns == 3 and res.n_turns == 3
