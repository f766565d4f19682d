"""Rollouts through the real sandbox: the built-in agent loop with SandboxExecutor and a scripted policy."""

from __future__ import annotations

import os
import sqlite3

import pyarrow.parquet as pq
import pytest
from train_helpers import SANDBOX_TEST_LIMITS, ScriptedPolicy, answer_turn, code_turn

from datamind.sandbox import SandboxLimits
from datamind.train.config import TrainConfig
from datamind.train.rollout import (
    AgentLoopRollout,
    ExecRequest,
    RolloutPrompt,
    exec_language,
)
from datamind.train.sandbox_exec import SandboxExecutor
from datamind.train.trainer import train

SALES = "region,amount\nnorth,10\nsouth,20\nnorth,5\neast,7\n"  # amounts sum to 42; north 15


@pytest.fixture(scope="module")
def executor():
    with SandboxExecutor(SandboxLimits(**SANDBOX_TEST_LIMITS)) as ex:
        yield ex


@pytest.fixture
def sales_csv(tmp_path):
    path = tmp_path / "sales.csv"
    path.write_text(SALES)
    return path


def _loop(tmp_path, max_turns=6):
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return AgentLoopRollout(
        count_tokens=lambda s: len(s.split()), max_turns=max_turns, max_turn_tokens=256, workdir_root=str(work)
    )


def _observations(traj):
    return [
        m["content"].removeprefix("<interpreter>\n").removesuffix("\n</interpreter>")
        for m in traj.messages
        if m["role"] == "tool"
    ]


def test_state_carries_across_turns_and_stays_inside_its_trajectory(executor, sales_csv, tmp_path):
    first = [
        code_turn("import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(len(df))"),
        code_turn("total = df['amount'].sum()\nprint(total)"),
        code_turn("ratio = int(total) / 0"),  # fails; its assignment must not be replayed later
        code_turn("print(df[df.region == 'north'].amount.sum(), 'ratio' in dir())"),
        answer_turn("42"),
    ]
    second = [
        code_turn("print('df' in dir(), 'total' in dir())"),  # another trajectory's names are not here
        answer_turn("none"),
    ]
    prompt = RolloutPrompt("s1", [{"role": "user", "content": "total?"}], "total?", "42", str(sales_csv), "csv")
    a, b = _loop(tmp_path)(prompt, group_size=2, generate=ScriptedPolicy([first, second]), execute=executor)

    assert a.status == "answered" and a.n_turns == 5
    obs = _observations(a)
    assert obs[:2] == ["4", "42"]  # 4 data rows; 10 + 20 + 5 + 7; the first cell's print is not repeated
    assert obs[2].startswith("Error:\n") and "ZeroDivisionError" in obs[2]
    assert obs[3] == "15 False"  # north: 10 + 5; the failed cell left nothing behind
    assert _observations(b) == ["False False"]
    # Sessions end with their trajectories; the agent loop's workdirs are gone too.
    assert executor.open_sessions == 0
    assert os.listdir(tmp_path / "work") == []
    assert not any(p.name.startswith("traj-") for p in executor.sandbox.workdir_root.iterdir())


def test_hostile_cells_come_back_as_error_observations(executor, sales_csv, tmp_path):
    script = [
        code_turn("print(open('/etc/shadow').read())"),  # refused by the AST guard
        code_turn("import os\nos.system('touch /tmp/pwned-by-rollout')"),
        code_turn("p = '/etc/' + 'shadow'\nprint(open(p).read())"),  # passes the guard: the runtime contains it
        code_turn("import os\nprint(sorted(os.listdir('.')))"),
        answer_turn("done"),
    ]
    prompt = RolloutPrompt("s2", [{"role": "user", "content": "q"}], "q", "a", str(sales_csv), "csv")
    (traj,) = _loop(tmp_path)(prompt, group_size=1, generate=ScriptedPolicy([script]), execute=executor)

    shadow, system, dynamic, listing = _observations(traj)
    assert shadow.startswith("Execution refused by the sandbox:") and "/etc/shadow" in shadow
    assert system.startswith("Execution refused by the sandbox:") and "os.system" in system
    assert not os.path.exists("/tmp/pwned-by-rollout")
    assert dynamic.startswith("Error:\n") and ("PermissionError" in dynamic or "FileNotFoundError" in dynamic)
    assert "root:" not in dynamic
    assert listing == "['sales.csv']"  # the cell's cwd holds the data file and nothing of the host
    assert traj.status == "answered"


def test_executor_maps_observations_to_exec_results(executor, sales_csv, tmp_path):
    workdir = tmp_path / "w"
    (workdir / "data" / "files").mkdir(parents=True)
    os.symlink(sales_csv, workdir / "data" / "files" / "sales.csv")
    try:
        quiet = executor(ExecRequest("x = 1", (), str(workdir), 4))
        blocked = executor(ExecRequest("import subprocess", ("x = 1",), str(workdir), 4))
        slow = executor(ExecRequest("while True:\n    x += 1", ("x = 1",), str(workdir), 4))
        with pytest.raises(RuntimeError, match="carries 0 earlier cells but its sandbox session ran 1"):
            executor(ExecRequest("print(x)", (), str(workdir), 4))
    finally:
        executor.end_trajectory(str(workdir))
    assert (quiet.ok, quiet.error_kind) == (True, None) and quiet.output.startswith("[no output")
    assert (blocked.ok, blocked.error_kind) == (False, "blocked")
    assert (slow.ok, slow.error_kind) == (False, "timeout") and slow.output.startswith("Execution timed out")
    assert executor.open_sessions == 0


def test_sql_trajectory_uses_the_sql_tools(executor, tmp_path):
    db = tmp_path / "shop.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE orders (id INTEGER PRIMARY KEY, city TEXT, total REAL);
        INSERT INTO orders VALUES (1, 'London', 10.5), (2, 'Paris', 30.0), (3, 'London', 4.5);
    """)
    con.commit()
    con.close()
    script = [
        code_turn("print(get_db_info())"),
        code_turn(
            'summary = execute_sql("SELECT city, SUM(total) AS revenue FROM orders GROUP BY city '
            "ORDER BY city\", 'revenue.csv')\nprint(summary)"
        ),
        # A later turn: the CSV exists again because chunked replay re-ran the execute_sql call.
        code_turn("import pandas as pd\nprint(pd.read_csv('revenue.csv').values.tolist())"),
        code_turn("execute_sql('DELETE FROM orders', 'x.csv')"),
        answer_turn("London"),
    ]
    prompt = RolloutPrompt("s3", [{"role": "user", "content": "q"}], "q", "London", str(db), "sqlite")
    (traj,) = _loop(tmp_path)(prompt, group_size=1, generate=ScriptedPolicy([script]), execute=executor)

    info, summary, rows, write = _observations(traj)
    assert "Table orders (3 rows)" in info and "city TEXT" in info
    assert summary.startswith("2 rows x 2 columns")
    assert rows == "[['London', 15.0], ['Paris', 30.0]]"  # London 10.5 + 4.5
    assert write.startswith("Error:\n") and "not authorized" in write
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM orders").fetchone() == (3,)
    con.close()


def test_language_comes_from_the_data_format():
    assert [exec_language(f) for f in ("csv", "xlsx", "sqlite", None)] == ["python", "python", "sql", "python"]


def test_there_is_no_executor_but_the_sandbox():
    with pytest.raises(ValueError, match="executor"):
        TrainConfig().with_overrides({"rl.executor": "subprocess"})


class _CodeRunningRollout:
    """The built-in loop with a scripted policy, run on whatever executor the trainer hands in."""

    def __init__(self, tmp_path):
        self.loop, self.executors, self.observations = _loop(tmp_path), [], []

    def __call__(self, prompt, *, group_size, generate, execute):
        self.executors.append(execute)
        # The cwd's name tells the executors apart: sandbox workspaces are traj-*, the agent loop's datamind-*.
        scripts = [
            [code_turn("import os\nprint(os.path.basename(os.getcwd())[:5])"), answer_turn("x")]
            for _ in range(group_size)
        ]
        trajs = self.loop(prompt, group_size=group_size, generate=ScriptedPolicy(scripts), execute=execute)
        self.observations += [o for t in trajs for o in _observations(t)]
        return trajs


def _rl_config(model_dir, res, root, **over):
    base = {
        "base_model_path": model_dir,
        "export_dir": res.export_dir,
        "data_root": root.url,
        "cold_start": False,
        "rl": {
            "batch_size": 2,
            "mini_batch_size": 2,
            "group_size": 2,
            "max_steps": 1,
            "warmup_steps": 0,
            "exec_timeout_s": 5,
        },
    }
    return TrainConfig.from_dict(base).with_overrides(over)


def test_trainer_runs_rollouts_in_the_sandbox_and_closes_it(tiny_model_dir, exported, tmp_path):
    root, res = exported
    rollout = _CodeRunningRollout(tmp_path)
    result = train(_rl_config(tiny_model_dir, res, root), rollout=rollout, emit=lambda _: None)

    ex = rollout.executors[0]
    assert isinstance(ex, SandboxExecutor) and all(e is ex for e in rollout.executors)  # one per process
    assert ex.limits.wall_s == 5  # rl.exec_timeout_s
    assert ex.sandbox is None and ex.open_sessions == 0  # closed when training ended
    assert rollout.observations == ["traj-"] * 4  # 2 prompts x G=2, each cell run in a sandbox workspace
    (row,) = pq.read_table(result.metrics_uri).to_pylist()
    assert row["phase"] == "sft+rl" and row["format_rate"] == 1.0
