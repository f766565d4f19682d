"""The agent loop runs the prompts of a batch asynchronously: one prompt's cells execute while the
others generate. The executor is real (the project sandbox); only the policy
is scripted, as a function of the conversation it is shown."""

from __future__ import annotations

import os
import threading
import time

import pytest
from train_helpers import SANDBOX_TEST_LIMITS, answer_turn, code_turn

from datamind.sandbox import SandboxLimits
from datamind.train.rollout import AgentLoopRollout, ExecRequest, RolloutPrompt
from datamind.train.sandbox_exec import SandboxExecutor


@pytest.fixture
def sandbox():
    with SandboxExecutor(SandboxLimits(**SANDBOX_TEST_LIMITS)) as ex:
        yield ex


def _prompt(name: str) -> RolloutPrompt:
    return RolloutPrompt(name, [{"role": "user", "content": name}], name, "x")


def _turn_of(conv: list[dict]) -> int:
    return sum(m["role"] == "assistant" for m in conv)


class ConversationPolicy:
    """Each prompt follows its own script, chosen from the conversation alone (so the order in which
    the loop batches trajectories cannot change what they say); every call is recorded."""

    def __init__(self, scripts: dict[str, list[str]]):
        self.scripts, self.calls, self.lock = scripts, [], threading.Lock()

    def __call__(self, conversations, max_new_tokens):
        with self.lock:
            self.calls.append([(c[0]["content"], _turn_of(c)) for c in conversations])
        return [self.scripts[c[0]["content"]][_turn_of(c)] for c in conversations]


def _loop(tmp_path, **kw) -> AgentLoopRollout:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return AgentLoopRollout(count_tokens=lambda s: len(s.split()), max_turn_tokens=64, workdir_root=str(work), **kw)


def test_a_prompt_generates_while_another_prompts_cell_is_still_running(tmp_path, sandbox):
    """The slow prompt's cell cannot finish until the fast prompt has generated its third turn: a loop
    that waited for every cell of a turn before generating again would never get there."""
    fast_third_turn = threading.Event()
    scripts = {
        "slow": [code_turn("print('slow done')"), answer_turn("s")],
        "fast": [code_turn("print(1)"), code_turn("print(2)"), answer_turn("f")],
    }

    class Policy(ConversationPolicy):
        def __call__(self, conversations, max_new_tokens):
            if any(c[0]["content"] == "fast" and _turn_of(c) == 2 for c in conversations):
                fast_third_turn.set()
            return super().__call__(conversations, max_new_tokens)

    real = sandbox

    def execute(req: ExecRequest):
        if "slow" in req.code and not fast_third_turn.wait(timeout=60):
            raise AssertionError("the fast prompt never generated while the slow cell was running")
        return real(req)

    policy = Policy(scripts)
    loop = _loop(tmp_path, exec_workers=4)
    slow, fast = loop.batch([_prompt("slow"), _prompt("fast")], group_size=2, generate=policy, execute=execute)

    assert policy.calls[0] == [("slow", 0), ("slow", 0), ("fast", 0), ("fast", 0)]  # first turn: one batch
    assert [("fast", 1), ("fast", 1)] in policy.calls and [("fast", 2), ("fast", 2)] in policy.calls
    assert all(t.status == "answered" for t in slow + fast)
    assert [m["content"] for m in slow[0].messages][1] == "<interpreter>\nslow done\n</interpreter>"
    assert [m["content"] for m in fast[1].messages][3] == "<interpreter>\n2\n</interpreter>"
    assert loop.last_stats.cells == 2 + 4 and loop.last_stats.prompts == 2
    assert os.listdir(tmp_path / "work") == []


def test_a_batch_gives_each_prompt_what_it_gets_alone(tmp_path, sandbox):
    scripts = {
        f"q{i}": [
            code_turn(f"x = {i} * 7\nprint(x)"),
            code_turn("print(x + 1)" if i % 2 else "1 / 0"),
            answer_turn(str(i)),
        ]
        for i in range(5)
    }
    prompts = [_prompt(f"q{i}") for i in range(5)]
    executor = sandbox
    together = _loop(tmp_path, exec_workers=3).batch(
        prompts, group_size=2, generate=ConversationPolicy(scripts), execute=executor
    )
    alone = [
        _loop(tmp_path, exec_workers=1)(p, group_size=2, generate=ConversationPolicy(scripts), execute=executor)
        for p in prompts
    ]
    assert together == alone
    assert together[3][0].messages[3]["content"] == "<interpreter>\n22\n</interpreter>"  # 3 * 7 + 1: state kept
    assert "ZeroDivisionError" in together[2][1].messages[3]["content"]


def test_max_turns_and_the_response_budget_hold_per_prompt(tmp_path, sandbox):
    scripts = {"loops": [code_turn("print(1)")] * 10, "answers": [answer_turn("a")]}
    loop = _loop(tmp_path, max_turns=3)
    looping, answering = loop.batch(
        [_prompt("loops"), _prompt("answers")],
        group_size=2,
        generate=ConversationPolicy(scripts),
        execute=sandbox,
    )
    assert [t.status for t in looping] == ["max_turns", "max_turns"] and looping[0].n_turns == 3
    assert [t.status for t in answering] == ["answered", "answered"] and answering[0].n_turns == 1


def test_an_executor_failure_ends_the_batch_and_cleans_up(tmp_path, sandbox):
    scripts = {"a": [code_turn("print(1)"), answer_turn("a")], "b": [code_turn("boom"), answer_turn("b")]}
    ended = []

    class Failing:
        def __call__(self, req):
            if req.code == "boom":
                raise RuntimeError("executor crashed")
            time.sleep(0.2)
            return sandbox(req)

        def end_trajectory(self, workdir):
            ended.append(workdir)

    with pytest.raises(RuntimeError, match="executor crashed"):
        _loop(tmp_path).batch(
            [_prompt("a"), _prompt("b")], group_size=2, generate=ConversationPolicy(scripts), execute=Failing()
        )
    assert len(ended) == 4 and os.listdir(tmp_path / "work") == []


def test_sandbox_cells_of_several_prompts_overlap_with_generation(tmp_path, sales_csv_path):
    """In the project sandbox: a prompt's second turn is generated before another prompt's long cell ends."""
    scripts = {
        "slow": [code_turn("import time\ntime.sleep(3)\nprint('slept')"), answer_turn("s")],
        "fast": [code_turn("import pandas as pd\nprint(len(pd.read_csv('sales.csv')))"), answer_turn("f")],
    }
    ends: dict[str, float] = {}
    starts: dict[tuple[str, int], float] = {}

    class Policy(ConversationPolicy):
        def __call__(self, conversations, max_new_tokens):
            for c in conversations:
                starts.setdefault((c[0]["content"], _turn_of(c)), time.monotonic())
            return super().__call__(conversations, max_new_tokens)

    prompts = [
        RolloutPrompt(n, [{"role": "user", "content": n}], n, "x", str(sales_csv_path), "csv") for n in ("slow", "fast")
    ]
    with SandboxExecutor(SandboxLimits(**{**SANDBOX_TEST_LIMITS, "wall_s": 20.0})) as sandbox:

        class Timed:
            end_trajectory = sandbox.end_trajectory

            def __call__(self, req):
                out = sandbox(req)
                ends["slow" if "sleep" in req.code else "fast"] = time.monotonic()
                return out

        slow, fast = _loop(tmp_path).batch(prompts, group_size=2, generate=Policy(scripts), execute=Timed())
        assert sandbox.open_sessions == 0
    assert [m["content"] for m in fast[0].messages][1] == "<interpreter>\n4\n</interpreter>"
    assert [m["content"] for m in slow[0].messages][1] == "<interpreter>\nslept\n</interpreter>"
    # The fast prompt's answer turn was generated while the slow cells were still sleeping.
    assert starts[("fast", 1)] < ends["slow"]
    assert starts[("slow", 1)] > starts[("fast", 1)]


@pytest.fixture
def sales_csv_path(tmp_path):
    path = tmp_path / "sales.csv"
    path.write_text("region,amount\nnorth,10\nsouth,20\nnorth,5\neast,7\n")
    return path
