"""The third round's attacks on the sandbox, as one probe that runs in any isolation mode.

Standard library and the sandbox's public API only: the non-root worker test sends this file's text to a
process running as uid 50000, and the root tests import it. ``probe`` returns what each attack achieved;
the tests assert on it, so a lost attack names itself.
"""

from __future__ import annotations

import platform
import threading
import time

MEMORY_MB = 1024
MAX_PROCS = 32
_NR = {"x86_64": {"add_key": 248, "keyctl": 250}, "aarch64": {"add_key": 217, "keyctl": 219}}

MEMFD = """
import os
held = 0
fds = []
for _ in range(15):  # several memfds: each stays under RLIMIT_FSIZE, none of them is mapped
    fds.append(os.memfd_create("hold"))
    for _ in range(2):
        os.write(fds[-1], b"x" * (100 << 20))
        held += 100
        print(held, flush=True)
"""

FORKS = """
import os, select, time
r, w = os.pipe()
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        block = b"x" * (600 << 20)
        os.write(w, b"1")
        time.sleep(4)
        os._exit(0)
    kids.append(pid)
os.close(w)
done = 0
deadline = time.time() + 3
while time.time() < deadline:
    if select.select([r], [], [], 0.1)[0]:
        data = os.read(r, 16)
        if not data:
            break
        done += len(data)
alive = sum(1 for pid in kids if os.waitpid(pid, os.WNOHANG) == (0, 0))
print("holding", min(done, alive), flush=True)
"""

GRANDCHILD = """
import os, time
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        os.setsid()
        for _ in range(500):
            print("GRANDCHILD STILL HERE", flush=True)
            x = sum(range(20000))
            time.sleep(0.01)
        os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)
print("spawned")
"""

LISTEN = """
import socket
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("\\0datamind-peer")
srv.listen(4)
print("listening")
"""

CONNECT = """
import socket
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    c.connect("\\0datamind-peer")
    print("CONNECTED")
except OSError as exc:
    print("refused", type(exc).__name__)
"""

FLOCK = """
import fcntl
held = open("sales.csv")
try:
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("locked")
except OSError as exc:
    print("BUSY", exc)
"""

KEYS = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall({add_key}, b"user", b"dm-key", b"secret", 6, ctypes.c_int(-4))
print("add_key", r, ctypes.get_errno())
r = libc.syscall({keyctl}, 0, ctypes.c_int(-3), 0)
print("keyctl", r, ctypes.get_errno())
"""

USERNS = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("unshare", libc.unshare(0x10000000), ctypes.get_errno())
"""

HOARD = """
import os, time
n = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(4)
        os._exit(0)
    n += 1
print("held", n, flush=True)
time.sleep(2.5)
"""


class _PeakMemory:
    """Host memory in use, sampled every 10 ms: the peak above the level when sampling began."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._base = self._used_mb()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _used_mb() -> float:
        info = dict(line.split(":", 1) for line in open("/proc/meminfo").read().splitlines())
        return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) / 1024

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak_mb = max(self.peak_mb, self._used_mb() - self._base)

    def __enter__(self) -> _PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _key_users() -> set[int]:
    try:
        return {int(line.split(":")[0]) for line in open("/proc/key-users").read().splitlines() if ":" in line}
    except OSError:
        return set()


def probe(sandbox_cls, limits_cls, data: str, isolation_mode: str = "auto") -> dict:
    out: dict = {}
    limits = limits_cls(
        guard=False, cpu_s=4, wall_s=8.0, memory_mb=MEMORY_MB, max_procs=MAX_PROCS, disk_mb=64, tmp_mb=16,
        isolation_mode=isolation_mode, head_chars=400, tail_chars=400,
    )  # fmt: skip
    with sandbox_cls(limits, mode="live") as sb:
        out["layers"] = sb.layers
        for name, code in (("memfd", MEMFD), ("forks", FORKS)):
            with _PeakMemory() as peak:
                with sb.session([data]) as s:
                    obs = s.run(code)
            lines = [ln for ln in obs.output.splitlines() if ln.strip().isdigit()]
            out[name] = {
                "kind": obs.error_kind,
                "output": obs.output.strip()[-240:],  # room for a note on children killed for memory
                "held_mb": int(lines[-1]) if lines else 0,
                "peak_host_mb": round(peak.peak_mb),
                "peak_session_mb": round((s.memory_peak_bytes or 0) / 2**20),
            }
        with sb.session([data]) as s:
            first = s.run(GRANDCHILD)
            time.sleep(0.3)
            second = s.run("import time\ntime.sleep(0.3)\nprint('next')")
            out["grandchild"] = {"first": first.output[:60], "next": second.output}
        with sb.session([data]) as a, sb.session([data]) as b:
            listening = a.run(LISTEN).output
            out["abstract_socket"] = {
                "a": listening.strip(),
                "b": b.run(CONNECT).output.strip(),
                "a_itself": a.run(CONNECT).output.strip(),  # proves the socket is really there
            }
            out["flock"] = {"a": a.run(FLOCK).output.strip(), "b": b.run(FLOCK).output.strip()}
        before = _key_users()
        with sb.session([data]) as s:
            nr = _NR.get(platform.machine(), _NR["x86_64"])
            out["keys"] = s.run(KEYS.format(**nr)).output.strip()
            out["userns"] = s.run(USERNS).output.strip()
            uid = s.uid
        # The kernel collects a keyring nobody holds a moment after its last process ends.
        for _ in range(100):
            left = (_key_users() - before) | ({uid} & _key_users() if uid else set())
            if not left:
                break
            time.sleep(0.1)
        out["key_users_left"] = sorted(left)
        with sb.session([data]) as a, sb.session([data]) as b:
            hoard: dict = {}
            t = threading.Thread(target=lambda: hoard.setdefault("obs", a.run(HOARD)))
            t.start()
            time.sleep(1.0)
            other = b.run("print('B ran')")
            t.join()
            out["pids"] = {"a": hoard["obs"].output.strip(), "b": other.output.strip(), "b_kind": other.error_kind}
    return out


def verdicts(r: dict) -> dict[str, bool]:
    """Attack name -> contained, from what ``probe`` measured."""
    held = r["pids"]["a"].split()
    forks = next((line.split() for line in r["forks"]["output"].splitlines() if line.startswith("holding")), [])
    return {
        "memfd pages count against the session's memory": r["memfd"]["kind"] == "memory"
        and r["memfd"]["held_mb"] < MEMORY_MB
        and r["memfd"]["peak_session_mb"] <= MEMORY_MB,
        "forked children share one memory limit": forks[:1] == ["holding"]
        and int(forks[1]) <= 1
        and r["forks"]["peak_session_mb"] <= MEMORY_MB,
        "a double-forked grandchild is gone when its turn ends": r["grandchild"]["next"] == "next\n",
        "an abstract socket is not reachable from another session": r["abstract_socket"]["b"].startswith("refused")
        and r["abstract_socket"]["a_itself"] == "CONNECTED",
        "a lock on an input is no channel between sessions": r["flock"] == {"a": "locked", "b": "locked"},
        "kernel keyrings are refused": r["keys"] == "add_key -1 1\nkeyctl -1 1",
        "no keys outlive the session": r["key_users_left"] == [],
        "a cell cannot create a user namespace": r["userns"] == "unshare -1 1",
        "one session's processes do not starve another's": r["pids"]["b"] == "B ran"
        and r["pids"]["b_kind"] is None
        and held[:1] == ["held"]
        and int(held[1]) < MAX_PROCS,
    }
