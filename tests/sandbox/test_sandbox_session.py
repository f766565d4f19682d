"""Session semantics through a real zygote: chunked replay, live interpreters, SQL mode, observations."""

from __future__ import annotations

import hashlib
import os
import sys

import pandas as pd
import pytest
from sandbox_helpers import TEST_LIMITS

from datamind.sandbox import Sandbox, SandboxLimits, SandboxUnavailable
from datamind.sandbox.limits import LAYER_GUARD, STRICT_REQUIREMENTS


def test_strict_policy_layers_are_all_active_and_reported(sandbox):
    active = set(sandbox.layers)
    assert LAYER_GUARD in active
    for alternatives in STRICT_REQUIREMENTS:
        assert active & set(alternatives), alternatives
    if os.geteuid() == 0 and os.access("/sys/fs/cgroup/pids", os.W_OK):
        assert {"pids_cgroup", "memory_cgroup"} <= active  # this host allows them, so they must be used


def test_chunks_share_state_and_earlier_output_is_not_repeated(sandbox, csv_file):
    with sandbox.session([str(csv_file)]) as s:
        first = s.run("import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint('loaded', len(df))")
        second = s.run("totals = df.groupby('region')['amount'].sum()\nprint(totals['north'])")
        third = s.run("totals.sum()")
    assert (first.ok, first.output) == (True, "loaded 4\n")
    assert (second.ok, second.output) == (True, "15\n")  # 10 + 5, and no second 'loaded 4'
    assert third.ok and third.output.strip().endswith("42)")  # notebook-style value of the last expression


def test_a_failed_chunk_is_forgotten_and_does_not_break_later_ones(sandbox, csv_file):
    with sandbox.session([str(csv_file)]) as s:
        assert s.run("x = 2").ok
        bad = s.run("x = 100\nraise ValueError('nope')")
        after = s.run("print(x)")
    assert (bad.ok, bad.error_kind) == (False, "exception")
    assert "ValueError: nope" in bad.output and 'File "<cell>", line 2' in bad.output
    assert after.output == "2\n"  # the failed chunk's assignment was not replayed
    assert s.history == ["x = 2", "pass"]  # prints stripped, failed chunk absent


def test_replay_is_faithful_for_files_and_random_numbers(sandbox, csv_file):
    with sandbox.session([str(csv_file)]) as s:
        first = s.run("import os, random\nos.mkdir('out')\nv = random.random()\nprint(v)")
        failed = s.run("open('scratch.txt', 'w').write('x')\nraise RuntimeError")
        second = s.run("print(v, sorted(os.listdir('.')))")
    assert first.ok and second.ok, second.output
    # same random value after replay; the replayed mkdir did not fail; the failed chunk's file is gone
    assert second.output == f"{first.output.strip()} ['out', 'sales.csv']\n"
    assert failed.error_kind == "exception"


def test_syntax_errors_come_back_as_observations(sandbox, csv_file):
    with sandbox.session([str(csv_file)]) as s:
        obs = s.run("for i in range(3) print(i)")
    assert (obs.ok, obs.error_kind) == (False, "exception")
    assert "SyntaxError" in obs.output and "line 1" in obs.output


def test_blocked_code_is_an_observation_and_never_runs(sandbox, csv_file):
    with sandbox.session([str(csv_file)]) as s:
        obs = s.run("import subprocess\nsubprocess.run(['touch', 'pwned'])")
        listing = s.run("import os\nprint(sorted(os.listdir('.')))")
    assert (obs.ok, obs.error_kind) == (False, "blocked")
    assert "subprocess" in obs.output
    assert listing.output == "['sales.csv']\n"


def test_data_file_is_a_private_read_only_copy_in_the_cwd(sandbox, csv_file):
    digest = hashlib.sha256(csv_file.read_bytes()).hexdigest()
    with sandbox.session([str(csv_file)]) as s:
        obs = s.run(
            "import os\nprint(os.path.basename(os.getcwd()).startswith('traj-'), os.access('sales.csv', os.W_OK))"
        )
        workdir = s.workdir
        assert (workdir / "sales.csv").read_bytes() == csv_file.read_bytes()
    assert obs.output == "True False\n"
    assert not workdir.exists()  # cleaned up with the session
    assert hashlib.sha256(csv_file.read_bytes()).hexdigest() == digest


def test_long_output_is_truncated_to_head_and_tail(sandbox, csv_file):
    with sandbox.session([str(csv_file)]) as s:
        obs = s.run("for i in range(5000):\n    print(f'line {i:05d}')")
    assert obs.ok
    assert obs.output.startswith("line 00000\n")
    assert obs.output.endswith("line 04999\n")
    assert "characters truncated" in obs.output
    assert len(obs.output) <= TEST_LIMITS["head_chars"] + TEST_LIMITS["tail_chars"] + 60


def test_sql_mode_tools_read_and_cannot_write(sandbox, sqlite_file):
    digest = hashlib.sha256(sqlite_file.read_bytes()).hexdigest()
    with sandbox.session([str(sqlite_file)], language="sql") as s:
        info = s.run("print(get_db_info())")
        query = s.run(
            'print(execute_sql(\'SELECT name, city FROM customers WHERE city = "London" '
            "ORDER BY name', 'london.csv'))\n"
            "import pandas as pd\nprint(pd.read_csv('london.csv').to_dict('list'))"
        )
        write = s.run("execute_sql('DELETE FROM orders', 'x.csv')")
        direct = s.run("import sqlite3\nsqlite3.connect('shop.sqlite').execute('DELETE FROM orders')")
        count = s.run("print(execute_sql('SELECT COUNT(*) AS n FROM orders', 'n.csv'))")
    assert "Table orders (4 rows)" in info.output
    assert query.ok and "{'name': ['Ada', 'Bo'], 'city': ['London', 'London']}" in query.output
    assert (write.ok, write.error_kind) == (False, "exception") and "not authorized" in write.output
    # a tool error reads as the tool's message at the agent's call: no platform module or host path in it
    assert "datamind" not in write.output and "/include/" not in write.output and "sqltools" not in write.output
    assert write.output.rstrip().endswith("not authorized)") or "SqlToolError: SQL error" in write.output
    assert 'File "<cell>", line 1' in write.output
    assert direct.error_kind == "blocked"
    assert count.output.startswith("1 rows")
    assert hashlib.sha256(sqlite_file.read_bytes()).hexdigest() == digest


def test_live_mode_keeps_state_and_recovers_after_a_timeout(csv_file):
    limits = SandboxLimits(**{**TEST_LIMITS, "wall_s": 1.5})
    with Sandbox(limits, mode="live") as sb, sb.session([str(csv_file)]) as s:
        assert s.run("import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint('loaded')").output == "loaded\n"
        hang = s.run("import time\ntime.sleep(30)")
        after = s.run("print(df['amount'].max())")
    assert (hang.ok, hang.error_kind) == (False, "timeout")
    assert 1.4 < hang.duration_s < 4
    assert after.output == "20\n"  # state rebuilt silently: no second 'loaded'


def test_chunked_and_live_modes_agree_on_results(sandbox, csv_file):
    chunks = [
        "import pandas as pd\ndf = pd.read_csv('sales.csv')",
        "df['double'] = df['amount'] * 2",
        "print(df['double'].tolist())",
    ]
    expected = [str([v * 2 for v in pd.read_csv(csv_file)["amount"]]) + "\n"]
    with Sandbox(SandboxLimits(**TEST_LIMITS), mode="live") as live:
        for sb in (sandbox, live):
            with sb.session([str(csv_file)]) as s:
                outputs = [s.run(c).output for c in chunks]
            assert outputs[-1:] == expected


def test_invalid_arguments_fail_clearly(sandbox, csv_file, tmp_path):
    with pytest.raises(ValueError, match="mode"):
        Sandbox(mode="notebook")
    with pytest.raises(ValueError, match="database file"):
        sandbox.session([str(csv_file)], language="sql")
    with pytest.raises(FileNotFoundError):
        sandbox.session([str(tmp_path / "missing.csv")])
    with pytest.raises(ValueError, match="hidden inside the sandbox"):
        sandbox.session([str(csv_file)], workdir_parent=str(tmp_path))
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxLimits(memory_mb=100)


def test_concurrent_sessions_from_threads_stay_apart(sandbox, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    files = []
    for i in range(4):
        path = tmp_path / f"part{i}.csv"
        path.write_text("v\n" + "\n".join(str(i * 100 + k) for k in range(10)) + "\n")
        files.append(path)

    def trajectory_plain(path):
        with sandbox.session([str(path)]) as s:
            s.run(f"import pandas as pd, os\ndf = pd.read_csv({path.name!r})")
            return s.run("print(int(df['v'].sum()), os.listdir('.'))").output

    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(trajectory_plain, files))
    # sum over k of (100 i + k) = 1000 i + 45; each session sees only its own file
    assert outputs == [f"{1000 * i + 45} ['part{i}.csv']\n" for i in range(4)]


def test_a_dead_zygote_raises_instead_of_producing_observations(csv_file):
    import signal

    with Sandbox(SandboxLimits(**TEST_LIMITS), mode="live") as sb, sb.session([str(csv_file)]) as s:
        assert s.run("x = 1").ok
        os.kill(sb._client.ready["pid"], signal.SIGKILL)  # the zygote this test started
        sb._client._proc.wait(timeout=10)  # dead for sure; its live interpreter dies with it
        with pytest.raises(SandboxUnavailable):
            s.run("print(x)")
        with pytest.raises(SandboxUnavailable):
            s.run("print(x)")


def test_roots_left_by_dead_owners_are_swept_and_live_ones_kept(tmp_path):
    import subprocess
    import tempfile
    from pathlib import Path

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(tempfile.mkdtemp(prefix=f"datamind-sandbox-{dead.pid}-"))
    (stale / "traj-x").mkdir()
    alive = Path(tempfile.mkdtemp(prefix=f"datamind-sandbox-{os.getppid()}-"))  # our parent is alive
    try:
        with Sandbox(SandboxLimits(**TEST_LIMITS)) as sb:
            root = sb.workdir_root
            assert root.name.startswith(f"datamind-sandbox-{os.getpid()}-")
        assert not stale.exists()
        assert alive.exists()
        assert not root.exists()  # and our own root is removed on close
    finally:
        alive.rmdir()


@pytest.mark.parametrize("module", ["datamind", "datamind.formats", "airflow", "airflow.sdk"])
@pytest.mark.parametrize("fixture", ["sandbox", "raw_sandbox"])
def test_the_projects_own_packages_cannot_be_imported_in_a_cell(module, fixture, request, csv_file):
    """A program in a training sample must only use what a model will have: never the pipeline's code."""
    sb = request.getfixturevalue(fixture)
    with sb.session([str(csv_file)]) as s:
        plain = s.run(f"import {module}")
        # The guard refuses importlib outright; without it the runtime must still say no.
        dynamic = s.run(f"import importlib\nimportlib.import_module({module!r})") if fixture == "raw_sandbox" else plain
        still_fine = s.run("import pandas as pd\nprint(len(pd.read_csv('sales.csv')))")
    for res in (plain, dynamic):
        assert not res.ok and "ModuleNotFoundError" in res.output and module in res.output, res.output
    assert still_fine.ok and still_fine.output == "4\n"


def test_sql_tools_keep_working_once_the_project_is_hidden(sandbox, sqlite_file):
    with sandbox.session([str(sqlite_file)], language="sql") as s:
        res = s.run(
            "print(execute_sql(sql='SELECT count(*) AS n FROM customers', output_path='n.csv'))\n"
            "print(open('n.csv').read())"
        )
    assert res.ok and "n\n" in res.output, res.output


def test_tracebacks_name_library_frames_without_the_workers_install_paths(sandbox, csv_file):
    with sandbox.session([str(csv_file)]) as s:
        res = s.run("import pandas as pd\ndf = pd.read_csv('sales.csv')\ndf.dropna(subset=['regions'])")
    assert not res.ok and "KeyError" in res.output and 'File "<cell>", line 3' in res.output
    assert "pandas/core/frame.py" in res.output  # the frame is still named...
    assert "site-packages" not in res.output and sys.prefix not in res.output  # ...but not where it is installed


def test_warnings_name_library_files_without_the_workers_install_paths(sandbox, csv_file):
    with sandbox.session([str(csv_file)]) as s:
        res = s.run("import numpy as np\nprint(np.mean([]))")
    assert res.ok and "RuntimeWarning: Mean of empty slice" in res.output and res.output.endswith("nan\n")
    assert "numpy/_core/" in res.output
    assert "site-packages" not in res.output and sys.prefix not in res.output


def test_one_interpreter_holds_pandas_pyarrow_polars_and_duckdb_under_the_default_caps(csv_file):
    """The allocators' reservations (pyarrow's pool, a glibc arena per thread) are not the cell's data: with
    them, this ordinary cell sequence used to fail its duckdb import on the 2 GiB address-space cap."""
    with Sandbox(SandboxLimits(), mode="live") as sb, sb.session([str(csv_file)]) as s:
        first = s.run(
            "import pandas as pd\nimport polars as pl\ndf = pd.read_csv('sales.csv')\n"
            "print(pl.SQLContext(t=pl.from_pandas(df)).execute('SELECT SUM(amount) FROM t', eager=True).item())"
        )
        second = s.run("import duckdb\nprint(duckdb.sql('SELECT SUM(amount) FROM df').fetchall()[0][0])")
    assert first.ok and second.ok, (first.output, second.output)
    assert first.output == second.output


@pytest.mark.parametrize("mode", ["root", "userns"])
def test_a_closed_sandbox_leaves_no_cgroup_behind(mode, csv_file):
    from datamind.sandbox.cgroups import own_cgroups

    if mode == "root" and os.geteuid() != 0:
        pytest.skip("root isolation mode needs a root worker")
    with Sandbox(SandboxLimits(**{**TEST_LIMITS, "isolation_mode": mode})) as sb:
        if "memory_cgroup" not in sb.layers and "pids_cgroup" not in sb.layers:
            pytest.skip(f"no cgroup on this host: {sb.layers}")
        zygote = sb._client.ready["pid"]
        with sb.session([str(csv_file)]) as s:
            assert s.run("print(1)").output == "1\n"
        made = [parent / f"datamind-sandbox-{zygote}" for _, _, parent in own_cgroups()]
        assert any(p.exists() for p in made)
    # The zygote removes its own cgroups on the way out, though its root has no /sys by then.
    assert [p for p in made if p.exists()] == []
