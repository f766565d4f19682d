"""The built-in agent loop with the real sandbox executor; the policy is a scripted GenerateFn."""

import os

import pytest
from train_helpers import SANDBOX_TEST_LIMITS

from datamind.sandbox import SandboxLimits
from datamind.train.rollout import AgentLoopRollout, RolloutPrompt
from datamind.train.sandbox_exec import SandboxExecutor


@pytest.fixture(scope="module")
def executor():
    with SandboxExecutor(SandboxLimits(**SANDBOX_TEST_LIMITS)) as ex:
        yield ex


def test_interpreter_message_escapes_its_closing_tag():
    from datamind.train.rollout import interpreter_message

    msg = interpreter_message("a</interpreter>b\n")
    assert msg == {"role": "tool", "content": "<interpreter>\na</ interpreter>b\n</interpreter>"}


def test_agent_loop_runs_code_reads_data_and_stops(tmp_path, executor):
    data = tmp_path / "sales.csv"
    data.write_text("a\n1\n2\n3\n")
    turns = {
        "good": [
            "<think>read</think><code>print(sum(int(x) for x in open('sales.csv').read().split()[1:]))"
            "</code> trailing junk",
            "<think>ok</think><answer>6</answer>",
        ],
        "void": ["<think>hmm</think> nothing runnable"],
        "loop": ["<think>again</think><code>print(1)</code>"] * 5,
    }

    class Ordered:
        """A scripted GenerateFn: the loop steps active rollouts together, in a stable order."""

        def __init__(self):
            self.names = ["good", "void", "loop"]

        def __call__(self, conversations, max_new_tokens):
            assert len(conversations) == len(self.names)
            texts = [
                turns[n][min(sum(m["role"] == "assistant" for m in c), len(turns[n]) - 1)]
                for n, c in zip(self.names, conversations, strict=True)
            ]
            self.names = [n for n, t in zip(self.names, texts, strict=True) if "<answer>" not in t and "<code>" in t]
            return texts

    prompt = RolloutPrompt("s1", [{"role": "user", "content": "sum a"}], "sum a", "6", str(data))
    loop = AgentLoopRollout(
        count_tokens=lambda s: len(s.split()), max_turns=3, max_turn_tokens=64, workdir_root=str(tmp_path)
    )
    good, void, looping = loop(prompt, group_size=3, generate=Ordered(), execute=executor)
    assert good.status == "answered" and good.n_void_turns == 0 and good.n_turns == 2
    assert good.messages[0]["content"].endswith("</code>")  # generation cut at the stop string
    assert good.messages[1] == {"role": "tool", "content": "<interpreter>\n6\n</interpreter>"}
    assert void.status == "void" and void.n_void_turns == 1 and len(void.messages) == 1
    assert looping.status == "max_turns" and looping.n_turns == 3
    assert sorted(os.listdir(tmp_path)) == ["sales.csv"]  # per-trajectory workdirs removed


def test_agent_loop_respects_response_budget(executor):
    seen = []

    def generate(conversations, max_new_tokens):
        seen.append(max_new_tokens)
        return ["<think>x</think><code>print('a b c d e f')</code>"] * len(conversations)

    prompt = RolloutPrompt("s", [{"role": "user", "content": "q"}], "q", "a")
    loop = AgentLoopRollout(
        count_tokens=lambda s: len(s.split()), max_turns=10, max_turn_tokens=50, max_response_tokens=12
    )
    (traj,) = loop(prompt, group_size=1, generate=generate, execute=executor)
    assert traj.status == "length" and traj.response_tokens >= 12
    assert seen[0] == 12 and all(b < 12 for b in seen[1:])
