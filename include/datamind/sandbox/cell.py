"""What runs inside a forked, already-confined child: execute chunks and report a status frame.

Output goes straight to fds 1/2 (a socket the host reads and caps); the status frame travels on a
separate control socket (fd 3) so printed text can never be mistaken for a status.
"""

from __future__ import annotations

import ast
import builtins
import io
import linecache
import math
import os
import re
import resource
import socket
import sys
import traceback
import warnings

from datamind.sandbox.wire import recv_frame, send_frame

CELL_FILENAME = "<cell>"
HISTORY_FILENAME = "<history>"
# Packages of the host that a cell must never use: a program in a training sample that imports them
# teaches a model to call a library it will not have.  (The mount allow-list is the security layer;
# this makes the import fail the same way whatever the mounts expose.)
HOST_ONLY_PACKAGES = frozenset({"datamind", "datamind_airflow", "airflow"})


class _HostOnlyBlocker:
    """A meta-path finder that answers ``ModuleNotFoundError`` for the host's own packages."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in HOST_ONLY_PACKAGES:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def hide_host_packages() -> None:
    """Forget the host's packages the zygote imported and refuse to import them again."""
    for name in [m for m in sys.modules if m.partition(".")[0] in HOST_ONLY_PACKAGES]:
        del sys.modules[name]
    sys.meta_path.insert(0, _HostOnlyBlocker())


class _Discard(io.TextIOBase):
    def write(self, s: str) -> int:
        return len(s)


def serve(ctl_fd: int, kind: str, language: str, db_path: str | None, sql_timeout_s: float, cpu_s: int) -> None:
    """Loop of the cell process: one request for a one-shot cell, many for a live interpreter."""
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True
    )
    ctl = socket.socket(fileno=ctl_fd)
    namespace = _new_namespace(language, db_path, sql_timeout_s)
    _seed_random_generators()
    hide_host_packages()
    warnings.formatwarning = _format_warning
    # Set-up is over: from here on whatever goes wrong is the cell's own doing.
    send_frame(ctl, {"ready": True})
    while True:
        request = recv_frame(ctl)
        if request is None:
            os._exit(0)
        # Replaying earlier chunks may use up to the session-wide hard cap; the new chunk then gets the
        # same cpu_s allowance in either mode, so chunked and live sessions stop a cell at the same point.
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        status = run_cell(namespace, request.get("prelude", ""), request["code"], before_code=lambda: _arm_cpu(cpu_s))
        sys.stdout.flush()
        sys.stderr.flush()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # A live interpreter with work still running in the background (a thread, a child process, a
        # pending alarm) would burn CPU between turns and write into the next cell's output, or die and
        # be blamed on it: the host retires it, and the next turn replays into a fresh one.
        send_frame(ctl, {"status": status, "maxrss_kb": rss, "retire": kind == "kernel" and _background_work()})
        if kind == "oneshot":
            os._exit(0)


def _arm_cpu(cpu_s: int) -> None:
    # RLIMIT_CPU counts whole seconds of the process's total: rounding what earlier cells used up (not down)
    # gives this cell at least cpu_s of its own (at most one more), however long the session has run.
    used = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(used.ru_utime + used.ru_stime) + cpu_s
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _background_work() -> bool:
    import signal

    threading = sys.modules.get("threading")
    if threading is not None and len(threading.enumerate()) > 1:
        return True
    if signal.getitimer(signal.ITIMER_REAL)[0] or signal.getitimer(signal.ITIMER_VIRTUAL)[0]:
        return True
    if signal.getitimer(signal.ITIMER_PROF)[0]:
        return True
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # raises when there is no child at all
    except ChildProcessError:
        return False
    return True


def _seed_random_generators() -> None:
    """Replayed chunks must see the same random numbers the agent saw: every cell process (and every
    live interpreter) starts from the same seeds, so chunked replay matches a live session."""
    import random

    random.seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)


def _new_namespace(language: str, db_path: str | None, sql_timeout_s: float) -> dict:
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    if language == "sql":
        from datamind.sandbox import sqltools

        tools = sqltools.ReadOnlyDatabase(db_path, timeout_s=sql_timeout_s)
        namespace["get_db_info"] = tools.get_db_info
        namespace["execute_sql"] = tools.execute_sql
    return namespace


def run_cell(namespace: dict, prelude: str, code: str, before_code=None) -> str:
    """Replay `prelude` silently, then run `code` notebook-style. Returns ok|exception|memory."""
    if prelude:
        # Silence replayed output at the fd level too (C extensions and child processes write there).
        real = sys.stdout, sys.stderr
        saved = os.dup(1), os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        sys.stdout = sys.stderr = _Discard()
        failure = None
        try:
            _exec(prelude, HISTORY_FILENAME, namespace)
        except BaseException as exc:  # noqa: BLE001 - reported to the agent, never raised
            failure = exc
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, devnull):
                os.close(fd)
            sys.stdout, sys.stderr = real
        if failure is not None:
            print("Error while re-running the earlier successful cells:", file=sys.stderr)
            return _report(failure)
    if before_code is not None:
        before_code()
    try:
        _exec(code, CELL_FILENAME, namespace, display_last=True)
        return "ok"
    except SystemExit as exc:
        if exc.code in (None, 0):
            return "ok"
        return _report(exc)
    except BaseException as exc:  # noqa: BLE001
        return _report(exc)


def _exec(source: str, filename: str, namespace: dict, display_last: bool = False) -> None:
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = ast.parse(source, filename=filename)
    last = None
    if display_last and tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(last, filename, "eval"), namespace)
        if value is not None:
            print(repr(value))


# Any path into an install folder (a traceback frame, a warning's location, a loader's error message), up to
# and including the folder: what follows is the package-relative name a reader needs.
_INSTALL_PREFIX = re.compile(
    r"(?:/[^\s\"':/]+)*/(?:site|dist)-packages/|" + re.escape(os.path.dirname(os.__file__)) + "/"
)


def _without_host_paths(text: str) -> str:
    """Library files named relative to their package: the worker's install paths are no part of an
    observation (they would end up in training samples)."""
    return _INSTALL_PREFIX.sub("", text)


_plain_format_warning = warnings.formatwarning


def _format_warning(message, category, filename, lineno, line=None) -> str:
    return _without_host_paths(_plain_format_warning(message, category, filename, lineno, line))


# The package the tools (execute_sql, get_db_info) are written in: their frames and module names are the
# platform's internals, not something a trained agent could call or read about.
_TOOL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _format(exc: BaseException, tb) -> str:
    frames = traceback.extract_tb(tb)
    inside = [f for f in frames if f.filename.startswith(_TOOL_DIR)]
    if not inside and not type(exc).__module__.startswith("datamind"):
        return "".join(traceback.format_exception(type(exc), exc, tb))
    # An error raised inside a tool reads as the tool's own message at the agent's call site.
    shown = [f for f in frames if not f.filename.startswith(_TOOL_DIR)]
    head = ["Traceback (most recent call last):\n", *traceback.format_list(shown)] if shown else []
    return "".join(head) + f"{type(exc).__name__}: {exc}\n"


def _report(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    text = _without_host_paths(_format(exc, tb))
    try:
        sys.stderr.write(text)
    except MemoryError:
        sys.stderr.write(f"{type(exc).__name__}\n")
    return "memory" if isinstance(exc, MemoryError) or _loader_out_of_memory(exc) else "exception"


# What glibc's loader says when mmap refuses it (ENOMEM): the address-space cap, not a missing package.
_LOADER_ENOMEM = ("failed to map segment from shared object", "cannot allocate memory")


def _loader_out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, ImportError) and any(m in str(exc).lower() for m in _LOADER_ENOMEM)
