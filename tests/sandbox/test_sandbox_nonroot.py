"""The sandbox started by a non-root worker, as the compose file runs Airflow (`user: 50000:0`).

The test process (root) starts a real worker process under uid 50000 that builds its own Sandbox (user
namespace mode, the only one open to it) and throws the attacks at it. The interpreter, the virtual
environment or the checkout may live under a folder other users cannot enter (/root, a Debian home: mode
0700), so the worker is given a private mount namespace in which only those folders are reachable through
it; nothing else of its view changes. Where that cannot be arranged the test skips and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from datamind.sandbox import isolation

WORKER_UID, WORKER_GID = 50000, 0

WORKER_SCRIPT = r"""
import json, os, sys
from pathlib import Path
from datamind.sandbox import Sandbox, SandboxLimits

home = Path(os.environ["HOME"])
data = home / "sales.csv"
data.write_text("region,amount\nnorth,10\nsouth,20\nnorth,5\neast,7\n")
victim = home / "airflow.cfg"  # any file the worker can write: DAGs, shards, its config
victim.write_text("[core]\nprecious = yes\n")
secret = home / ".kaggle" / "kaggle.json"
secret.parent.mkdir(exist_ok=True)
secret.write_text('{"key": "hunter2"}')
limits = SandboxLimits(guard=False, cpu_s=2, wall_s=4.0, memory_mb=1024, disk_mb=64, tmp_mb=16)
out = {"uid": os.getuid()}
with Sandbox(limits, mode="live") as sb:
    out["mode"], out["layers"] = sb.isolation_mode, sb.layers
    with sb.session([str(data)]) as a, sb.session([str(data)]) as b:
        a.run(
            "import os\n"
            f"os.symlink({str(victim)!r}, '.sales.csv.copying')\n"
            f"os.mkdir('d'); os.symlink({str(victim)!r}, 'd/l'); os.chmod('d', 0o500)\n"
            "open('/tmp/a-was-here', 'w').write('x')"
        )
        a.run("import os\nos.remove('sales.csv')")
        out["a_data"] = a.run("print(open('sales.csv').read().count('north'))").output
        out["b_probe"] = b.run(
            "import os\nprint(sorted(os.listdir('/tmp')), sorted(os.listdir('..')))\n"
            f"for p in [{str(secret)!r}, {str(victim)!r}, {str(a.workdir / 'd')!r}]:\n"
            "    print(p, os.path.exists(p))"
        ).output
        out["quota"] = b.run("open('big', 'wb').write(b'0' * (100 << 20))").output
        out["unmount"] = b.run("import ctypes\nprint(ctypes.CDLL(None).umount2(b'/proc', 2))").output
        out["a_name"] = a.workdir.name
out["victim"] = victim.read_text()
out["victim_mode"] = oct(victim.stat().st_mode & 0o777)
print(json.dumps(out))
"""


def _traversal_blocker(path: str) -> str | None:
    current = Path("/")
    for part in Path(path).parts[1:]:
        current = current / part
        if current.is_dir() and not current.stat().st_mode & 0o001:
            return str(current)
    return None


def _become_worker(view: dict[str, list[str]]) -> None:
    """preexec: a private mount namespace where, through each folder uid 50000 cannot enter, only the
    folders the worker needs show (``view``: closed folder -> those folders)."""
    isolation.unshare(isolation.CLONE_NEWNS)
    isolation.mount(None, "/", None, isolation.MS_REC | isolation.MS_PRIVATE)
    staged = []
    for folder in (f for folders in view.values() for f in folders):
        staging = tempfile.mkdtemp(prefix="nonroot-py-")
        isolation.mount(folder, staging, None, isolation.MS_BIND | isolation.MS_REC)
        staged.append((staging, folder))
    for blocker in view:
        isolation.mount("tmpfs", blocker, "tmpfs", 0, "mode=0755,size=1m")
    for staging, folder in staged:
        os.makedirs(folder, exist_ok=True)
        isolation.mount(staging, folder, None, 8192)  # MS_MOVE
    os.setgroups([])
    os.setresgid(WORKER_GID, WORKER_GID, WORKER_GID)
    os.setresuid(WORKER_UID, WORKER_UID, WORKER_UID)


def _worker_view() -> dict[str, list[str]]:
    """Each folder uid 50000 cannot enter on the way to what the worker needs (the interpreter, the virtual
    environment, the checkout's package), with the folders below it that lead there. Skips when a second
    closed folder lies below the first (a bind mount keeps it closed) or closed folders nest."""
    import datamind

    needed = [
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.realpath(sys.prefix),
        sys.prefix,
        os.path.dirname(os.path.realpath(datamind.__file__)),
    ]
    view: dict[str, set[str]] = {}
    for p in needed:
        blocker = _traversal_blocker(p)
        if blocker is None:
            continue
        current = Path(blocker)
        for part in Path(p).relative_to(blocker).parts:  # a closed folder further down stays closed
            current = current / part
            if current.is_dir() and not current.stat().st_mode & 0o001:
                pytest.skip(f"{p} sits behind two folders uid {WORKER_UID} cannot enter: {blocker}, {current}")
        view.setdefault(blocker, set()).add(str(Path(blocker) / Path(p).relative_to(blocker).parts[0]))
    if any(a != b and a.startswith(b + "/") for a in view for b in view):
        pytest.skip(f"closed folders nest: {sorted(view)}")
    return {blocker: sorted(folders) for blocker, folders in view.items()}


@pytest.fixture()
def worker_home():
    home = Path(tempfile.mkdtemp(prefix="datamind-worker-home-"))  # pytest's tmp_path is root-only (0700)
    os.chown(home, WORKER_UID, WORKER_GID)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_a_non_root_worker_sandbox_contains_the_attacks(worker_home):
    if os.geteuid() != 0:
        pytest.skip("the test starts the non-root worker from a root process")
    home = worker_home
    view = _worker_view()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    proc = subprocess.run(
        [sys.executable, "-c", WORKER_SCRIPT],
        env=env,
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: _become_worker(view),
    )
    if proc.returncode != 0 and "user namespace" in proc.stderr.lower():
        pytest.skip(f"this host refuses unprivileged user namespaces: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["uid"] == WORKER_UID and out["mode"] == "userns"
    assert {
        "allowlisted_root",
        "private_cell_mounts",
        "ipc_namespace",
        "pid_namespace",
        "user_namespace_no_caps",
    } <= set(out["layers"])
    assert out["a_data"] == "2\n"
    listing, *exists = out["b_probe"].splitlines()
    assert "a-was-here" not in listing and out["a_name"] not in listing, listing
    assert len(exists) == 3 and all(line.endswith(" False") for line in exists), exists
    assert "No space left on device" in out["quota"]
    assert out["unmount"].strip() != "0"
    # The planted links were never followed: the worker's own writable file kept its content and mode.
    assert out["victim"] == "[core]\nprecious = yes\n" and out["victim_mode"] == "0o644"
