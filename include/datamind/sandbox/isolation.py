"""Kernel isolation primitives used by the zygote (Linux only; everything via ctypes, no binaries).

Two modes, chosen once per zygote:
- ``root``: the zygote (uid 0) enters new mount + network namespaces; every cell then drops to a
  dedicated unprivileged uid, so file permissions keep it away from root's files and other trajectories.
- ``userns``: for non-root Airflow workers; the zygote enters user + mount + network namespaces and each
  cell drops all capabilities, so it can neither undo the mounts nor reach the network.
In both modes host paths that must stay secret (data root, AIRFLOW_HOME, $HOME, the project) are covered
with empty read-only tmpfs mounts, and only what Python needs (its prefixes, site-packages) plus the
sandbox working directories are bound back in.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import time
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
_KEEP_FLAGS = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # + noatime/nodiratime/relatime
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
# Writable scratch areas every process can reach; inside the sandbox each becomes a private tmpfs.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
NOBODY = 65534

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl {option}")


def drop_all_capabilities() -> None:
    """capset(2) with empty sets: a namespace-root cell can no longer unmount or reconfigure anything."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _traversal_blocker(path: str) -> str | None:
    """First proper ancestor of `path` that others cannot enter (e.g. /root, mode 0700)."""
    current = Path("/")
    for part in Path(path).parts[1:-1]:
        current = current / part
        try:
            mode = current.stat().st_mode
        except OSError:
            return None
        if current.is_dir() and not mode & 0o001:
            return str(current)
    return None


def enter_namespaces(mode: str) -> tuple[list[str], int | None]:
    """Enter fresh namespaces in the (still single-threaded) zygote.

    Returns the layers obtained and, in user-namespace mode, the uid/gid *inside* the namespace that
    cells switch to (None: cells stay namespace-root with no capabilities). An unprivileged worker can
    only map its own uid; a root worker asked for this mode also maps an inner uid 1 onto `nobody`, so
    its cells never act as the owner of root's files.
    """
    if mode == "root":
        unshare(CLONE_NEWNS | CLONE_NEWNET)
        cell_inner_id = None
    else:
        uid, gid = os.getuid(), os.getgid()
        if uid == 0:
            _unshare_user_with_helper(f"0 0 1\n1 {NOBODY} 1")
            cell_inner_id = 1
        else:
            unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
            Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
            cell_inner_id = None
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    return ["network_namespace", "mount_namespace"], cell_inner_id


def _unshare_user_with_helper(id_map: str) -> None:
    """A map with more than our own id must be written from the parent namespace: a forked helper does it."""
    ready_r, ready_w = os.pipe()
    parent = os.getpid()
    helper = os.fork()
    if helper == 0:
        status = 1
        try:
            os.close(ready_w)
            os.read(ready_r, 1)
            Path(f"/proc/{parent}/uid_map").write_text(id_map)
            Path(f"/proc/{parent}/gid_map").write_text(id_map)
            status = 0
        finally:
            os._exit(status)
    os.close(ready_r)
    try:
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)
    finally:
        os.write(ready_w, b"x")
        os.close(ready_w)
        _, status = os.waitpid(helper, 0)
    if status != 0:
        raise OSError(errno.EPERM, "could not write the user-namespace id map")


def hide_and_expose(
    hide: list[str], expose: list[tuple[str, bool]], *, tmp_mb: int, check_traversal: bool
) -> list[str]:
    """Cover `hide` with empty tmpfs mounts, bind `expose` (path, writable) back in. Returns notes."""
    notes: list[str] = []
    exposes = [(os.path.realpath(p), w) for p, w in expose if os.path.exists(p)]
    hides = {os.path.realpath(p) for p in hide if os.path.exists(p)} - {"/"}
    if check_traversal:  # a dropped uid must still be able to walk to Python's own files
        for path, writable in exposes:
            if writable:
                continue  # our own working directories; their modes are set by the host
            blocker = _traversal_blocker(path)
            if blocker:
                hides.add(blocker)
    scratch = {os.path.realpath(p) for p in SCRATCH_DIRS if os.path.isdir(p)}
    hides |= scratch
    outer = sorted(h for h in hides if not any(h != o and _under(h, o) for o in hides))
    needed = [(p, w) for p, w in exposes if any(_under(p, h) for h in outer)]
    handles = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p, _ in needed if os.path.isdir(p)}
    try:
        for h in outer:
            if h in scratch:
                mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_mb}m")
            else:
                mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        for path, writable in sorted(needed, key=lambda pw: len(pw[0])):
            if path not in handles:
                continue
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{handles[path]}", path, None, MS_BIND | MS_REC)
            if not writable:
                flags = os.statvfs(path).f_flag & _KEEP_FLAGS
                mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | flags)
        for h in outer:
            if h not in scratch:
                mount(None, h, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        # Hides nested inside an exposed tree (e.g. a secrets dir inside the venv) are applied last.
        for h in sorted(hides - set(outer)):
            if any(_under(h, p) for p, _ in needed):
                mount("tmpfs", h, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    finally:
        for fd in handles.values():
            os.close(fd)
    # Last, since the fd trick above needs it: /proc would show every host process' command line.
    mount("tmpfs", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555,size=4k")
    notes.append("hidden: " + ", ".join([*outer, "/proc"]))
    return notes


class PidsCgroup:
    """One pids cgroup per cell under a per-zygote parent: caps fork bombs and finds every descendant."""

    def __init__(self, base: Path):
        self.base = base
        self._n = 0

    @classmethod
    def probe(cls) -> "PidsCgroup | None":
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, controllers, rel = line.split(":", 2)
            if "pids" in controllers.split(","):
                mnt = Path("/sys/fs/cgroup/pids")
            elif controllers == "" and "pids" in _read("/sys/fs/cgroup/cgroup.controllers"):
                mnt = Path("/sys/fs/cgroup")
            else:
                continue
            parent = mnt / rel.lstrip("/")
            _sweep_dead_zygote_cgroups(parent)
            base = parent / f"datamind-sandbox-{os.getpid()}"
            try:
                base.mkdir()
                if controllers == "":
                    (base / "cgroup.subtree_control").write_text("+pids")
                return cls(base)
            except OSError:
                _rmdir(base)
        return None

    def create(self, max_procs: int) -> Path:
        self._n += 1
        path = self.base / f"cell-{self._n}"
        path.mkdir()
        (path / "pids.max").write_text(str(max_procs))
        return path

    @staticmethod
    def kill_all(path: Path) -> None:
        for _ in range(200):
            pids = [int(p) for p in _read(str(path / "cgroup.procs")).split()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.002)

    def remove(self, path: Path) -> bool:
        self.kill_all(path)
        return _rmdir(path)

    def close(self) -> None:
        for child in self.base.glob("cell-*"):
            self.remove(child)
        _rmdir(self.base)


def _sweep_dead_zygote_cgroups(parent: Path) -> None:
    """A zygote killed outright (SIGKILL, OOM killer) cannot remove its cgroups; the next one does."""
    for stale in parent.glob("datamind-sandbox-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        for cell in stale.glob("cell-*"):
            PidsCgroup.kill_all(cell)
            _rmdir(cell)
        _rmdir(stale)


def kill_uid(proc_fd: int, uid: int, rounds: int = 100) -> None:
    """SIGKILL every process running as `uid` (a dedicated per-trajectory uid, never a real account).

    `proc_fd` is the host /proc opened before the mount namespace hid it. Used when no pids cgroup is
    available: a process that called setsid() has left the cell's process group but not its uid.
    """
    for _ in range(rounds):
        found = False
        for entry in os.listdir(proc_fd):
            if not entry.isdigit():
                continue
            try:
                if os.stat(entry, dir_fd=proc_fd).st_uid != uid:
                    continue
                stat_fd = os.open(f"{entry}/stat", os.O_RDONLY, dir_fd=proc_fd)
                try:
                    state = os.read(stat_fd, 512).rsplit(b")", 1)[1].split()[0]
                finally:
                    os.close(stat_fd)
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):  # zombies are already dead; we reap them as subreaper
                found = True
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not found:
            return
        time.sleep(0.002)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _rmdir(path: Path) -> bool:
    for _ in range(50):
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return False
            time.sleep(0.002)
    return False
