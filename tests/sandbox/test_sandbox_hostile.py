"""Hostile code against the real sandbox. Each attack runs twice where it matters: with the AST guard
(refused up front) and with the guard off (`raw_sandbox`), where the runtime layers must contain it
and leave the host unharmed."""

from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sandbox_helpers import FAKE_SECRET, TEST_LIMITS, processes_of_uid

from datamind.sandbox import Sandbox, SandboxLimits
from datamind.settings import REPO_ROOT


def _run(sb: Sandbox, data: Path, code: str):
    with sb.session([str(data)]) as s:
        return s, s.run(code)


def _host_is_healthy() -> None:
    assert subprocess.run(["true"], timeout=10).returncode == 0  # the host can still fork/exec
    assert os.getloadavg()[0] < 200


FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"


def test_fork_bomb_is_refused_by_the_guard(sandbox, csv_file):
    _, obs = _run(sandbox, csv_file, FORK_BOMB)
    assert obs.error_kind == "blocked"


def test_fork_bomb_without_the_guard_is_capped_and_fully_killed(raw_sandbox, csv_file):
    started = time.monotonic()
    s, obs = _run(raw_sandbox, csv_file, FORK_BOMB)
    assert obs.error_kind == "timeout" and not obs.ok
    assert time.monotonic() - started < TEST_LIMITS["wall_s"] + 5
    assert processes_of_uid(s.uid) == []  # every forked copy is gone
    _host_is_healthy()
    with raw_sandbox.session([str(csv_file)]) as again:  # the sandbox itself still works
        assert again.run("print(1 + 1)").output == "2\n"


@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(4 * 1024 ** 3)",
        "import numpy as np\na = np.ones((20000, 20000))",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))",
    ],
)
def test_memory_hogs_hit_the_address_space_cap(raw_sandbox, csv_file, code):
    _, obs = _run(raw_sandbox, csv_file, code)
    assert (obs.ok, obs.error_kind) == (False, "memory")
    assert "MemoryError" in obs.output
    _host_is_healthy()


def test_an_extension_that_cannot_be_mapped_is_out_of_memory_not_a_missing_package(csv_file):
    """Address space used up by the cell, then an import: the loader's mmap fails, which is the memory cap."""
    hog = (
        "import mmap\nheld = []\ntry:\n    while True:\n        held.append(mmap.mmap(-1, 8 << 20))\n"
        "except (MemoryError, OSError):\n    pass\nheld.pop()\nimport duckdb"
    )
    with Sandbox(SandboxLimits(**{**TEST_LIMITS, "guard": False})) as sb:  # its own: nothing warmed yet
        _, obs = _run(sb, csv_file, hog)
    assert (obs.ok, obs.error_kind) == (False, "memory"), obs.output
    assert "ImportError" in obs.output and "site-packages" not in obs.output


def test_cpu_bound_infinite_loop_is_stopped_by_the_cpu_limit(sandbox, csv_file):
    _, obs = _run(sandbox, csv_file, "while True:\n    pass")
    assert obs.error_kind == "timeout"
    assert TEST_LIMITS["cpu_s"] - 0.5 < obs.duration_s < TEST_LIMITS["wall_s"] + 2


def test_sleeping_cell_is_stopped_by_the_wall_limit(sandbox, csv_file):
    _, obs = _run(sandbox, csv_file, "import time\ntime.sleep(60)")
    assert obs.error_kind == "timeout"
    assert TEST_LIMITS["wall_s"] - 0.1 < obs.duration_s < TEST_LIMITS["wall_s"] + 2


def test_host_secrets_and_files_outside_the_workdir_are_unreadable(raw_sandbox, csv_file, tmp_path):
    neighbour = tmp_path / "neighbour.txt"  # e.g. another process' temp file on the host
    neighbour.write_text("private")
    code = f"""
import os
results = {{}}
for path in [{str(REPO_ROOT / "pyproject.toml")!r}, os.path.expanduser('~root/.gitconfig'), '/root/.bashrc',
             {str(neighbour)!r}, '/proc/{os.getpid()}/environ', '/proc/1/environ']:
    try:
        with open(path) as fh:
            results[path] = 'LEAKED ' + fh.read(40)
    except OSError as exc:
        results[path] = type(exc).__name__
for path, outcome in results.items():
    print(outcome.split()[0], path)
print('SECRET' if {FAKE_SECRET!r} in repr(dict(os.environ)) else 'env clean', sorted(os.environ))
"""
    _, obs = _run(raw_sandbox, csv_file, code)
    assert obs.ok, obs.output
    assert "LEAKED" not in obs.output
    assert obs.output.count("Error ") == 6  # every read failed (NotFound, Permission)
    assert "env clean" in obs.output and "OPENAI_API_KEY" not in obs.output
    assert neighbour.read_text() == "private"


def test_network_is_unreachable_even_on_loopback(sandbox, raw_sandbox, csv_file):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        import urllib.request

        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status == 200  # host reaches it
        code = f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/', timeout=3)"
        _, guarded = _run(sandbox, csv_file, code)
        _, raw = _run(raw_sandbox, csv_file, code)
        _, outside = _run(raw_sandbox, csv_file, "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)")
    finally:
        server.shutdown()
        server.server_close()
    assert guarded.error_kind == "blocked"
    assert raw.error_kind == "exception" and ("URLError" in raw.output or "unreachable" in raw.output)
    assert outside.error_kind == "exception" and "Network is unreachable" in outside.output


def test_subprocess_and_os_system_are_refused(sandbox, csv_file):
    for code in (
        "import os\nos.system('id')",
        "import subprocess\nsubprocess.check_output(['id'])",
        "import os\nos.execv('/bin/sh', ['sh'])",
    ):
        _, obs = _run(sandbox, csv_file, code)
        assert obs.error_kind == "blocked", code


def test_processes_started_without_the_guard_cannot_escape_the_cell(raw_sandbox, csv_file):
    code = (
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"  # leaves our process group
        "print(subprocess.run(['cat', '/root/.bashrc'], capture_output=True).returncode)"
    )
    s, obs = _run(raw_sandbox, csv_file, code)
    assert obs.ok and obs.output.strip() != "0"
    assert processes_of_uid(s.uid) == []  # the detached sleeper was killed with the cell


def test_deleting_or_overwriting_the_data_file_fails_and_the_original_is_untouched(sandbox, raw_sandbox, csv_file):
    digest = hashlib.sha256(csv_file.read_bytes()).hexdigest()
    _, guarded = _run(sandbox, csv_file, "import os\nos.remove('sales.csv')")
    assert guarded.error_kind == "blocked"
    with raw_sandbox.session([str(csv_file)]) as s:
        removal = s.run("import os\nos.remove('sales.csv')")
        overwrite = s.run("open('sales.csv', 'w').write('gone')")
        rename = s.run("import os\nos.rename('sales.csv', 'moved.csv')")
        still = s.run("import pandas as pd\nprint(pd.read_csv('sales.csv')['amount'].sum())")
    assert [o.error_kind for o in (removal, overwrite, rename)] == ["exception"] * 3
    # Inputs are read-only bind mounts: removing or renaming a mount point is refused, writing hits EROFS.
    assert all("PermissionError" in o.output for o in (removal, rename))
    assert "Read-only file system" in overwrite.output
    assert still.output == "42\n"
    assert hashlib.sha256(csv_file.read_bytes()).hexdigest() == digest


def test_writes_outside_the_workdir_fail_or_stay_private(raw_sandbox, csv_file):
    marker = f"datamind-sandbox-escape-{os.getpid()}"
    code = (
        f"open('/tmp/{marker}', 'w').write('x')\n"  # private tmpfs: allowed but invisible to the host
        f"open('/run/lock/{marker}', 'w').write('x')\n"
        "try:\n    open('/etc/datamind-escape', 'w')\nexcept OSError as e:\n    print(type(e).__name__)"
    )
    _, obs = _run(raw_sandbox, csv_file, code)
    assert obs.output in ("PermissionError\n", "OSError\n")  # /etc sits in the read-only root (EROFS)
    assert not Path(f"/tmp/{marker}").exists()
    assert not Path(f"/run/lock/{marker}").exists()
    assert not Path("/etc/datamind-escape").exists()


def test_huge_output_is_cut_off_and_bounded(sandbox, csv_file):
    _, obs = _run(sandbox, csv_file, "while True:\n    print('x' * 1000)")
    assert (obs.ok, obs.error_kind) == (False, "output_limit")
    assert len(obs.output) < TEST_LIMITS["head_chars"] + TEST_LIMITS["tail_chars"] + 200
    assert obs.output.startswith("x" * 100)


def _processes_running(argv: list[str]) -> list[int]:
    wanted = "\0".join(argv).encode()
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/cmdline").read_bytes().rstrip(b"\0") == wanted:
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_user_namespace_mode_contains_the_same_attacks(csv_file):
    """The path non-root Airflow workers take (here as root: cells become `nobody` inside a user ns)."""
    limits = SandboxLimits(**{**TEST_LIMITS, "guard": False, "isolation_mode": "userns", "wall_s": 2.0})
    sleeper = ["sleep", f"{3000 + os.getpid() % 1000}"]
    with Sandbox(limits) as sb:
        assert {"user_namespace_no_caps", "mount_namespace", "pid_namespace"} <= set(sb.layers)
        with sb.session([str(csv_file)]) as s:
            secrets = s.run("try:\n    open('/root/.bashrc').read()\nexcept OSError as e:\n    print(type(e).__name__)")
            unmount = s.run("import os\nprint(os.system('umount /root 2>/dev/null'))")
            net = s.run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)")
            removal = s.run("import os\nos.remove('sales.csv')")
            still = s.run("print(open('sales.csv').read().count('north'))")
            detached = s.run(f"import subprocess\nsubprocess.Popen({sleeper!r}, start_new_session=True)")
            left_behind = _processes_running(sleeper)
            bomb = s.run(FORK_BOMB)
            cpu = s.run("while True:\n    pass")
    assert secrets.output == "FileNotFoundError\n"
    assert unmount.output.strip() != "0"
    assert net.error_kind == "exception" and "unreachable" in net.output
    assert removal.error_kind == "exception"
    assert still.output == "2\n"
    assert detached.ok and left_behind == []  # the pid namespace took the detached sleeper down
    assert bomb.error_kind == "timeout"
    assert cpu.error_kind == "timeout"
    _host_is_healthy()


@pytest.mark.parametrize(
    "payload", [b"\xff\xff\xff\xff" + b"x" * 64, b"\x00\x00\x00\x05[1,2]", b"\x00\x00\x00\x04\xff\xfe\xfd\xfc"]
)
def test_a_forged_or_corrupt_status_frame_cannot_crash_the_host(raw_sandbox, csv_file, payload):
    s, obs = _run(raw_sandbox, csv_file, f"import os, time\nos.write(3, {payload!r})\ntime.sleep(30)")
    assert (obs.ok, obs.error_kind) == (False, "killed")
    assert obs.duration_s < 3
    assert processes_of_uid(s.uid) == []


def test_without_a_cgroup_the_dedicated_uid_still_contains_forks_and_detached_processes(csv_file):
    if os.geteuid() != 0:
        pytest.skip("the dedicated-uid layer needs a root worker")
    limits = SandboxLimits(
        **{**TEST_LIMITS, "guard": False, "cgroup": False, "wall_s": 2.0, "isolation": "best_effort"}
    )
    with Sandbox(limits) as sb:
        assert "pids_cgroup" not in sb.layers and "rlimit_nproc" in sb.layers
        with sb.session([str(csv_file)]) as s:
            bomb = s.run(FORK_BOMB)
            assert processes_of_uid(s.uid) == []
            detached = s.run("import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)")
            assert detached.ok
            assert processes_of_uid(s.uid) == []
    assert bomb.error_kind == "timeout"
    _host_is_healthy()
