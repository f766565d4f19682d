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
import uuid
from pathlib import Path

import attacks_round3
import attacks_round4
import pytest

from datamind.sandbox import isolation
from datamind.sandbox.cgroups import own_cgroups

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
out["round3"] = probe(Sandbox, SandboxLimits, str(data))
out["round4"] = round4.probe(Sandbox, SandboxLimits, str(data))
print(json.dumps(out))
"""


def _traversal_blocker(path: str) -> str | None:
    current = Path("/")
    for part in Path(path).parts[1:]:
        current = current / part
        if current.is_dir() and not current.stat().st_mode & 0o001:
            return str(current)
    return None


def _become_worker(view: dict[str, list[str]], cgroups: list[Path]) -> None:
    """preexec: join the cgroups delegated to the worker, then a private mount namespace where, through
    each folder uid 50000 cannot enter, only the folders the worker needs show (``view``: closed folder ->
    those folders)."""
    for folder in cgroups:
        (folder / "cgroup.procs").write_text(str(os.getpid()))
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
        os.rmdir(staging)  # no longer a mount point here: the empty folder it was in /tmp goes
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
def delegated_cgroups():
    """A cgroup of its own in each hierarchy, owned by the worker's uid: what systemd's Delegate=yes or a
    container runtime gives a service, and what the sandbox needs to bound each session."""
    made = []
    for _version, _controllers, parent in own_cgroups():
        folder = parent / f"datamind-worker-{uuid.uuid4().hex[:8]}"
        try:
            folder.mkdir()
        except OSError:
            continue
        made.append(folder)
        for name in ("", "cgroup.procs", "tasks", "cgroup.subtree_control", "cgroup.threads"):
            if (folder / name).exists():
                os.chown(folder / name, WORKER_UID, WORKER_GID)
    yield made
    for folder in made:  # the sandbox removed its own session cgroups; sweep what a failed run left
        for sub in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
            if sub.is_dir():
                sub.rmdir()
        folder.rmdir()


@pytest.fixture()
def worker_home():
    home = Path(tempfile.mkdtemp(prefix="datamind-worker-home-"))  # pytest's tmp_path is root-only (0700)
    os.chown(home, WORKER_UID, WORKER_GID)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_a_non_root_worker_sandbox_contains_the_attacks(worker_home, delegated_cgroups):
    if os.geteuid() != 0:
        pytest.skip("the test starts the non-root worker from a root process")
    if not delegated_cgroups:
        pytest.skip("this host gives no memory or pids cgroup that could be delegated to the worker")
    home = worker_home
    view = _worker_view()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    proc = subprocess.run(
        [sys.executable, "-c", Path(attacks_round3.__file__).read_text() + _round4_module() + WORKER_SCRIPT],
        env=env,
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: _become_worker(view, delegated_cgroups),
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
        "cell_network_namespace",
        "pid_namespace",
        "user_namespace_no_caps",
        "memory_cgroup",
        "pids_cgroup",
        "seccomp_filter",
    } <= set(out["layers"])
    assert out["a_data"] == "2\n"
    listing, *exists = out["b_probe"].splitlines()
    assert "a-was-here" not in listing and out["a_name"] not in listing, listing
    assert len(exists) == 3 and all(line.endswith(" False") for line in exists), exists
    assert "No space left on device" in out["quota"]
    assert out["unmount"].strip() != "0"
    # The planted links were never followed: the worker's own writable file kept its content and mode.
    assert out["victim"] == "[core]\nprecious = yes\n" and out["victim_mode"] == "0o644"
    print(f"\nround 3 [uid {WORKER_UID}]: memfd {out['round3']['memfd']}, forks {out['round3']['forks']}")
    for name, ok in attacks_round3.verdicts(out["round3"]).items():
        assert ok, f"uid {WORKER_UID}: {name}: {out['round3']}"
    # Here the worker itself shares the uid every cell's kernel objects are counted under.
    print(f"round 4 [uid {WORKER_UID}]: {out['round4']}")
    for name, ok in attacks_round4.verdicts(out["round4"]).items():
        assert ok is not False, f"uid {WORKER_UID}: {name}: {out['round4']}"


def _round4_module() -> str:
    """Code defining ``round4``, attacks_round4 as a module of its own (pasted in like round 3, its names
    would clash with round 3's)."""
    source = Path(attacks_round4.__file__).read_text()
    return (
        "\nimport types as _types\nround4 = _types.ModuleType('attacks_round4')\n"
        f"exec(compile({source!r}, 'attacks_round4.py', 'exec'), round4.__dict__)\n"
    )
