"""One cgroup per sandbox session: its memory (page cache, tmpfs and memfd pages included) and its
processes are bounded together, and every process it started, however deep, can be found and killed.

Works on cgroup v2 (``memory.max``, ``memory.swap.max``, ``pids.max``, ``cgroup.kill``) and on v1
hierarchies (``memory.limit_in_bytes`` + ``memory.memsw.limit_in_bytes``, ``pids.max``), under the cgroup
this process already belongs to: a root worker, or a worker given a delegated subtree (systemd's
``Delegate=yes``, a container runtime's writable cgroup). Every operation goes through a descriptor of the
per-zygote parent opened at probe time: the zygote later pivots into a root with no /sys at all.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from datamind.sandbox.isolation import kill_until_gone

CONTROLLERS = ("memory", "pids")
_PREFIX = "datamind-sandbox-"


@dataclass
class _Hierarchy:
    version: int  # 1 or 2
    controllers: frozenset[str]
    base: Path  # the per-zygote parent
    fd: int
    parent_fd: int  # the folder holding ``base``: removing it needs no path (the zygote's root has no /sys)


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root inside the hierarchy, fs type, controllers) of every cgroup mount we can see."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        opts = set(tail[2].split(","))
        found.append((point, fields[3], tail[0], opts))
    return found


def _own_paths() -> dict[str, str]:
    """hierarchy key ("" for v2, else its controller list) -> this process's path in it."""
    paths = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, rel = line.split(":", 2)
            paths[ctrls] = rel
    except (OSError, ValueError):
        pass
    return paths


def _under_mount(point: str, mount_root: str, own: str) -> Path | None:
    if mount_root != "/" and not (own == mount_root or own.startswith(mount_root.rstrip("/") + "/")):
        return None
    rel = own[len(mount_root) :] if mount_root != "/" else own
    return Path(point) / rel.lstrip("/")


def own_cgroups() -> list[tuple[int, frozenset[str], Path]]:
    """(version, usable controllers, folder) of each hierarchy where this process has memory or pids."""
    own = _own_paths()
    out: list[tuple[int, frozenset[str], Path]] = []
    for point, root, fstype, opts in _mounts():
        if fstype == "cgroup2":
            if "" not in own:
                continue
            where = _under_mount(point, root, own[""])
            if where is None:
                continue
            available = set(_read(where / "cgroup.controllers").split())
            wanted = frozenset(c for c in CONTROLLERS if c in available)
            if wanted:
                out.append((2, wanted, where))
            continue
        for key, rel in own.items():
            ctrls = set(key.split(",")) if key else set()
            wanted = frozenset(c for c in CONTROLLERS if c in ctrls and c in opts)
            if wanted:
                where = _under_mount(point, root, rel)
                if where is not None:
                    out.append((1, wanted, where))
    return out


class SessionCgroups:
    """Session cgroups ``s-<id>`` under ``datamind-sandbox-<zygote pid>`` in each usable hierarchy."""

    def __init__(self, hierarchies: list[_Hierarchy]) -> None:
        self.hierarchies = hierarchies
        self.controllers = frozenset().union(*(h.controllers for h in hierarchies))
        self._oom_seen: dict[str, int] = {}

    @classmethod
    def probe(cls) -> SessionCgroups | None:
        """The memory and pids controllers we may use, each in the first hierarchy that lets us create a
        child; None when neither is usable."""
        taken: set[str] = set()
        hierarchies: list[_Hierarchy] = []
        for version, controllers, parent in own_cgroups():
            wanted = controllers - taken
            if not wanted:
                continue
            _sweep_dead_zygotes(parent)
            base = parent / f"{_PREFIX}{os.getpid()}"
            try:
                if version == 2:
                    _enable(parent, wanted)
                base.mkdir()
                if version == 2:
                    _enable(base, wanted)
                fds = os.open(base, os.O_DIRECTORY), os.open(parent, os.O_DIRECTORY)
                hierarchies.append(_Hierarchy(version, frozenset(wanted), base, *fds))
                taken |= wanted
            except OSError:
                _rmdir(str(base))
        return cls(hierarchies) if hierarchies else None

    # -- sessions -------------------------------------------------------------------------------------
    def create(self, sid: str, *, memory_bytes: int, max_procs: int) -> None:
        for h in self.hierarchies:
            try:
                os.mkdir(sid, dir_fd=h.fd)
            except FileExistsError:
                continue
            if "pids" in h.controllers:
                _write_at(h.fd, f"{sid}/pids.max", str(max_procs))
            if "memory" in h.controllers:
                if h.version == 2:
                    _write_at(h.fd, f"{sid}/memory.max", str(memory_bytes))
                    _write_at(h.fd, f"{sid}/memory.swap.max", "0", optional=True)
                else:
                    _write_at(h.fd, f"{sid}/memory.limit_in_bytes", str(memory_bytes))
                    _write_at(h.fd, f"{sid}/memory.memsw.limit_in_bytes", str(memory_bytes), optional=True)
        self._oom_seen[sid] = self._oom_count(sid)

    def join(self, sid: str) -> None:
        """Move the calling process into the session (called by the freshly forked cell itself)."""
        for h in self.hierarchies:
            _write_at(h.fd, f"{sid}/cgroup.procs", str(os.getpid()))

    def members(self, sid: str) -> set[int]:
        h = self.hierarchies[0]
        return {int(p) for p in _read_at(h.fd, f"{sid}/cgroup.procs").split()}

    def kill(self, sid: str, keep: frozenset[int] = frozenset()) -> int:
        """SIGKILL every process of the session except ``keep``; returns how many were killed."""
        return kill_until_gone(lambda: self.members(sid), keep, rounds=500, pause_s=0.001)

    def oom_kills(self, sid: str) -> int:
        """Processes the kernel killed for the session's memory limit since the last call."""
        now = self._oom_count(sid)
        before = self._oom_seen.get(sid, now)
        self._oom_seen[sid] = now
        return max(0, now - before)

    def peak_bytes(self, sid: str) -> int | None:
        """The most memory the session has held at once (None where the kernel does not keep the figure)."""
        for h in self.hierarchies:
            if "memory" in h.controllers:
                raw = _read_at(h.fd, f"{sid}/{'memory.peak' if h.version == 2 else 'memory.max_usage_in_bytes'}")
                return int(raw) if raw.strip().isdigit() else None
        return None

    def _oom_count(self, sid: str) -> int:
        for h in self.hierarchies:
            if "memory" in h.controllers:
                name = "memory.events" if h.version == 2 else "memory.oom_control"
                for line in _read_at(h.fd, f"{sid}/{name}").splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
        return 0

    def remove(self, sid: str) -> None:
        self.kill(sid)
        self._oom_seen.pop(sid, None)
        for h in self.hierarchies:
            _rmdir(sid, h.fd)

    def close(self) -> None:
        for h in self.hierarchies:
            for child in os.listdir(h.fd):
                if child.startswith("s-"):
                    self.remove(child)
        for h in self.hierarchies:
            os.close(h.fd)
            _rmdir(h.base.name, h.parent_fd)
            os.close(h.parent_fd)


def _enable(cgroup: Path, controllers: frozenset[str]) -> None:
    have = set(_read(cgroup / "cgroup.subtree_control").split())
    missing = [c for c in sorted(controllers) if c not in have]
    if missing:
        (cgroup / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))


def _sweep_dead_zygotes(parent: Path) -> None:
    """A zygote killed outright (SIGKILL, OOM killer) cannot remove its cgroups; the next one does."""
    try:
        stale_dirs = list(parent.glob(f"{_PREFIX}*"))
    except OSError:
        return
    for stale in stale_dirs:
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        for session in stale.glob("s-*"):
            kill_until_gone(lambda s=session: {int(p) for p in _read(s / "cgroup.procs").split()}, rounds=200)
            _rmdir(str(session))
        _rmdir(str(stale))


def _write_at(dir_fd: int, rel: str, text: str, *, optional: bool = False) -> None:
    try:
        fd = os.open(rel, os.O_WRONLY, dir_fd=dir_fd)
    except FileNotFoundError:
        if optional:  # memsw / swap files exist only where the kernel accounts swap
            return
        raise
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read_at(dir_fd: int, rel: str) -> str:
    try:
        fd = os.open(rel, os.O_RDONLY, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        return os.read(fd, 1 << 20).decode()
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _rmdir(name: str, dir_fd: int | None = None) -> bool:
    """Remove a cgroup folder (``name`` relative to ``dir_fd``, or a path), waiting while the kernel still
    counts a dying process in it (EBUSY)."""
    for _ in range(100):
        try:
            os.rmdir(name, dir_fd=dir_fd)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return False
            time.sleep(0.002)
    return False
