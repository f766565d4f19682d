"""Kernel isolation primitives used by the zygote (Linux only; everything via ctypes, no binaries).

Two modes, chosen once per zygote:
- ``root``: the zygote (uid 0) enters new mount + network namespaces; every cell then drops to a
  dedicated unprivileged uid, so file permissions keep it away from root's files and other trajectories.
- ``userns``: for non-root Airflow workers; the zygote enters user + mount + network namespaces and each
  cell drops all capabilities, so it can neither undo the mounts nor reach the network.
In both modes the zygote then pivots into a fresh root holding only an allow-list: the OS's programs and
libraries and a few /etc files (read-only), the Python runtime (read-only, without the project's packages)
and the sandbox working directories; credentials, the project, the data root, /proc and /sys do not exist
inside. Each cell then gets its own mount, IPC and network namespaces (``private_cell_view``): private
scratch, a size-capped workspace whose inputs are read-only bind mounts, nothing of other trajectories.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import time
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41}
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "arm64": 219}
# open_tree / move_mount (Linux 5.2+) have the same numbers on every architecture (the unified table).
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT = 428, 429
_OPEN_TREE_CLONE, _AT_RECURSIVE, _MOVE_MOUNT_F_EMPTY_PATH, _AT_FDCWD = 1, 0x8000, 0x4, -100
_KEEP_FLAGS = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # + noatime/nodiratime/relatime
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
# Writable scratch areas every process can reach; inside the sandbox each becomes a private tmpfs.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
# The read-only runtime of the allow-listed root (plus the Python prefixes, added by the zygote).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "passwd", "group", "nsswitch.conf", "hosts", "localtime", "timezone", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "fonts", "mime.types", "locale.alias", "os-release", "alternatives", "ssl",
)  # fmt: skip
DEVICES = ("null", "zero", "full", "random", "urandom")
CELL_STAGING = "/proc"  # always empty inside: a cell briefly binds the host's copies of its inputs there
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


KEYCTL_JOIN_SESSION_KEYRING = 1


def join_fresh_session_keyring() -> None:
    """An anonymous session keyring of the cell's own: the worker's (a container runtime often gives
    one) is no longer reachable, and the new one dies with the cell's last process."""
    number = _SYS_KEYCTL.get(platform.machine(), -1)
    ret = _libc.syscall(ctypes.c_long(number), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), ctypes.c_void_p(None))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"keyctl join session keyring: {os.strerror(err)}")


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


def _bind(src: str, target: str, writable: bool) -> None:
    # A writable tree (the working root) is bound without its submounts: the new root itself sits there.
    mount(src, target, None, MS_BIND if writable else MS_BIND | MS_REC)
    if not writable:
        # In a user namespace the source's locked flags (nosuid, nodev, noexec...) must be kept.
        flags = os.statvfs(target).f_flag & _KEEP_FLAGS
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | flags)


def _mount_point(target: str, like: str) -> None:
    """An empty directory or file at ``target`` to bind ``like`` onto."""
    if os.path.isdir(like):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))


def runtime_allow_list() -> list[str]:
    """System paths every cell sees read-only: the OS's programs and libraries and a few harmless /etc files."""
    system = [p for p in SYSTEM_DIRS if os.path.lexists(p)]
    etc = [os.path.join("/etc", name) for name in ETC_FILES if os.path.lexists(os.path.join("/etc", name))]
    return system + etc


def build_root(new_root: str, allow: list[tuple[str, bool]], hide: list[str], *, tmp_mb: int) -> list[str]:
    """Switch this process (already in its own mount namespace) to a fresh root that holds only ``allow``.

    ``allow``: (path, writable) pairs bound at their own paths; a top-level symlink such as ``/bin ->
    usr/bin`` is recreated as a link. Everything else of the host (other users' files, credentials,
    the project, the data root, /proc, /sys, /run) simply does not exist inside. ``hide`` paths nested in
    an allowed tree (e.g. a secrets folder inside a virtualenv) are covered with empty read-only tmpfs.
    The scratch directories become private tmpfs, /dev holds only the harmless character devices, and the
    root itself is read-only. Returns notes for the sandbox's report.
    """
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    for scratch in SCRATCH_DIRS:
        if scratch.startswith("/dev/"):
            continue  # made with /dev below
        target = new_root + scratch
        os.makedirs(target, mode=0o755, exist_ok=True)
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_mb}m")
    _populate_dev(new_root, tmp_mb)
    bound: list[tuple[str, bool]] = []
    for path, writable in sorted({(os.path.abspath(p), w) for p, w in allow if os.path.lexists(p)}):
        if any(_under(path, b) and (bw or not writable) for b, bw in bound):
            continue  # already visible through an allowed parent with at least these rights
        target = new_root + path
        if os.path.islink(path) and os.path.dirname(path) == "/":
            if not os.path.lexists(target):
                os.symlink(os.readlink(path), target)
            continue
        real = os.path.realpath(path)
        _mount_point(target, real)
        _bind(real, target, writable)
        bound.append((path, writable))
    # Read-only trees bound inside a scratch directory (a virtualenv under /tmp) must survive the fresh tmpfs
    # each cell gets there: private_cell_view carries them over.
    _READONLY_UNDER_SCRATCH[:] = [
        p for p, w in bound if not w and any(_under(p, sc) and p != sc for sc in SCRATCH_DIRS)
    ]
    hidden = []
    for h in sorted({os.path.realpath(p) for p in hide if os.path.exists(p)}):
        if os.path.isdir(h) and any(_under(h, b) for b, _ in bound) and not any(_under(b, h) for b, _ in bound):
            mount("tmpfs", new_root + h, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755,size=4k")
            hidden.append(h)
    os.makedirs(new_root + "/proc", mode=0o555, exist_ok=True)  # empty: no host process is visible
    mount(None, new_root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    # pivot_root(".", ".") stacks the old root on top of the new one; detaching it leaves no trace inside.
    os.chdir(new_root)
    pivot_root(".", ".")
    umount(".")
    os.chdir("/")
    return [f"root: {len(bound)} allowed paths ({', '.join(p for p, _ in bound)})"] + (
        [f"hidden inside allowed trees: {', '.join(hidden)}"] if hidden else []
    )


_READONLY_UNDER_SCRATCH: list[str] = []


def _clone_tree(path: str) -> int:
    """A detached copy of the mount tree at ``path`` (its read-only flags and submounts included), as an fd."""
    fd = _libc.syscall(
        ctypes.c_long(_SYS_OPEN_TREE),
        ctypes.c_long(_AT_FDCWD),
        path.encode(),
        ctypes.c_ulong(_OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_RECURSIVE),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"open_tree {path}: {os.strerror(err)}")
    return fd


def _attach_tree(fd: int, target: str) -> None:
    ret = _libc.syscall(
        ctypes.c_long(_SYS_MOVE_MOUNT),
        ctypes.c_long(fd),
        b"",
        ctypes.c_long(_AT_FDCWD),
        target.encode(),
        ctypes.c_ulong(_MOVE_MOUNT_F_EMPTY_PATH),
    )
    _check(ret, f"move_mount {target}")


def _cover_scratch(scratch: str, tmp_mb: int) -> None:
    """A fresh tmpfs over ``scratch``, with the read-only runtime trees that lived inside it put back."""
    keep = [p for p in _READONLY_UNDER_SCRATCH if _under(p, scratch) and os.path.isdir(p)]
    trees = [(p, _clone_tree(p)) for p in keep]
    try:
        mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_mb}m")
        for path, fd in trees:
            os.makedirs(path, mode=0o755, exist_ok=True)
            _attach_tree(fd, path)
    finally:
        for _, fd in trees:
            os.close(fd)


def _populate_dev(new_root: str, tmp_mb: int) -> None:
    dev = new_root + "/dev"
    os.makedirs(dev, mode=0o755, exist_ok=True)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _mount_point(f"{dev}/{name}", f"/dev/{name}")
            mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    for scratch in ("/dev/shm", "/dev/mqueue"):
        os.makedirs(new_root + scratch, mode=0o755, exist_ok=True)
        mount("tmpfs", new_root + scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_mb}m")
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{dev}/{link}")


def private_cell_view(workdir: str, *, tmp_mb: int, disk_mb: int, owner_gid: int | None) -> None:
    """Give this freshly forked cell its own mount, IPC and network namespaces (called before it drops
    privileges).

    Inside: fresh scratch tmpfs (/tmp, /var/tmp, /dev/shm...), and the workspace's parent covered by a
    tmpfs of ``disk_mb`` (the session's disk quota) holding only this cell's workspace, whose inputs are
    read-only bind mounts of the host's copies. Other trajectories' workspaces, files left in scratch by
    earlier cells, SysV/POSIX IPC objects and abstract unix sockets of anyone else are out of reach;
    everything the cell writes dies with its namespaces when it ends.
    """
    unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount(workdir, CELL_STAGING, None, MS_BIND)  # the host's copies, before the parent is covered
    for scratch in SCRATCH_DIRS:
        if os.path.isdir(scratch):
            _cover_scratch(scratch, tmp_mb)
    parent = os.path.dirname(workdir)
    os.makedirs(parent, mode=0o711, exist_ok=True)  # recreated when a fresh /tmp covered it
    mount("tmpfs", parent, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0711,size={disk_mb}m")
    os.mkdir(workdir, 0o700)
    if owner_gid is not None:  # the cell's uid/gid may create files; the sticky bit guards the inputs
        os.chown(workdir, 0, owner_gid)
        os.chmod(workdir, 0o1770)
    for entry in os.scandir(CELL_STAGING):
        if entry.is_file(follow_symlinks=False):
            target = os.path.join(workdir, entry.name)
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444))
            _bind(entry.path, target, writable=False)
    umount(CELL_STAGING)


def umount(target: str) -> None:
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(_libc.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")


def uid_processes(proc_fd: int, uid: int) -> set[int]:
    """Live processes running as ``uid`` (zombies are already dead; we reap them as subreaper).

    ``proc_fd`` is the host /proc opened before the mount namespace hid it."""
    found = set()
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
        if state not in (b"Z", b"X"):
            found.add(int(entry))
    return found


def kill_until_gone(members, keep: frozenset[int] = frozenset(), rounds: int = 100, pause_s: float = 0.002) -> int:
    """SIGKILL every pid ``members()`` lists, except ``keep``, round after round until none is left, so a
    process forking while it dies cannot leave a child behind; returns how many were killed."""
    killed: set[int] = set()
    for _ in range(rounds):
        targets = set(members()) - keep
        if not targets:
            break
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(pause_s)
    return len(killed)


def kill_uid(proc_fd: int, uid: int, rounds: int = 100, keep: frozenset[int] = frozenset()) -> int:
    """SIGKILL every process running as ``uid`` (a dedicated per-trajectory uid, never a real account)
    except ``keep``; returns how many were killed. Used when no cgroup is available: a process that
    called setsid() has left the cell's process group but not its uid."""
    return kill_until_gone(lambda: uid_processes(proc_fd, uid), keep, rounds)
