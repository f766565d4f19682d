"""The fourth round's attacks on the sandbox, as one probe that runs in any isolation mode.

Kernel objects the per-cell namespaces do not cover: an AF_VSOCK port is the host's, and inotify
instances, POSIX message-queue bytes, queued signals and locked SysV memory are counted per user, which
in user-namespace mode is one uid for every cell and the worker itself. For each, session A's cell (a
live interpreter, so it keeps what it took across turns) takes as much as it can; session B (chunked: a
fresh process each turn) tries the same call before and while A holds, and so does a process outside the
sandbox as the worker. Contained means B's answer does not change and the outside process
is not refused. Last, a cell whose forked children the session's memory limit kills must say so.

Standard library and the sandbox's public API only: the non-root worker test sends this file's text to a
process running as uid 50000, and the root tests import it. ``probe`` returns what each attack achieved.
"""

from __future__ import annotations

import errno
import os
import random
import re
import socket
import sys
import textwrap

MEMORY_MB = 1024

# Every non-IP, non-unix family a cell could reach the kernel through; each must be refused.
OTHER_FAMILIES = {
    name: getattr(socket, name) for name in ("AF_VSOCK", "AF_NETLINK", "AF_PACKET", "AF_ALG", "AF_TIPC", "AF_RDS")
}
_PROBED = [
    (n, int(f), int(socket.SOCK_SEQPACKET if n == "AF_ALG" else socket.SOCK_DGRAM)) for n, f in OTHER_FAMILIES.items()
]
FAMILIES = f"""
import errno, socket
for name, family, kind in {_PROBED!r}:
    try:
        socket.socket(family, kind).close()
        print(name, "created")
    except OSError as exc:
        print(name, errno.errorcode.get(exc.errno, exc.errno))
for name in ("AF_INET", "AF_INET6"):
    try:
        socket.socket(getattr(socket, name), socket.SOCK_STREAM).close()
        print("allowed", name, "created")
    except OSError as exc:
        print("allowed", name, errno.errorcode.get(exc.errno, exc.errno))
a, b = socket.socketpair()
a.sendall(b"ping")
import asyncio
asyncio.new_event_loop().close()  # its self-pipe is a unix socketpair
print("allowed AF_UNIX", b.recv(4).decode())
"""

_LIBC = "import ctypes, errno, os, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
_ERR = "errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())"

# Each resource: code that takes one unit (setting ``ok``, in a namespace that already ran _LIBC), run in a
# loop by A's hoard and once by B and the outside process, which then gives back what lives on after it.
TAKE = {
    "vsock": (
        "held = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)\n"
        "held.bind((socket.VMADDR_CID_ANY, PORT))\nheld.listen(1)\nok = True\n"
    ),
    "inotify": "held = libc.inotify_init1(0)\nok = held >= 0\n",
    "mqueue": (
        "class Attr(ctypes.Structure):\n"
        "    _fields_ = [(n, ctypes.c_long) for n in ('flags', 'maxmsg', 'msgsize', 'curmsgs', 'a', 'b', 'c', 'd')]\n"
        "held = libc.mq_open(f'/dm-r4-{os.getpid()}-{N}'.encode(), os.O_CREAT | os.O_RDWR, 0o600,"
        " ctypes.byref(Attr(0, 10, 8192)))\nok = held >= 0\n"
    ),
    "sigpending": (
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN + 2])\n"
        "ok = libc.sigqueue(os.getpid(), signal.SIGRTMIN + 2, ctypes.c_void_p(0)) == 0\n"
    ),
    "shm_lock": (
        "libc.shmget.restype = ctypes.c_int\n"
        "held = libc.shmget(0, 1 << 20, 0o1000 | 0o600)\n"  # IPC_PRIVATE, IPC_CREAT
        "ok = held >= 0 and libc.shmctl(held, 11, None) == 0\n"  # SHM_LOCK
    ),
}
# How many units A tries to take: past each default per-user limit (128 inotify instances, 819200 bytes of
# queues of 80 KiB, ~96k queued signals on a 24 GB host, 8 MiB locked) without running for minutes.
HOARD_UNITS = {"vsock": 1, "inotify": 1000, "mqueue": 64, "sigpending": 400_000, "shm_lock": 64}
RELEASE = {
    "mqueue": "libc.mq_unlink(f'/dm-r4-{os.getpid()}-once'.encode())\n",
    "shm_lock": "libc.shmctl(held, 0, None)\n",  # IPC_RMID: the outside process's segment is the host's
}


def _hoard(resource: str, port: int) -> str:
    take = textwrap.indent(TAKE[resource].replace("PORT", str(port)), " " * 8)
    return (
        f"import socket\n{_LIBC}kept, err = 0, 0\n"
        f"for N in range({HOARD_UNITS[resource]}):\n"
        f"    try:\n{take}"
        "    except OSError as exc:\n"
        "        ok, err = False, errno.errorcode.get(exc.errno, exc.errno)\n"
        f"    if not ok:\n        err = err or {_ERR}\n        break\n"
        "    kept += 1\n"  # what it took stays with the live interpreter (open descriptors, pending signals)
        f"print('{resource} held', kept, err or '')\n"
    )


def _once(resource: str, port: int) -> str:
    take = textwrap.indent(TAKE[resource].replace("PORT", str(port)).replace("{N}", "once"), " " * 4)
    release = f"if ok:\n    {RELEASE[resource]}" if resource in RELEASE else ""
    return (
        f"import socket\n{_LIBC}try:\n{take}"
        "except OSError as exc:\n    ok = False\n    ctypes.set_errno(exc.errno)\n"
        f"print('ok' if ok else {_ERR})\n{release}"
    )


def _outside(code: str) -> str:
    """Run ``code`` (a _once program) in a forked process outside the sandbox, as the worker; returns what
    it printed. In user-namespace mode the kernel charges what a cell holds to the namespace's owner, the
    worker's uid (root's, for a root worker), so the worker and every other process of that uid share it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            # A stream of its own: what the worker had buffered in sys.stdout must not come along.
            sys.stdout = open(w, "w", buffering=1, closefd=False)
            exec(compile(code, "<outside>", "exec"), {})
            sys.stdout.flush()
        except BaseException as exc:  # noqa: BLE001 - reported as the answer, never raised in the fork
            os.write(w, f"crashed {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while data := os.read(r, 4096):
        chunks.append(data)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode().strip()


def host_has(family: int) -> bool:
    try:
        socket.socket(family, socket.SOCK_STREAM).close()
        return True
    except OSError:
        return False


def _free_vsock_port() -> int:
    for _ in range(50):
        port = random.randrange(20_000, 60_000)
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        try:
            s.bind((socket.VMADDR_CID_ANY, port))
            return port
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
        finally:
            s.close()
    raise RuntimeError("no free vsock port")


OOM_CHILDREN = """
import os, signal, time
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (450 << 20)  # written, so charged: three of these exceed the session's limit
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
killed = 0
for pid in kids:
    _, status = os.waitpid(pid, 0)
    killed += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
print("children killed", killed)
"""
_KILLED_NOTE = re.compile(r"(\d+) of this cell's processes (?:was|were) killed: memory limit reached")


def probe(sandbox_cls, limits_cls, data: str, isolation_mode: str = "auto") -> dict:
    out: dict = {}
    limits = limits_cls(
        guard=False, cpu_s=4, wall_s=20.0, memory_mb=MEMORY_MB, max_procs=32, disk_mb=64, tmp_mb=16,
        isolation_mode=isolation_mode, head_chars=400, tail_chars=400,
    )  # fmt: skip
    vsock = host_has(socket.AF_VSOCK)
    port = _free_vsock_port() if vsock else 1
    out["host_vsock"], out["host_ipv6"] = vsock, host_has(socket.AF_INET6)
    with sandbox_cls(limits, mode="live") as sb:
        out["layers"] = sb.layers
        with sb.session([data]) as s:
            out["families"] = s.run(FAMILIES).output.strip()
        for resource in TAKE:
            if resource == "vsock" and not vsock:
                continue
            once = _once(resource, port)
            with sb.session([data], mode="chunked") as b:
                b_alone = b.run(once).output.strip()
                with sb.session([data]) as a:
                    held = a.run(_hoard(resource, port)).output.strip()
                    b_while = b.run(once).output.strip()
                    outside = _outside(once)
            out[resource] = {"a": held, "b_alone": b_alone, "b_while": b_while, "outside_while": outside}
        with sb.session([data]) as s:
            first = s.run(OOM_CHILDREN)
            second = s.run("print('next')")
        with sb.session([data], mode="chunked") as s:
            chunked = s.run(OOM_CHILDREN)
        out["oom"] = {
            name: {"ok": obs.ok, "kind": obs.error_kind, "output": obs.output.strip()}
            for name, obs in (("live", first), ("live_next", second), ("chunked", chunked))
        }
    return out


def _children_note_matches(obs: dict) -> bool:
    said = re.search(r"children killed (\d+)", obs["output"])
    note = _KILLED_NOTE.search(obs["output"])
    return bool(obs["ok"] and said and int(said.group(1)) >= 1 and note and note.group(1) == said.group(1))


def verdicts(r: dict) -> dict[str, bool | None]:
    """Attack name -> contained (None: the host lacks what the attack needs, so it could not be tried)."""
    lines = r["families"].splitlines()
    refused = dict(line.split(" ", 1) for line in lines if not line.startswith("allowed "))
    allowed = dict(line.split(" ", 2)[1:] for line in lines if line.startswith("allowed "))
    out: dict[str, bool | None] = {
        "only unix and IP sockets can be created in a cell": set(refused) == set(OTHER_FAMILIES)
        and all(v == "EAFNOSUPPORT" for v in refused.values())
        and allowed
        == {"AF_INET": "created", "AF_INET6": "created" if r["host_ipv6"] else "EAFNOSUPPORT", "AF_UNIX": "ping"},
    }
    for resource in TAKE:
        if resource not in r:
            out[f"{resource}: nothing one session takes is missing elsewhere"] = None
            continue
        got = r[resource]
        out[f"{resource}: nothing one session takes is missing elsewhere"] = (
            got["b_alone"] == got["b_while"] and got["outside_while"] == "ok"
        )
    out["a cell whose children the memory limit killed says how many"] = (
        _children_note_matches(r["oom"]["live"])
        and _children_note_matches(r["oom"]["chunked"])
        and r["oom"]["live_next"] == {"ok": True, "kind": None, "output": "next"}
    )
    return out
