"""The attacks that got through the first hardening round, kept as tests, in both isolation modes.

Every cell here runs with the AST guard off: the guard is a convenience, the runtime layers alone must
contain each attack (``vars(os)['sys'+'tem']`` walks past any static check). Each test records its
outcome; the module prints the tally (contained / lost) at the end, e.g.

    pytest tests/sandbox/test_sandbox_attacks.py -s
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from pathlib import Path

import attacks_round3
import attacks_round4
import pytest
from sandbox_helpers import TEST_LIMITS

from datamind.sandbox import Sandbox, SandboxLimits, SandboxUnavailable
from datamind.settings import REPO_ROOT

MODES = ("root", "userns")
TALLY: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def _print_tally():
    yield
    print(f"\nsandbox attack tally: {dict(sorted(TALLY.items()))}")


@pytest.fixture(scope="module", params=MODES)
def mode_sandbox(request):
    if request.param == "root" and os.geteuid() != 0:
        pytest.skip("root isolation mode needs a root worker")
    limits = SandboxLimits(**{**TEST_LIMITS, "guard": False, "isolation_mode": request.param, "disk_mb": 64})
    with Sandbox(limits) as sb:
        yield sb


@pytest.fixture(scope="module")
def live_sandbox():
    with Sandbox(SandboxLimits(**{**TEST_LIMITS, "guard": False, "disk_mb": 64}), mode="live") as sb:
        yield sb


def contained(name: str, ok: bool) -> None:
    TALLY["contained" if ok else "lost"] += 1
    assert ok, name


def _digest(path: Path) -> tuple[str, int]:
    st = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mode


def test_a_planted_symlink_never_redirects_the_hosts_upkeep(live_sandbox, csv_file, tmp_path):
    """Live mode: links named like the host's temporary copy, and a link under a mode-500 directory."""
    victim = tmp_path / "victim.cfg"
    victim.write_text("precious")
    os.chmod(victim, 0o600)
    before = _digest(victim)
    with live_sandbox.session([str(csv_file)]) as s:
        s.run(
            "import os\n"
            f"for n in ['.sales.csv.copying', 'sales.csv.tmp']:\n    os.symlink({str(victim)!r}, n)\n"
            f"os.mkdir('d'); os.symlink({str(victim)!r}, 'd/l'); os.chmod('d', 0o500)"
        )
        s.run("import os\nos.remove('sales.csv')")  # forces an input restore before the next cell
        after_turn = s.run("print(open('sales.csv').read().count('north'))")
    contained("symlink restore", _digest(victim) == before and after_turn.output == "2\n")


def test_trajectories_cannot_see_or_touch_each_other(mode_sandbox, csv_file):
    a = mode_sandbox.session([str(csv_file)])
    b = mode_sandbox.session([str(csv_file)])
    try:
        a.run("open('notes.txt', 'w').write('private to a')\nopen('/tmp/a-was-here', 'w').write('x')")
        probe = b.run(
            "import os\n"
            "for p in ['..', '/tmp']:\n"
            "    try:\n        print(p, sorted(os.listdir(p)))\n"
            "    except OSError as e:\n        print(p, type(e).__name__)\n"
            f"try:\n    open({str(a.workdir / 'notes.txt')!r}).read()\n    print('READ')\n"
            "except OSError as e:\n    print('read', type(e).__name__)\n"
            f"try:\n    open({str(a.workdir / 'sales.csv')!r}, 'r+').write('x')\n    print('WROTE')\n"
            "except OSError as e:\n    print('write', type(e).__name__)"
        )
        data_after = a.run("print(open('sales.csv').read().count('north'))")
    finally:
        a.close()
        b.close()
    out = probe.output
    contained(
        "cross-trajectory",
        "READ" not in out and "WROTE" not in out and "a-was-here" not in out and a.workdir.name not in out,
    )
    assert data_after.output == "2\n"


def test_sysv_shared_memory_dies_with_the_cell(mode_sandbox, csv_file):
    host_segments = Path("/proc/sysvipc/shm").read_text().count("\n")
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "for _ in range(3):\n"
        "    sid = libc.shmget(0, 200 << 20, 0o1000 | 0o600)\n"  # IPC_PRIVATE, IPC_CREAT
        "    assert sid >= 0, ctypes.get_errno()\n"
        "    addr = libc.shmat(sid, None, 0)\n"
        "    ctypes.memset(addr, 1, 1 << 20)\n"
        "print('made')"
    )
    with mode_sandbox.session([str(csv_file)]) as s:
        obs = s.run(code)
    time.sleep(0.2)
    left = Path("/proc/sysvipc/shm").read_text().count("\n") - host_segments
    contained("sysv shm", left <= 0)
    assert obs.output.strip() in ("made", "") or "Error" in obs.output


def test_only_the_allow_list_is_visible(mode_sandbox, csv_file, tmp_path):
    secret_dir = Path(f"/var/lib/datamind-attack-{os.getpid()}")  # a KAGGLE_CONFIG_DIR nobody listed
    secret_dir.mkdir(parents=True, exist_ok=True)
    try:
        (secret_dir / "kaggle.json").write_text('{"key": "hunter2"}')
        code = (
            "import os, importlib.util\n"
            f"print(os.path.exists({str(secret_dir)!r}), os.path.exists({str(REPO_ROOT / 'include')!r}),"
            f" os.path.exists({str(tmp_path)!r}), os.path.exists('/sys/fs/cgroup'), sorted(os.listdir('/proc')))\n"
            "print(importlib.util.find_spec('datamind'))"
        )
        with mode_sandbox.session([str(csv_file)]) as s:
            obs = s.run(code)
    finally:
        (secret_dir / "kaggle.json").unlink()
        secret_dir.rmdir()
    contained("allow-list", obs.output.splitlines()[0] == "False False False False []" and "hunter2" not in obs.output)
    assert "ModuleNotFoundError" in obs.output or obs.output.splitlines()[1] == "None", obs.output


def test_the_workspace_and_scratch_have_a_disk_quota(mode_sandbox, csv_file):
    code = (
        "import os\nfor path in ['big.bin', '/tmp/big.bin', '/dev/shm/big.bin']:\n"
        "    try:\n        with open(path, 'wb') as f:\n"
        "            for _ in range(400):\n                f.write(b'0' * (1 << 20))\n"
        "        print(path, 'WROTE 400 MB')\n"
        "    except OSError as e:\n        print(path, e.strerror)\n"
    )
    with mode_sandbox.session([str(csv_file)]) as s:
        obs = s.run(code)
    contained("disk quota", "WROTE" not in obs.output and obs.output.count("No space left on device") == 3)


def test_a_background_thread_neither_leaks_output_nor_burns_cpu_between_turns(live_sandbox, csv_file):
    with live_sandbox.session([str(csv_file)]) as s:
        start = s.run(
            "import threading, time\n"
            "def spin():\n    while True:\n        print('tick', flush=True)\n        time.sleep(0.01)\n"
            "threading.Thread(target=spin, daemon=True).start()\nprint('started')"
        )
        time.sleep(0.3)
        nxt = s.run("print('hello')")
    contained("background thread", nxt.ok and nxt.output == "hello\n")
    assert start.ok


def test_a_kill_between_turns_is_not_blamed_on_the_next_cell(live_sandbox, csv_file):
    with live_sandbox.session([str(csv_file)]) as s:
        s.run("x = 41")
        s.run("import os, signal, threading\nthreading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()")
        time.sleep(0.5)
        nxt = s.run("print(x + 1)")
    contained("kill between turns", nxt.ok and nxt.output == "42\n")


def test_chunked_replay_does_not_count_against_the_new_chunks_cpu(csv_file):
    """Each chunk gets cpu_s of its own in chunked mode as in live mode, whatever the replay cost."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.3:\n    pass\n"
    limits = SandboxLimits(**{**TEST_LIMITS, "guard": False, "wall_s": 20.0})
    results = {}
    for mode in ("chunked", "live"):
        with Sandbox(limits, mode=mode) as sb, sb.session([str(csv_file)]) as s:
            results[mode] = [s.run(burn).ok for _ in range(3)]
    contained("per-chunk cpu", results == {"chunked": [True] * 3, "live": [True] * 3})


@pytest.mark.parametrize("mode", MODES)
def test_third_round_attacks_are_contained_per_session(mode, csv_file):
    """Memory (memfd, forked children), a grandchild outliving its turn, an abstract socket or a lock between
    sessions, keyrings, user namespaces, and one session's processes starving another's."""
    if mode == "root" and os.geteuid() != 0:
        pytest.skip("root isolation mode needs a root worker")
    result = attacks_round3.probe(Sandbox, SandboxLimits, str(csv_file), mode)
    print(f"\nround 3 [{mode}]: memfd {result['memfd']}, forks {result['forks']}")
    for name, ok in attacks_round3.verdicts(result).items():
        contained(f"{mode}: {name}: {result}", ok)


@pytest.mark.parametrize("mode", MODES)
def test_fourth_round_attacks_are_contained_per_session(mode, csv_file):
    """Kernel objects outside the cell's namespaces (a vsock port, per-user counters of inotify, message
    queues, queued signals, locked memory) are no channel between sessions, and children the session's
    memory limit killed are reported."""
    if mode == "root" and os.geteuid() != 0:
        pytest.skip("root isolation mode needs a root worker")
    result = attacks_round4.probe(Sandbox, SandboxLimits, str(csv_file), mode)
    print(f"\nround 4 [{mode}]: {result}")
    untried = []
    for name, ok in attacks_round4.verdicts(result).items():
        if ok is None:
            untried.append(name)
            continue
        contained(f"{mode}: {name}: {result}", ok)
    if untried:
        pytest.skip(f"this host cannot try: {untried} (no AF_VSOCK transport outside the sandbox)")


def test_a_cell_that_cannot_be_set_up_is_the_platforms_failure_not_an_observation(csv_file):
    # One process per session cannot hold the pid-namespace chain (outside, init, cell): set-up fails
    # before any agent code runs, and that must be raised, never handed back as the agent's output.
    limits = SandboxLimits(**{**TEST_LIMITS, "guard": False, "isolation_mode": "userns", "max_procs": 1})
    with Sandbox(limits) as sb:
        if "pid_namespace" not in sb.layers or "pids_cgroup" not in sb.layers:
            pytest.skip(f"needs a pid namespace and a pids cgroup to starve set-up; active: {sb.layers}")
        with sb.session([str(csv_file)]) as s:
            with pytest.raises(SandboxUnavailable, match="set-up failed"):
                s.run("print('agent code')")


def test_airflow_stays_out_of_reach_past_the_import_blocker(mode_sandbox, csv_file):
    import airflow

    site = os.path.dirname(os.path.dirname(airflow.__file__))
    code = (
        "import os, sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_HostOnlyBlocker']\n"
        f"print(sorted(os.listdir({os.path.join(site, 'airflow')!r})))\n"
        "try:\n"
        "    from airflow import DAG\n"
        "    print('IMPORTED', DAG)\n"
        "except ImportError as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )
    with mode_sandbox.session([str(csv_file)]) as s:
        out = s.run(code).output.splitlines()
    contained(f"airflow importable: {out}", out[:1] == ["[]"] and out[1:2] == ["refused ImportError"])
