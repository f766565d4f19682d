"""The zygote: a separate Python process that imports pandas/numpy once and forks one child per cell.

It is started as a fresh interpreter (``python -I -c "...zygote_main(fd)"``), never forked from the
Airflow worker, whose threads make forking unsafe, and talks to its owner over a SOCK_SEQPACKET socket:

    host -> zygote  {"op": "spawn", "id", "session", "workdir", "uid", "gid", "kind", "language", "db_path",
                    "limits"} + two fds (the cell's output socket and control socket),
                    {"op": "kill", "id", "pid"}, {"op": "pin", "id", "pid"}, {"op": "end_turn", "id", "pid"},
                    {"op": "close_session", "id", "session"}, {"op": "warm", "id", "modules"}
    zygote -> host  {"event": "ready", "layers", "notes"}, {"event": "spawned", "id", "pid"},
                    {"event": "failed", "id", "error"}, {"event": "done", "id", ...} (end_turn's with
                    "killed" and "oom_kills"),
                    {"event": "exit", "pid", "status", "maxrss_kb", "cpu_s", "oom_kills"}

A session (one trajectory) has one cgroup: memory and processes of all its cells, in both modes, bounded
together. ``pin`` records the processes a live interpreter consists of once it is set up; ``end_turn``
kills every other process of its session, so nothing a turn started outlives it.

Namespaces are entered before anything is imported (unshare(CLONE_NEWUSER) demands a single thread).

Each cell is confined in this order: own session/process group, its session's cgroup, stdio onto the
host's sockets and every other fd closed, its own mount, IPC and network namespaces, cwd = its
workspace, rlimits, per-cell pid namespace (user-namespace mode), then the dedicated uid (root) or dropped
capabilities, a fresh session keyring, no_new_privs and the seccomp filter. Only then does it tell the
host it is ready: a failure before that point is the platform's, never the agent's.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field

from datamind.sandbox import isolation, seccomp, warmup  # stdlib + ctypes only: safe before unshare()
from datamind.sandbox.cgroups import SessionCgroups
from datamind.sandbox.limits import SandboxUnavailable

_MAX_MSG = 1 << 16
# The environment of the zygote and every cell. Thread pools would make fork() unsafe and multiply the pids
# a cell needs.
CELL_RUNTIME_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_MAX_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "POLARS_MAX_THREADS": "1",
    "ARROW_NUM_THREADS": "1",
    # Allocators that reserve address space they may never touch would spend the RLIMIT_AS meant for the
    # cell's data: pyarrow's mimalloc pool reserves ~1 GB at first use, and every thread that mallocs gets a
    # 64 MB glibc arena. Measured: pandas + polars (from_pandas, one query) + duckdb map 2.7 GB, 0.7 GB with these.
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "MALLOC_ARENA_MAX": "2",
}


# ----------------------------------------------------------------------------------------- zygote
def _send(sock: socket.socket, obj: dict) -> None:
    sock.send(json.dumps(obj).encode())


def zygote_main(fd: int) -> None:
    ctl = socket.socket(fileno=fd)
    config = json.loads(ctl.recv(_MAX_MSG))

    # No PDEATHSIG here: it fires when the *thread* that started us exits. Host death is seen as EOF
    # on the control socket instead, and then every cell is killed.
    isolation.prctl(isolation.PR_SET_CHILD_SUBREAPER, 1)  # orphaned grandchildren come back to us
    layers, notes = [], []
    mode = config["mode"]
    cell_inner_id = None
    # Both need the host's /proc and /sys, which the new root does not have.
    cgroups = SessionCgroups.probe() if config["cgroup"] else None
    proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY) if mode == "root" else None
    statm_fd = os.open("/proc/self/statm", os.O_RDONLY)  # our own size, read again after each warm import
    # What cells run must be imported before the pivot: the project's folder is not in the new root.
    import datamind.sandbox.cell  # noqa: F401
    import datamind.sandbox.sqltools  # noqa: F401

    private_root = False
    try:
        obtained, cell_inner_id = isolation.enter_namespaces(mode)
        layers += obtained
        runtime, project_dirs = _python_runtime()
        allow = [(p, False) for p in [*isolation.runtime_allow_list(), *runtime]]
        allow += [tuple(e) for e in config["expose"]]
        new_root = os.path.join(config["workdir_root"], ".root")
        os.makedirs(new_root, mode=0o700, exist_ok=True)
        notes += isolation.build_root(new_root, allow, [*config["hide"], *project_dirs], tmp_mb=config["tmp_mb"])
        layers.append("allowlisted_root")
        private_root = True
    except OSError as exc:
        import traceback

        if "network_namespace" in layers:  # namespaces entered, but no allow-listed root: nothing is hidden
            layers.remove("mount_namespace")
        notes.append(f"isolation incomplete: {exc}: {traceback.format_exc(limit=3)}")
    if mode == "root":
        layers.append("dedicated_uid")
    elif "network_namespace" in layers:  # only true once the user namespace was actually entered
        layers.append("user_namespace_no_caps")
    if cgroups is not None:
        layers += [f"{c}_cgroup" for c in sorted(cgroups.controllers)]
    if mode == "root":  # RLIMIT_NPROC counts per uid: per session only where each session has its own
        layers.append("rlimit_nproc")
    layers += ["rlimits", "process_group_kill", "no_new_privs", "session_keyring"]
    if private_root:
        layers += ["private_cell_mounts", "ipc_namespace", "cell_network_namespace", "disk_quota"]
    use_seccomp = seccomp.supported() and _seccomp_works()
    if use_seccomp:
        layers.append("seccomp_filter")
    # A per-cell pid namespace: a cell sees and signals only its own processes, and when its init exits the
    # kernel kills everything left inside (detached descendants included). Root mode has that from the
    # dedicated uid (nothing else runs as it) and the cgroup or uid sweep, and skips the namespace's
    # teardown (~20 ms per cell while the cgroup waits for it).
    use_pidns = mode != "root" and "network_namespace" in layers and _pid_namespace_works()
    if use_pidns:
        layers.append("pid_namespace")
    for name in config["preload"]:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            notes.append(f"preload {name} failed: {exc}")
    if "pandas" in sys.modules:
        try:
            warmup.exercise()
        except Exception as exc:  # noqa: BLE001 - cells then pay the first use themselves, as before
            notes.append(f"warm-up failed: {type(exc).__name__}: {exc}")
    _freeze_heap()
    cell_gid = isolation.NOBODY if cell_inner_id is not None else None
    _send(ctl, {"event": "ready", "layers": layers, "notes": notes, "pid": os.getpid(), "cell_gid": cell_gid})
    zygote = _Zygote(ctl, mode, cgroups, cell_inner_id, proc_fd, use_pidns, private_root, use_seccomp)
    zygote.warm_allowed = frozenset(config.get("warm_on_demand", ()))
    zygote.statm_fd = statm_fd
    zygote.base_vm = _address_space(statm_fd)
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        zygote.loop()
    finally:
        zygote.shutdown()
        if cgroups is not None:
            cgroups.close()
    os._exit(0)


def _raise_exit(*_args) -> None:
    raise SystemExit(0)


class _Zygote:
    def __init__(
        self,
        ctl: socket.socket,
        mode: str,
        cgroups: SessionCgroups | None,
        cell_inner_id: int | None,
        proc_fd: int | None,
        use_pidns: bool,
        private_view: bool,
        use_seccomp: bool,
    ) -> None:
        self.ctl, self.mode, self.cgroups, self.cell_inner_id = ctl, mode, cgroups, cell_inner_id
        self.use_pidns, self.private_view, self.use_seccomp = use_pidns, private_view, use_seccomp
        self.proc_fd = proc_fd
        self.children: dict[int, str] = {}  # pid -> its session
        self.uids: dict[int, int] = {}  # pid -> dedicated uid (root mode)
        self.keep: dict[int, frozenset[int]] = {}  # live interpreter -> the processes it consists of
        self.sessions: set[str] = set()
        self.warm_allowed: frozenset[str] = frozenset()
        self.statm_fd: int | None = None
        self.base_vm = 0
        self.warmed_bytes = 0  # address space the on-demand imports added: not charged to cells (apply_rlimits)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.ctl, selectors.EVENT_READ, "ctl")
        sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in sel.select():
                if key.data == "wake":
                    os.read(self.wake_r, 4096)
                    self._reap()
                    continue
                msg, fds, _flags, _addr = socket.recv_fds(self.ctl, _MAX_MSG, 4)
                if not msg:
                    return
                request = json.loads(msg)
                try:
                    reply = self._handle(request, fds)
                except OSError as exc:
                    reply = {"event": "failed", "error": str(exc)}
                finally:
                    for fd in fds:
                        os.close(fd)
                try:
                    _send(self.ctl, {**reply, "id": request["id"]})
                except (BrokenPipeError, ConnectionResetError):
                    return  # the host closed the sandbox while this request ran (a warm import): as on EOF

    def _handle(self, req: dict, fds: list[int]) -> dict:
        op = req["op"]
        if op == "spawn":
            return self._spawn(req, fds)
        if op == "kill":
            self._kill(req["pid"])
        elif op == "pin":
            self.keep[req["pid"]] = self._processes(req["pid"])
        elif op == "end_turn":
            killed = self._sweep(req["pid"], keep=self.keep.get(req["pid"], frozenset()))
            # The interpreter lives on, so no exit event will carry what the memory limit killed this turn.
            sid = self.children.get(req["pid"])
            oom = self.cgroups.oom_kills(sid) if self.cgroups is not None and sid is not None else 0
            return {"event": "done", "killed": killed, "oom_kills": oom}
        elif op == "warm":
            self._warm(req["modules"])
        elif op == "close_session":
            self.sessions.discard(req["session"])
            if self.cgroups is not None:
                peak = self.cgroups.peak_bytes(req["session"])
                self.cgroups.remove(req["session"])
                return {"event": "done", "memory_peak_bytes": peak}
        return {"event": "done"}

    def _spawn(self, req: dict, fds: list[int]) -> dict:
        sid = req["session"]
        if self.cgroups is not None:
            if sid not in self.sessions:
                limits = req["limits"]
                self.cgroups.create(sid, memory_bytes=limits["memory_mb"] << 20, max_procs=limits["max_procs"])
                self.sessions.add(sid)
            self.cgroups.kill(sid)  # nothing of an earlier cell may still run when the next one starts
            self.cgroups.oom_kills(sid)
        pid = os.fork()
        if pid == 0:
            _child(req, fds, self)
        self.children[pid] = sid
        if self.mode == "root":
            self.uids[pid] = req["uid"]
        return {"event": "spawned", "pid": pid}

    def _warm(self, modules: list[str]) -> None:
        """Import modules a cell has imported, so that cells forked from now on inherit them. The host names
        them from cell code; only packages of the allowlist are imported, never anything a cell wrote."""
        for name in modules:
            if name.split(".")[0] not in self.warm_allowed or name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - "from pkg import attr" names an attribute, not a module
                pass
        self.warmed_bytes = max(0, _address_space(self.statm_fd) - self.base_vm)
        _freeze_heap()

    def _kill(self, pid: int) -> None:
        if pid not in self.children:
            return
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass
        self._sweep(pid)

    def _processes(self, pid: int) -> frozenset[int]:
        if pid not in self.children:
            return frozenset()
        if self.cgroups is not None:
            return frozenset(self.cgroups.members(self.children[pid]))
        if pid in self.uids and self.proc_fd is not None:
            return frozenset(isolation.uid_processes(self.proc_fd, self.uids[pid]))
        return frozenset({pid})

    def _sweep(self, pid: int, keep: frozenset[int] = frozenset()) -> int:
        """Kill what a cell started, however deep (setsid and double forks included), except ``keep``."""
        if pid not in self.children:
            return 0
        if self.cgroups is not None:
            return self.cgroups.kill(self.children[pid], keep)
        if pid in self.uids and self.proc_fd is not None:
            return isolation.kill_uid(self.proc_fd, self.uids[pid], keep=keep)
        return 0

    def _reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid not in self.children:
                continue  # an orphaned grandchild handed to us as subreaper
            try:
                os.killpg(pid, signal.SIGKILL)  # stragglers left in the cell's process group
            except (ProcessLookupError, PermissionError):
                pass
            self._sweep(pid)
            sid = self.children.pop(pid)
            self.uids.pop(pid, None)
            self.keep.pop(pid, None)
            oom = self.cgroups.oom_kills(sid) if self.cgroups is not None else 0
            _send(
                self.ctl,
                {
                    "event": "exit",
                    "pid": pid,
                    "status": status,
                    "maxrss_kb": usage.ru_maxrss,
                    "cpu_s": usage.ru_utime + usage.ru_stime,
                    "oom_kills": oom,
                },
            )

    def shutdown(self) -> None:
        """Kill every cell (and what it left behind), reaping them so their cgroups can be removed."""
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for pid in list(self.children):
            self._kill(pid)
        while self.children:
            try:
                pid, _status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid in self.children:
                self._sweep(pid)
                self.children.pop(pid)


def _child(req: dict, fds: list[int], zygote: _Zygote) -> None:
    """Confine this freshly forked process, then serve cells. Never returns."""
    code = 70
    mode, inner_id = zygote.mode, zygote.cell_inner_id
    try:
        from datamind.sandbox import cell
        from datamind.sandbox.limits import SandboxLimits, apply_rlimits

        limits = SandboxLimits(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in req["limits"].items()})
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over-large writes raise OSError instead of killing
        zygote_pid = os.getppid()
        os.setsid()
        if zygote.cgroups is not None:
            zygote.cgroups.join(req["session"])
        out_fd, ctl_fd = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(ctl_fd, 3)
        os.closerange(4, 1 << 16)  # the zygote's control socket (and cgroup, /proc fds) must not leak into the cell
        if zygote.private_view:
            owner = req["gid"] if mode == "root" else inner_id
            isolation.private_cell_view(req["workdir"], tmp_mb=limits.tmp_mb, disk_mb=limits.disk_mb, owner_gid=owner)
        os.chdir(req["workdir"])
        nproc = limits.max_procs if mode == "root" else limits.max_procs * 4
        # The hard CPU cap bounds a whole live session, or one chunk plus the replay of those before it.
        apply_rlimits(limits, nproc=nproc, cpu_hard_s=limits.cpu_s * 100, warmed_bytes=zygote.warmed_bytes)
        if zygote.use_pidns:
            _enter_pid_namespace()
        if mode == "root":
            os.setgroups([])
            os.setresgid(req["gid"], req["gid"], req["gid"])
            os.setresuid(req["uid"], req["uid"], req["uid"])
        elif inner_id is not None:  # root worker in user-namespace mode: become inner uid 1 (nobody)
            os.setgroups([])
            os.setresgid(inner_id, inner_id, inner_id)
            os.setresuid(inner_id, inner_id, inner_id)
            isolation.drop_all_capabilities()
        else:
            isolation.drop_all_capabilities()
        isolation.join_fresh_session_keyring()
        isolation.prctl(isolation.PR_SET_NO_NEW_PRIVS, 1)
        if zygote.use_seccomp:
            seccomp.install()
        # Only now: changing credentials clears the parent-death signal. Then close the race with a
        # zygote that died before this line.
        isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
        if not zygote.use_pidns and os.getppid() != zygote_pid:
            os._exit(70)
        os.environ.clear()
        os.environ.update(
            {
                "HOME": req["workdir"],
                "TMPDIR": "/tmp",
                "LANG": "C.UTF-8",
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "MPLCONFIGDIR": req["workdir"],
                **CELL_RUNTIME_ENV,
            }
        )
        sys.argv = ["<cell>"]
        cell.serve(3, req["kind"], req["language"], req.get("db_path"), limits.sql_timeout_s, limits.cpu_s)
        code = 0
    except BaseException:  # noqa: BLE001 - setup failure: the host reads it as the platform's, not the agent's
        try:
            import traceback

            os.write(2, ("sandbox setup failed:\n" + traceback.format_exc()).encode())
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


def _python_runtime() -> tuple[list[str], list[str]]:
    """(Python paths a cell may read, the platform's package folders to hide inside them).

    Started with -I, our sys.path is exactly what a cell imports from. The project's own source folder
    (an editable install) is left out; installed package folders of the platform (the project, Airflow
    and its providers) are covered, so their code cannot be read or imported even past the import blocker."""
    from datamind.sandbox.cell import HOST_ONLY_PACKAGES

    paths, hide = {sys.prefix, sys.base_prefix, sys.exec_prefix}, []
    for entry in sys.path:
        if not os.path.isdir(entry):
            continue
        project = [os.path.join(entry, n) for n in sorted(HOST_ONLY_PACKAGES) if os.path.isdir(os.path.join(entry, n))]
        if project and os.path.basename(entry) not in ("site-packages", "dist-packages"):
            continue
        paths.add(entry)
        hide += project
    return sorted(paths), hide


def _freeze_heap() -> None:
    """Move every object the zygote holds out of the collector's reach before it forks: a cell's collections
    would otherwise write to the header of each inherited object and copy nearly every page of the imported
    libraries (a read_csv and a describe in a child: 132 ms of CPU and 9,800 page faults, 60 ms and 3,300 frozen)."""
    gc.collect()
    gc.freeze()


def _address_space(statm_fd: int | None) -> int:
    """This process's virtual size in bytes (what RLIMIT_AS counts), from its /proc/self/statm opened before
    the new root hid /proc; 0 where that could not be read."""
    if statm_fd is None:
        return 0
    try:
        return int(os.pread(statm_fd, 256, 0).split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _works_in_child(attempt) -> bool:
    """Whether ``attempt`` (returning an exit code) succeeds in a throwaway child: probing a layer must not
    change the zygote itself."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(attempt())
        except BaseException:  # noqa: BLE001
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _seccomp_works() -> bool:
    def attempt() -> int:
        isolation.prctl(isolation.PR_SET_NO_NEW_PRIVS, 1)
        seccomp.install()
        return 0

    return _works_in_child(attempt)


def _pid_namespace_works() -> bool:
    def attempt() -> int:
        isolation.unshare(isolation.CLONE_NEWPID)
        inner = os.fork()
        if inner == 0:
            os._exit(0 if os.getpid() == 1 else 1)
        _, status = os.waitpid(inner, 0)
        return os.waitstatus_to_exitcode(status)

    return _works_in_child(attempt)


def _enter_pid_namespace() -> None:
    """Continue as pid 2 of a fresh pid namespace; returns only in that process.

    Chain: this process (outside) -> init (pid 1, reaps) -> cell (pid 2). The cell is not pid 1 because
    pid 1 ignores default-action signals such as SIGXCPU from the CPU limit. Init hands the cell's raw
    wait status to the outside process through a pipe; the outside process re-raises it, so the zygote
    sees the same exit status it would without the namespace.
    """
    status_r, status_w = os.pipe()
    isolation.unshare(isolation.CLONE_NEWPID)
    init = os.fork()
    if init != 0:  # outside the namespace: mirror the cell's fate as soon as init reports it
        isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.close(status_w)
        _close_cell_fds()
        raw = os.read(status_r, 64)  # empty: init itself was killed (wall-time kill of the group)
        # Not waiting for init: tearing a pid namespace down takes tens of ms; the zygote, our
        # subreaper, reaps init once we are gone, and the kernel has already SIGKILLed the rest.
        _mirror_status(int(raw) if raw else signal.SIGKILL)
    isolation.prctl(isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
    os.close(status_r)
    target = os.fork()
    if target != 0:  # pid 1: reap everything until the cell ends; leaving tears the namespace down
        _close_cell_fds()
        while True:
            pid, status = os.wait()
            if pid == target:
                os.write(status_w, str(status).encode())
                os._exit(0)
    os.close(status_w)  # the caller sets this cell's parent-death signal after dropping privileges


def _close_cell_fds() -> None:
    """The helper processes must not hold the cell's sockets open (the host waits for their EOF)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2, 3):
        os.dup2(devnull, fd)
    os.close(devnull)


def _mirror_status(status: int) -> None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these two cannot be caught: no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)


# ----------------------------------------------------------------------------------------- client
@dataclass
class _Exit:
    status: int
    maxrss_kb: int
    cpu_s: float = 0.0
    oom_kills: int = 0  # processes of the session the kernel killed for its memory limit
    event: threading.Event = field(default_factory=threading.Event)


class ZygoteClient:
    """Host side: starts the zygote process and multiplexes spawn/kill/exit messages for many sessions."""

    def __init__(self, config: dict, env: dict[str, str], start_timeout_s: float = 60.0) -> None:
        import subprocess

        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = host_end
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-c",
                "import sys; from datamind.sandbox.forkserver import zygote_main; zygote_main(int(sys.argv[1]))",
                str(zygote_end.fileno()),
            ],
            pass_fds=[zygote_end.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd="/",
            close_fds=True,
            # Own session: a signal to the worker's process group (e.g. `timeout`) must not kill the zygote
            # before it cleans up; it sees EOF on its socket when the worker dies and shuts down in order.
            start_new_session=True,
        )
        zygote_end.close()
        self._sock.send(json.dumps(config).encode())
        self._sock.settimeout(start_timeout_s)
        try:
            raw = self._sock.recv(_MAX_MSG)
        except TimeoutError as exc:
            self._proc.kill()
            raise SandboxUnavailable("sandbox zygote did not start in time") from exc
        if not raw:
            self._proc.wait()
            raise SandboxUnavailable(f"sandbox zygote exited during start-up (code {self._proc.returncode})")
        self._sock.settimeout(None)
        self.ready = json.loads(raw)
        self._lock = threading.Lock()
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self._unwanted: set[int] = set()  # requests sent without waiting: their answers are dropped
        self._cv = threading.Condition()
        self._exits: dict[int, _Exit] = {}
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name="sandbox-zygote-reader", daemon=True)
        self._reader.start()

    def call(self, request: dict, fds: list[int] | None = None, timeout_s: float = 30.0, *, wait: bool = True) -> dict:
        """Send one request; with ``wait``, block until the zygote answers it."""
        with self._lock:
            if self._closed:
                if not wait:
                    return {}
                raise SandboxUnavailable("sandbox zygote has exited")
            self._next_id += 1
            rid = self._next_id
            if not wait:
                with self._cv:
                    self._unwanted.add(rid)
            try:
                socket.send_fds(self._sock, [json.dumps({**request, "id": rid}).encode()], fds or [])
            except OSError as exc:
                if not wait:
                    return {}  # the zygote is gone, and its cells died with it (PDEATHSIG)
                raise SandboxUnavailable(f"sandbox zygote is gone: {exc}") from exc
        if not wait:
            return {}
        with self._cv:
            if not self._cv.wait_for(lambda: rid in self._replies or self._closed, timeout_s):
                raise SandboxUnavailable(f"sandbox zygote did not answer a {request['op']} request")
            if self._closed and rid not in self._replies:
                raise SandboxUnavailable("sandbox zygote has exited")
            reply = self._replies.pop(rid)
        if reply["event"] == "failed":
            raise SandboxUnavailable(f"sandbox {request['op']} failed: {reply.get('error')}")
        return reply

    def spawn(self, request: dict, fds: list[int]) -> int:
        return self.call({**request, "op": "spawn"}, fds)["pid"]

    def kill(self, pid: int) -> None:
        self.call({"op": "kill", "pid": pid}, wait=False)

    def exit_info(self, pid: int) -> _Exit:
        with self._cv:
            return self._exits.setdefault(pid, _Exit(-1, 0))

    def forget(self, pid: int) -> None:
        with self._cv:
            self._exits.pop(pid, None)

    @property
    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None

    def _read_loop(self) -> None:
        while True:
            try:
                raw = self._sock.recv(_MAX_MSG)
            except OSError:
                raw = b""
            if not raw:
                with self._cv:
                    self._closed = True
                    for info in self._exits.values():
                        info.event.set()
                    self._cv.notify_all()
                return
            msg = json.loads(raw)
            with self._cv:
                if msg["event"] == "exit":
                    info = self._exits.setdefault(msg["pid"], _Exit(-1, 0))
                    info.status, info.maxrss_kb, info.cpu_s = msg["status"], msg["maxrss_kb"], msg["cpu_s"]
                    info.oom_kills = msg.get("oom_kills", 0)
                    info.event.set()
                elif msg["id"] in self._unwanted:
                    self._unwanted.discard(msg["id"])
                else:
                    self._replies[msg["id"]] = msg
                    self._cv.notify_all()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        try:
            self._proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)
        self._sock.close()
