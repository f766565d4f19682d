"""A small seccomp filter for cells: the kernel interfaces no analysis code needs are refused with EPERM.

Namespaces already keep a cell away from the host; this closes what namespaces leave open: creating a
user namespace (and with it a private root to poke the kernel from), kernel keyrings (keys outlive their
process and are shared by uid), mounts, ptrace and cross-process memory access, and a few interfaces
with a long record of kernel bugs (io_uring, bpf, perf, userfaultfd). ``clone`` stays allowed except
with a namespace flag; ``clone3`` answers ENOSYS so the C library falls back to ``clone``, whose flags the
filter can read (clone3 passes them in memory a filter cannot see).

File watching (inotify, fanotify) is refused too: its instances and watches are counted per user, so in
user-namespace mode, where every cell and the worker itself share one uid, a cell holding them would
starve the other sessions and the worker; analysis code never watches files.

Sockets are an allow-list of address families (``SOCKET_FAMILIES``). The per-cell network namespace only
covers families that are namespaced: AF_VSOCK, for one, reaches the host's vsock transport, so a cell
could squat a vsock port the host or another session wants, or use it as a channel between sessions.

The program is classic BPF written out by hand: libseccomp has no maintained binding for a virtualenv.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket

_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_JSET_K = 0x45
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
# Offsets in struct seccomp_data: nr, arch, instruction pointer, then six 64-bit arguments.
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LOW = 0, 4, 16
_X32_SYSCALL_BIT = 0x40000000
_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET (+NEWTIME below)
_CLONE_NEWTIME = 0x00000080
# What a cell may create sockets of: unix sockets (multiprocessing, asyncio's self-pipe) and IP over the
# cell's own loopback. Any other family answers EAFNOSUPPORT, the kernel's own answer for a family it was
# built without: socket(2) documents it (EPERM it does not), and code that probes for an optional family
# (glibc's netlink address check in getaddrinfo, libraries trying AF_ALG or AF_VSOCK) falls back on it.
SOCKET_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6)

# (audit arch, syscall numbers): x86_64 from asm/unistd_64.h, aarch64 from asm-generic/unistd.h.
_ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "clone": 56, "clone3": 435, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
            "pivot_root": 155, "chroot": 161, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
            "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
            "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
            "finit_module": 313, "delete_module": 176, "open_tree": 428, "move_mount": 429, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "swapon": 167,
            "swapoff": 168, "reboot": 169, "acct": 163, "open_by_handle_at": 304, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "inotify_init": 253, "inotify_init1": 294,
            "fanotify_init": 300, "socket": 41, "socketpair": 53,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "clone": 220, "clone3": 435, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39,
            "pivot_root": 41, "chroot": 51, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
            "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
            "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
            "finit_module": 273, "delete_module": 106, "open_tree": 428, "move_mount": 429, "fsopen": 430,
            "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "swapon": 224,
            "swapoff": 225, "reboot": 142, "acct": 89, "open_by_handle_at": 265, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427, "inotify_init1": 26, "fanotify_init": 262,
            "socket": 198, "socketpair": 199,
        },
    ),
}  # fmt: skip
_ARCHES["arm64"] = _ARCHES["aarch64"]
# Calls the filter looks into instead of refusing outright.
_INSPECTED = ("clone", "clone3", "socket", "socketpair")


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Instruction))]


def supported() -> bool:
    return platform.machine() in _ARCHES


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions; jumps are relative to the next instruction."""
    arch, numbers = _ARCHES[machine or platform.machine()]
    denied = sorted(n for name, n in numbers.items() if name not in _INSPECTED)
    # (code, jump-if-true label, k); labels are resolved once the program is laid out.
    steps: list[tuple[int, str | None, int]] = [
        (_BPF_LD_W_ABS, None, _OFF_ARCH),
        (_BPF_JEQ_K, "known_arch", arch),
        (_BPF_RET_K, None, _RET_ERRNO | errno.EPERM),  # another ABI (32-bit calls on a 64-bit kernel)
        ("known_arch", None, 0),
        (_BPF_LD_W_ABS, None, _OFF_NR),
    ]
    if arch == _ARCHES["x86_64"][0]:  # the x32 ABI reaches the same kernel code under other numbers
        steps.append((_BPF_JGE_K, "deny", _X32_SYSCALL_BIT))
    steps += [(_BPF_JEQ_K, "deny", n) for n in denied]
    steps += [
        (_BPF_JEQ_K, "no_clone3", numbers["clone3"]),
        (_BPF_JEQ_K, "clone", numbers["clone"]),
        (_BPF_JEQ_K, "socket", numbers["socket"]),
        (_BPF_JEQ_K, "socket", numbers["socketpair"]),
        (_BPF_RET_K, None, _RET_ALLOW),
        ("clone", None, 0),
        (_BPF_LD_W_ABS, None, _OFF_ARG0_LOW),  # clone's flags are its first argument on both arches
        (_BPF_JSET_K, "deny", _NAMESPACE_FLAGS | _CLONE_NEWTIME),
        (_BPF_RET_K, None, _RET_ALLOW),
        ("deny", None, 0),
        (_BPF_RET_K, None, _RET_ERRNO | errno.EPERM),
        ("no_clone3", None, 0),
        (_BPF_RET_K, None, _RET_ERRNO | errno.ENOSYS),
        # The family is the first argument of both calls, an int: the kernel reads only its low 32 bits.
        ("socket", None, 0),
        (_BPF_LD_W_ABS, None, _OFF_ARG0_LOW),
        *[(_BPF_JEQ_K, "family_allowed", family) for family in SOCKET_FAMILIES],
        (_BPF_RET_K, None, _RET_ERRNO | errno.EAFNOSUPPORT),
        ("family_allowed", None, 0),
        (_BPF_RET_K, None, _RET_ALLOW),
    ]
    labels: dict[str, int] = {}
    for step in steps:
        if isinstance(step[0], str):
            labels[step[0]] = sum(1 for s in steps[: steps.index(step)] if not isinstance(s[0], str))
    out: list[tuple[int, int, int, int]] = []
    for code, label, k in (s for s in steps if not isinstance(s[0], str)):
        jt = labels[label] - len(out) - 1 if label else 0
        if not 0 <= jt <= 255:  # classic BPF jumps only forward, at most 255 instructions
            raise ValueError(f"seccomp program: jump to {label!r} out of range ({jt})")
        out.append((code, jt, 0, k))
    return out


def install() -> None:
    """Load the filter into this process (inherited by everything it starts; no_new_privs must be set)."""
    prog = program()
    instructions = (_Instruction * len(prog))(*[_Instruction(*ins) for ins in prog])
    fprog = _Program(len(prog), instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter: {errno.errorcode.get(err, err)}")
