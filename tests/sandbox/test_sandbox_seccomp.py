"""The seccomp program, run by a small classic-BPF interpreter of the test's own on both architectures (the
host may be either one), and its syscall tables checked against the kernel headers where they are installed."""

from __future__ import annotations

import errno
import re
import socket
import struct
from pathlib import Path

import pytest

from datamind.sandbox import seccomp

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # linux/audit.h
AUDIT_ARCH_I386 = 0x40000003
X32_BIT = 0x40000000
ALLOW = 0x7FFF0000
HEADERS = {
    "x86_64": [Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), Path("/usr/include/asm/unistd_64.h")],
    "aarch64": [Path("/usr/include/asm-generic/unistd.h")],
}


def _header_numbers(machine: str) -> dict[str, int]:
    for path in HEADERS[machine]:
        if path.exists():
            return {m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)\b", path.read_text())}
    pytest.skip(f"no syscall header for {machine} on this host")


def run(prog, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate ``prog`` on one struct seccomp_data (little endian, like both supported arches)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    pc = 0
    acc = 0
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif code in (0x15, 0x35, 0x45):  # BPF_JMP | JEQ / JGE / JSET, BPF_K
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


def errno_of(verdict: int) -> int | None:
    return None if verdict == ALLOW else verdict & 0xFFFF


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_only_unix_and_ip_sockets_can_be_created(machine):
    nr = _header_numbers(machine)
    prog, arch = seccomp.program(machine), AUDIT_ARCH[machine]
    for call in ("socket", "socketpair"):
        for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
            assert errno_of(run(prog, arch, nr[call], (family, socket.SOCK_STREAM))) is None, (call, family)
        for family in (socket.AF_VSOCK, socket.AF_NETLINK, socket.AF_PACKET, socket.AF_ALG, 0, 0xFFFF):
            assert errno_of(run(prog, arch, nr[call], (family, socket.SOCK_STREAM))) == errno.EAFNOSUPPORT
    # The kernel reads the family as an int: garbage above bit 31 neither smuggles a family in nor out.
    assert errno_of(run(prog, arch, nr["socket"], (socket.AF_INET | 1 << 32, 1))) is None
    assert errno_of(run(prog, arch, nr["socket"], (socket.AF_VSOCK | 1 << 32, 1))) == errno.EAFNOSUPPORT
    # Other socket calls work on what socket() made, and stay allowed.
    for call in ("bind", "connect", "accept4", "sendto", "recvfrom"):
        assert errno_of(run(prog, arch, nr[call], (3,))) is None, call


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_file_watching_and_the_earlier_refusals_hold(machine):
    nr = _header_numbers(machine)
    prog, arch = seccomp.program(machine), AUDIT_ARCH[machine]
    watching = ["inotify_init1", "fanotify_init"] + (["inotify_init"] if machine == "x86_64" else [])
    for call in [*watching, "unshare", "setns", "mount", "keyctl", "add_key", "bpf", "io_uring_setup", "ptrace"]:
        assert errno_of(run(prog, arch, nr[call])) == errno.EPERM, call
    assert errno_of(run(prog, arch, nr["clone3"])) == errno.ENOSYS
    assert errno_of(run(prog, arch, nr["clone"], (0x10000000,))) == errno.EPERM  # CLONE_NEWUSER
    for call, args in (("clone", (0x01200011,)), ("read", (0,)), ("openat", (0,)), ("inotify_add_watch", (3,))):
        assert errno_of(run(prog, arch, nr[call], args)) is None, call


def test_other_abis_cannot_reach_the_same_calls_under_other_numbers():
    prog = seccomp.program("x86_64")
    i386_socketcall, i386_socket = 102, 359  # arch/x86/entry/syscalls/syscall_32.tbl
    for nr in (i386_socketcall, i386_socket):
        assert errno_of(run(prog, AUDIT_ARCH_I386, nr, (socket.AF_VSOCK,))) == errno.EPERM
    x86 = _header_numbers("x86_64")
    for call in ("socket", "inotify_init1", "read"):  # x32 numbers are the 64-bit ones with bit 30 set
        assert errno_of(run(prog, AUDIT_ARCH["x86_64"], X32_BIT | x86[call], (socket.AF_VSOCK,))) == errno.EPERM


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_every_syscall_number_matches_the_kernel_headers(machine):
    headers = _header_numbers(machine)
    arch, table = seccomp._ARCHES[machine]
    assert arch == AUDIT_ARCH[machine]
    wrong = {name: (n, headers.get(name)) for name, n in table.items() if headers.get(name) != n}
    assert not wrong, wrong
