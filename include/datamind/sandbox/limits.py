"""Resource caps for one sandboxed cell, and the isolation policy a sandbox must meet.

The numbers below were measured on the project machines: a zygote with pandas and numpy
imported already maps about 330 MB of address space, which every forked child inherits, so the
address-space cap must sit well above that (2 GiB by default leaves ~1.7 GiB for the cell).
"""

from __future__ import annotations

import os
import resource
from dataclasses import asdict, dataclass, field
from typing import Literal

IsolationPolicy = Literal["strict", "best_effort"]
IsolationMode = Literal["auto", "root", "userns"]

# Layers the sandbox can stack; `Sandbox.layers` reports which are active.
LAYER_GUARD = "ast_guard"
LAYER_RLIMITS = "rlimits"
LAYER_NETNS = "network_namespace"
LAYER_MOUNTNS = "mount_namespace"
LAYER_UID = "dedicated_uid"
LAYER_USERNS = "user_namespace_no_caps"
LAYER_PIDS_CGROUP = "pids_cgroup"  # processes per session
LAYER_MEMORY_CGROUP = "memory_cgroup"  # all memory of a session (page cache, tmpfs, memfd included)
LAYER_SECCOMP = "seccomp_filter"  # no namespaces, keyrings, mounts, ptrace, io_uring, bpf, inotify, non-IP sockets
LAYER_KEYRING = "session_keyring"
LAYER_NPROC = "rlimit_nproc"
LAYER_PGROUP_KILL = "process_group_kill"
LAYER_NO_NEW_PRIVS = "no_new_privs"
LAYER_ROOT = "allowlisted_root"  # the cell's filesystem is an allow-list (pivot_root into a fresh tmpfs)
LAYER_CELL_MOUNTS = "private_cell_mounts"  # per-cell mount namespace: own scratch, own workspace only
LAYER_IPC = "ipc_namespace"
LAYER_CELL_NETNS = "cell_network_namespace"  # no socket (abstract unix ones included) reaches another cell
LAYER_PIDNS = "pid_namespace"
LAYER_DISK_QUOTA = "disk_quota"

# What "strict" demands: no network, hidden host paths, no privilege inside, sessions that cannot reach
# each other, and a session whose memory and processes are bounded as a whole. Each tuple is a set of
# alternatives, one of which must be active (RLIMIT_NPROC is per session only where each has its own uid).
STRICT_REQUIREMENTS: tuple[tuple[str, ...], ...] = (
    (LAYER_NETNS,),
    (LAYER_MOUNTNS,),
    (LAYER_ROOT,),
    (LAYER_CELL_MOUNTS,),
    (LAYER_IPC,),
    (LAYER_CELL_NETNS,),
    (LAYER_UID, LAYER_USERNS),
    (LAYER_PIDS_CGROUP, LAYER_NPROC),
    (LAYER_MEMORY_CGROUP,),
    (LAYER_SECCOMP,),
)


class SandboxUnavailable(RuntimeError):
    """The host cannot provide the isolation the policy demands; nothing was executed."""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: int = 30
    wall_s: float = 60.0
    # RLIMIT_AS of each process (absolute: includes the ~330 MB inherited from the zygote), and the memory
    # cgroup's limit for a whole session: all its processes, their page cache, tmpfs and memfd pages
    memory_mb: int = 2048
    max_procs: int = 32  # processes/threads per session (pids cgroup or RLIMIT_NPROC)
    max_file_mb: int = 256  # RLIMIT_FSIZE: largest file a cell may write
    max_open_files: int = 256
    max_output_bytes: int = 1_000_000  # the cell is killed once it has printed more than this
    head_chars: int = 2000  # observation keeps this many leading characters...
    tail_chars: int = 2000  # ...and this many trailing ones
    sql_timeout_s: float = 10.0  # per statement, enforced by a SQLite progress handler
    tmp_mb: int = 64  # size of each private scratch tmpfs (/tmp, /var/tmp, /dev/shm) of a cell
    disk_mb: int = 256  # the workspace's quota: a tmpfs of this size holds everything a cell writes there
    max_code_chars: int = 200_000  # one chunk; longer code is refused before execution
    isolation: IsolationPolicy = "strict"
    isolation_mode: IsolationMode = "auto"
    guard: bool = True  # only tests of the runtime layers switch the AST guard off
    cgroup: bool = True  # a memory + pids cgroup per session wherever the host lets us create one
    hide_paths: tuple[str, ...] = ()  # extra host paths to hide (data root, AIRFLOW_HOME... are default)
    preload: tuple[str, ...] = field(
        default=(
            "numpy",
            "pandas",
            "sqlite3",
            "csv",
            "json",
            "math",
            "statistics",
            "re",
            "datetime",
            "collections",
            "itertools",
            "functools",
            "decimal",
            "fractions",
            "random",
            "string",
        )
    )

    # Packages whose modules the zygote imports itself once a cell of its sandbox has imported them, so
    # later cells inherit them instead of paying again (scipy.stats alone takes ~1.5 s per interpreter, and
    # chunked mode pays it again on every replay; polars' import and first query ~300 ms). Fork copies the
    # forking thread alone, so only packages whose import leaves no thread holding a lock a child needs: polars
    # starts jemalloc's purging threads (re-initialised by jemalloc's own fork handlers) and builds its pools
    # lazily in the child (tests/sandbox/test_warm_imports.py forks from a warmed zygote under load).
    warm_on_demand: tuple[str, ...] = ("scipy", "polars", "duckdb", "openpyxl", "sqlalchemy", "tabulate")
    # Of those, the modules the zygote imports as soon as it is ready, before any cell asks. A sandbox lives
    # for one task (one shard), and analysis cells reach for these in most shards: waiting for a cell to ask
    # made every shard pay twice (in the first cell, then in the zygote), and once more per trajectory already
    # in flight (scipy.stats ~1.2 s each). Their address space is not charged to cells, like any warm import.
    warm_at_start: tuple[str, ...] = ("scipy.stats", "polars", "duckdb")

    def __post_init__(self) -> None:
        for name in (
            "cpu_s",
            "wall_s",
            "memory_mb",
            "max_procs",
            "max_file_mb",
            "max_open_files",
            "max_output_bytes",
            "sql_timeout_s",
            "tmp_mb",
            "disk_mb",
            "max_code_chars",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)!r}")
        if self.head_chars < 0 or self.tail_chars < 0:
            raise ValueError("SandboxLimits.head_chars and tail_chars must be >= 0")
        if self.memory_mb < 512:
            raise ValueError("SandboxLimits.memory_mb below 512 cannot even hold the preloaded pandas")
        eager = [m for m in self.warm_at_start if m.split(".")[0] not in self.warm_on_demand]
        if eager:
            raise ValueError(f"SandboxLimits.warm_at_start names modules outside warm_on_demand's packages: {eager}")
        if self.isolation not in ("strict", "best_effort"):
            raise ValueError(f"SandboxLimits.isolation must be 'strict' or 'best_effort', got {self.isolation!r}")
        if self.isolation_mode not in ("auto", "root", "userns"):
            raise ValueError(f"SandboxLimits.isolation_mode must be auto|root|userns, got {self.isolation_mode!r}")

    @classmethod
    def from_env(cls) -> SandboxLimits:
        """Deployment overrides through DATAMIND_SANDBOX_<FIELD> (e.g. DATAMIND_SANDBOX_MEMORY_MB); a list is
        separated by os.pathsep, and set to nothing it is empty (DATAMIND_SANDBOX_WARM_AT_START= warms nothing
        eagerly)."""
        d = cls()
        kwargs: dict = {}
        for name, default in asdict(d).items():
            raw = os.environ.get(f"DATAMIND_SANDBOX_{name.upper()}")
            if raw is None or (raw.strip() == "" and not isinstance(default, tuple)):
                continue
            if isinstance(default, bool):
                kwargs[name] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif isinstance(default, (int, float)):
                try:
                    kwargs[name] = type(default)(raw)
                except ValueError as exc:
                    raise ValueError(f"DATAMIND_SANDBOX_{name.upper()} must be a number, got {raw!r}") from exc
            elif isinstance(default, tuple):
                kwargs[name] = tuple(p for p in raw.split(os.pathsep) if p)
            else:
                kwargs[name] = raw.strip()
        return cls(**kwargs)


def missing_layers(active: set[str]) -> list[str]:
    """Requirements of the strict policy that `active` does not satisfy, as readable strings."""
    return [" or ".join(alts) for alts in STRICT_REQUIREMENTS if not any(a in active for a in alts)]


def apply_rlimits(
    limits: SandboxLimits, *, nproc: int | None, cpu_hard_s: int | None = None, warmed_bytes: int = 0
) -> None:
    """Called in the forked child before it drops privileges (hard limits can then never be raised).

    `cpu_hard_s` lets a live interpreter, which runs many cells, have a session-wide CPU ceiling
    while its per-cell soft limit is moved forward before each cell. `warmed_bytes` is the address space
    the zygote's on-demand imports added since it started: not the cell's doing, so not charged to it
    (a cell's headroom must not depend on what earlier cells imported).
    """
    mem = limits.memory_mb * 1024 * 1024 + max(0, warmed_bytes)
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    # Soft < hard: the soft limit sends SIGXCPU, which we classify as a timeout.
    hard = cpu_hard_s if cpu_hard_s is not None else limits.cpu_s + 1
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, hard))
    fsize = limits.max_file_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # The kernel counts POSIX message-queue bytes, queued signals and locked SysV memory per user, against
    # the rlimit of whoever asks next: where cells share a uid (user-namespace mode, with the worker too),
    # one cell holding them would make another session's or the worker's calls fail. At 0, a cell cannot
    # hold any, so each call answers the same whatever other sessions do. Analysis code loses mq_open,
    # sigqueue of real-time signals, timer_create and mlock; ordinary signals (kill, alarms, SIGCHLD)
    # bypass the queued-signal limit, and only their extra siginfo can be lost.
    for shared_per_user in (resource.RLIMIT_MSGQUEUE, resource.RLIMIT_SIGPENDING, resource.RLIMIT_MEMLOCK):
        resource.setrlimit(shared_per_user, (0, 0))
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
