"""Public API of the code-execution sandbox used by the trajectory sampler.

    with Sandbox(SandboxLimits(), mode="chunked") as sandbox:
        with sandbox.session(["/data/sales.csv"]) as s:
            obs = s.run("import pandas as pd\\ndf = pd.read_csv('sales.csv')\\nprint(df.shape)")

``chunked`` (default) keeps only the text of successful chunks and re-executes them, prints stripped
and output silenced, before each new chunk in a fresh fork, so nothing lives between turns.
``live`` keeps one confined interpreter per session (faster turns, memory held between turns).

Isolation is stacked from layers and the active set is reported in ``Sandbox.layers``. Policy
``strict`` (default) refuses to start unless there is no network (network namespace), host paths are
hidden (mount namespace: data root, AIRFLOW_HOME, $HOME, the project, /proc, private /tmp), cells hold
no privilege (a dedicated uid per trajectory as root; a user namespace without capabilities otherwise)
and forks are capped (pids cgroup or RLIMIT_NPROC). ``best_effort`` runs with whatever the host offers
and logs a warning naming the missing layers; nothing ever runs without rlimits and the wall-time kill.
Infrastructure failures (the zygote died, fork failed) raise instead of becoming observations, so they
never end up in training data as if the agent had caused them.
"""

from __future__ import annotations

import logging
import os
import random
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from datamind.sandbox import guard
from datamind.sandbox.forkserver import CELL_RUNTIME_ENV, ZygoteClient
from datamind.sandbox.limits import LAYER_GUARD, SandboxLimits, SandboxUnavailable, missing_layers
from datamind.sandbox.truncate import truncate_head_tail
from datamind.sandbox.wire import FrameBuffer, send_frame
from datamind.sandbox.workspace import Workspace

log = logging.getLogger(__name__)

ErrorKind = Literal["blocked", "exception", "timeout", "memory", "output_limit", "killed"]
DB_SUFFIXES = (".sqlite", ".sqlite3", ".db", ".db3")
# Per-trajectory uids come from a range no real account uses; a random pick keeps concurrent
# sandboxes (several Airflow workers on one host) apart.
_UID_BASE, _UID_SPAN = 1_900_000_000, 1 << 24
_EXIT_GRACE_S = 5.0
_SETUP_TIMEOUT_S = 30.0
_STATUS_FRAME_MAX = 4096  # a status frame is tiny; the cell controls this channel, so bound it
_STATUSES = ("ok", "exception", "memory")
_ROOT_PREFIX = "datamind-sandbox-"


@dataclass(frozen=True)
class Observation:
    ok: bool
    output: str  # already truncated to head + tail
    error_kind: ErrorKind | None
    duration_s: float
    peak_rss_kb: int


class Sandbox:
    """Owns the zygote process; hands out sessions (one per trajectory)."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        mode: Literal["chunked", "live"] = "chunked",
        workdir_root: str | None = None,
    ) -> None:
        if mode not in ("chunked", "live"):
            raise ValueError(f"mode must be 'chunked' or 'live', got {mode!r}")
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable("the sandbox needs Linux namespaces and rlimits")
        self.limits = limits or SandboxLimits()
        self.mode = mode
        self.isolation_mode = self._pick_isolation_mode()
        self._own_root = workdir_root is None
        if self._own_root:
            _sweep_stale_roots()
        self.workdir_root = Path(workdir_root or tempfile.mkdtemp(prefix=f"{_ROOT_PREFIX}{os.getpid()}-")).resolve()
        self.workdir_root.mkdir(parents=True, exist_ok=True)
        # Cells run under other uids as root (dedicated uid, or nobody in userns mode): they must traverse.
        os.chmod(self.workdir_root, 0o711 if os.geteuid() == 0 else 0o700)
        self.hidden_paths = _default_hidden_paths(self.limits)
        self._sessions: set[Session] = set()
        self._warmed: set[str] = set()  # modules the zygote was asked to import (``warm``)
        self._warm_lock = threading.Lock()
        self._n_sessions = 0
        self._closed = False
        config = {
            "mode": self.isolation_mode,
            "hide": self.hidden_paths,
            "expose": [(str(self.workdir_root), True)],
            "workdir_root": str(self.workdir_root),
            "tmp_mb": self.limits.tmp_mb,
            "preload": list(self.limits.preload),
            "warm_on_demand": list(self.limits.warm_on_demand),
            "cgroup": self.limits.cgroup,
        }
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **CELL_RUNTIME_ENV}
        try:
            self._client = ZygoteClient(config, env)
        except BaseException:
            if self._own_root:
                shutil.rmtree(self.workdir_root, ignore_errors=True)
            raise
        self.layers = sorted(set(self._client.ready["layers"]) | ({LAYER_GUARD} if self.limits.guard else set()))
        self.notes = list(self._client.ready["notes"])
        missing = missing_layers(set(self.layers))
        if missing and self.limits.isolation == "strict":
            self.close()
            raise SandboxUnavailable(
                f"isolation policy 'strict' not met: missing {missing}; active layers {self.layers}; "
                f"notes {self.notes}. Fix the host or set isolation='best_effort' explicitly."
            )
        if missing:
            log.warning(
                "sandbox running with degraded isolation (policy best_effort): missing %s, active %s",
                missing,
                self.layers,
            )
        self._warm_modules(self.limits.warm_at_start)

    def _pick_isolation_mode(self) -> str:
        wanted = self.limits.isolation_mode
        if wanted == "root" and os.geteuid() != 0:
            raise SandboxUnavailable("isolation_mode='root' needs the worker to run as root")
        if wanted == "auto":
            return "root" if os.geteuid() == 0 else "userns"
        return wanted

    # -- public -----------------------------------------------------------------------------------
    def session(
        self,
        data_files: list[str],
        workdir_parent: str | None = None,
        language: Literal["python", "sql"] = "python",
        mode: Literal["chunked", "live"] | None = None,
    ) -> Session:
        """A new trajectory's session, in ``mode`` (default: the sandbox's)."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        mode = mode or self.mode
        if mode not in ("chunked", "live"):
            raise ValueError(f"mode must be 'chunked' or 'live', got {mode!r}")
        if language not in ("python", "sql"):
            raise ValueError(f"language must be 'python' or 'sql', got {language!r}")
        parent = Path(workdir_parent).resolve() if workdir_parent else self.workdir_root
        if parent != self.workdir_root and self.workdir_root not in parent.parents:
            raise ValueError(
                f"workdir_parent {parent} is hidden inside the sandbox (cells see only the working root); "
                f"use a directory under {self.workdir_root} or pass Sandbox(workdir_root=...)"
            )
        parent.mkdir(parents=True, exist_ok=True)
        db_path = None
        if language == "sql":
            dbs = [f for f in data_files if f.lower().endswith(DB_SUFFIXES)]
            if not dbs:
                raise ValueError(f"language='sql' needs a database file ({', '.join(DB_SUFFIXES)}), got {data_files}")
            db_path = os.path.basename(dbs[0])
        ident = _UID_BASE + random.SystemRandom().randrange(_UID_SPAN) if self.isolation_mode == "root" else None
        gid = ident if ident is not None else self._client.ready.get("cell_gid")
        workspace = Workspace.create(parent, list(data_files), gid=gid)
        self._n_sessions += 1
        sess = Session(self, workspace, language, ident, db_path, f"s-{self._n_sessions}", mode)
        self._sessions.add(sess)
        return sess

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for sess in list(self._sessions):
                try:
                    sess.close()
                except Exception:  # noqa: BLE001 - keep closing the rest; the zygote kills them anyway
                    log.exception("closing a sandbox session failed")
            self._client.close()
        finally:
            if self._own_root:
                shutil.rmtree(self.workdir_root, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------------
    def _warm(self, code: str, language: str) -> None:
        """Have the zygote import what this (successful) cell imported from the warm-on-demand packages; it does
        so between requests, and every interpreter forked afterwards starts with them."""
        if language != "python" or not self.limits.warm_on_demand:
            return
        self._warm_modules(guard.imports_of(code))

    def _warm_modules(self, modules) -> None:
        allowed = set(self.limits.warm_on_demand)
        with self._warm_lock:
            names = {m for m in modules if m.split(".")[0] in allowed} - self._warmed
            self._warmed |= names
        if names:  # the zygote imports between requests; a spawn sent meanwhile waits its turn
            self._client.call({"op": "warm", "modules": sorted(names)}, wait=False)

    def _spawn(self, sess: Session, kind: str) -> _Cell:
        out_host, out_cell = socket.socketpair()
        ctl_host, ctl_cell = socket.socketpair()
        request = {
            "session": sess.sid,
            "workdir": str(sess.workspace.path),
            "uid": sess.uid,
            "gid": sess.uid,
            "kind": kind,
            "language": sess.language,
            "db_path": sess.db_path,
            "limits": asdict(self.limits),
        }
        try:
            pid = self._client.spawn(request, [out_cell.fileno(), ctl_cell.fileno()])
        except BaseException:
            for s in (out_host, ctl_host):
                s.close()
            raise
        finally:
            out_cell.close()
            ctl_cell.close()
        cell = _Cell(self._client, pid, out_host, ctl_host)
        cell.wait_ready(max(_SETUP_TIMEOUT_S, self.limits.wall_s))
        if kind == "kernel":
            self._client.call({"op": "pin", "pid": pid})
        return cell


class _Cell:
    """Host-side handle on one confined process (a one-shot cell or a live interpreter)."""

    def __init__(self, client: ZygoteClient, pid: int, out: socket.socket, ctl: socket.socket) -> None:
        self.client, self.pid, self.out, self.ctl = client, pid, out, ctl
        self.exit = client.exit_info(pid)
        self.frames = FrameBuffer(max_frame=_STATUS_FRAME_MAX)
        self.dead = False
        self.retire = False  # the interpreter left work running in the background: do not reuse it

    def wait_ready(self, timeout_s: float) -> None:
        """Wait for the cell to finish its set-up. A cell that dies or stalls before then failed for the
        platform's reasons (no agent code has run yet): that is raised, never returned as an observation."""
        deadline = time.monotonic() + timeout_s
        said = bytearray()
        sel = selectors.DefaultSelector()
        sel.register(self.out, selectors.EVENT_READ, "out")
        sel.register(self.ctl, selectors.EVENT_READ, "ctl")
        why = "it stopped before it was ready"
        try:
            while time.monotonic() < deadline:
                if self.exit.event.is_set() and not sel.select(timeout=0):
                    break
                for key, _ in sel.select(timeout=min(deadline - time.monotonic(), 0.05)):
                    try:
                        data = key.fileobj.recv(1 << 16)
                    except OSError:
                        data = b""
                    if key.data == "out":
                        said += data[: max(0, 65536 - len(said))]
                        if not data:
                            sel.unregister(key.fileobj)
                        continue
                    frames = self.frames.feed(data) if data else []
                    if frames and isinstance(frames[0], dict) and frames[0].get("ready") is True:
                        return
                    why = "it broke its status channel" if data else "it stopped before it was ready"
                    raise _SetupFailed()
            else:
                why = f"it was not ready within {timeout_s:g} s"
        except (_SetupFailed, ValueError):
            pass
        finally:
            sel.close()
        self.kill()
        self.finish()
        detail = said.decode("utf-8", errors="replace").strip()[-2000:]
        raise SandboxUnavailable(f"sandbox cell set-up failed ({why}): {detail or 'no output'}")

    def request(self, prelude: str, code: str, limits: SandboxLimits) -> tuple[str | None, bytes, int, bool]:
        """Send one chunk; returns (status or kill reason, raw output, peak rss kB, process still alive)."""
        deadline = time.monotonic() + limits.wall_s
        try:
            send_frame(self.ctl, {"prelude": prelude, "code": code})
        except OSError:
            pass  # died already; the exit event tells why
        output = bytearray()
        status, maxrss, reason = None, 0, None
        sel = selectors.DefaultSelector()
        sel.register(self.out, selectors.EVENT_READ, "out")
        sel.register(self.ctl, selectors.EVENT_READ, "ctl")
        try:
            while status is None and reason is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    reason = "timeout"
                    break
                if self.exit.event.is_set() and not sel.select(timeout=0):
                    break
                for key, _ in sel.select(timeout=min(remaining, 0.02)):
                    try:
                        data = key.fileobj.recv(1 << 16)
                    except OSError:  # reset: the cell died with our request unread
                        data = b""
                    if not data:
                        sel.unregister(key.fileobj)
                        continue
                    if key.data == "out":
                        output += data
                        if len(output) > limits.max_output_bytes:
                            reason = "output_limit"
                            break
                    else:
                        try:
                            status, maxrss, self.retire = _parse_status(self.frames.feed(data))
                        except ValueError:
                            reason = "protocol"
                            break
        finally:
            sel.close()
        if reason is not None:
            self.kill()
        if status is not None and reason is None:
            _drain(self.out, output, limits.max_output_bytes, block=False)
        return (reason or status), bytes(output[: limits.max_output_bytes]), maxrss, not self.dead

    def kill(self) -> None:
        self.client.kill(self.pid)
        self.dead = True

    def finish(self, output: bytearray | None = None, max_bytes: int = 0) -> None:
        """Wait until the zygote has reaped the process (and its cgroup), then release the sockets."""
        self.exit.event.wait(_EXIT_GRACE_S) or (self.kill(), self.exit.event.wait(_EXIT_GRACE_S))
        if output is not None:
            _drain(self.out, output, max_bytes, block=True)
        self.out.close()
        self.ctl.close()
        self.client.forget(self.pid)
        self.dead = True


def _parse_status(frames: list) -> tuple[str | None, int, bool]:
    """(status, peak rss, retire) from the cell's own status frame, treated as untrusted input."""
    if not frames:
        return None, 0, False
    frame = frames[0]
    if not isinstance(frame, dict) or frame.get("status") not in _STATUSES:
        raise ValueError(f"malformed status frame: {str(frame)[:100]}")
    maxrss = frame.get("maxrss_kb")
    return frame["status"], maxrss if isinstance(maxrss, int) and maxrss >= 0 else 0, frame.get("retire") is True


def _drain(sock: socket.socket, output: bytearray, max_bytes: int, *, block: bool) -> None:
    sock.settimeout(0.2 if block else 0.0)
    try:
        while len(output) <= max_bytes:
            data = sock.recv(1 << 16)
            if not data:
                break
            output += data
    except (TimeoutError, BlockingIOError, OSError):
        pass


class _SetupFailed(Exception):
    pass


class Session:
    """One trajectory: a working directory, its history of successful chunks, and (live mode) an interpreter."""

    def __init__(
        self,
        sandbox: Sandbox,
        workspace: Workspace,
        language: str,
        uid: int | None,
        db_path: str | None,
        sid: str,
        mode: str = "chunked",
    ) -> None:
        self.sandbox, self.workspace, self.language, self.mode = sandbox, workspace, language, mode
        self.uid, self.db_path, self.sid = uid, db_path, sid
        self.history: list[str] = []  # successful chunks, prints stripped
        self._kernel: _Cell | None = None
        self._closed = False
        self.memory_peak_bytes: int | None = None  # all the session's memory at its peak (cgroup), once closed

    @property
    def workdir(self) -> Path:
        return self.workspace.path

    def run(self, code: str) -> Observation:
        if self._closed:
            raise RuntimeError("session is closed")
        limits = self.sandbox.limits
        started = time.monotonic()
        refusal = self._refuse(code, limits)
        if refusal is not None:
            kind, text = refusal
            return Observation(
                False,
                truncate_head_tail(text, limits.head_chars, limits.tail_chars),
                kind,
                time.monotonic() - started,
                0,
            )
        prelude = "\n".join(self.history)
        if self.mode == "chunked":
            self.workspace.reset()
            cell = self.sandbox._spawn(self, "oneshot")
            outcome, raw, maxrss, _ = cell.request(prelude, code, limits)
            buf = bytearray(raw)
            cell.finish(buf, limits.max_output_bytes)
            raw = bytes(buf[: limits.max_output_bytes])
            maxrss = maxrss or cell.exit.maxrss_kb
            exit_info = cell.exit
            oom_kills = exit_info.oom_kills
        else:
            self.workspace.restore_inputs()
            if self._kernel is not None and self._kernel.exit.event.is_set():
                # It died between turns (an alarm, a stray signal): that is not the next cell's doing.
                self._kernel.finish()
                self._kernel = None
            if self._kernel is None or self._kernel.dead:
                self._kernel = self.sandbox._spawn(self, "kernel")
            else:
                prelude = ""
            outcome, raw, maxrss, alive = self._kernel.request(prelude, code, limits)
            exit_info = self._kernel.exit
            if not alive or outcome not in ("ok", "exception", "memory") or self._kernel.retire:
                if alive:
                    self._kernel.kill()
                self._kernel.finish()
                maxrss = maxrss or exit_info.maxrss_kb
                oom_kills = exit_info.oom_kills
                self._kernel = None
            else:
                # The turn is over: whatever it started (a double-forked grandchild too) goes now, and
                # what such a process wrote after the cell reported is dropped, never shown next turn.
                reply = self.sandbox._client.call({"op": "end_turn", "pid": self._kernel.pid})
                oom_kills = reply.get("oom_kills", 0)
                _drain(self._kernel.out, bytearray(), limits.max_output_bytes, block=False)
        if outcome is None and not self.sandbox._client.alive:
            raise SandboxUnavailable("the sandbox zygote exited while a cell was running")
        kind, note = _classify(outcome, exit_info, limits)
        if oom_kills and outcome is not None:
            # The cell itself reported (or was stopped by the host), so _classify said nothing of memory; but
            # the session's limit killed some of what it started, and its result may be missing that work.
            note = "\n".join(n for n in (note, _killed_for_memory(oom_kills, limits)) if n)
        text = truncate_head_tail(raw.decode("utf-8", errors="replace"), limits.head_chars, limits.tail_chars)
        if note:
            text = f"{text.rstrip()}\n{note}" if text.strip() else note
        if kind is None:
            self.history.append(guard.strip_prints(code))
            self.sandbox._warm(code, self.language)
        return Observation(kind is None, text, kind, time.monotonic() - started, int(maxrss))

    def _refuse(self, code: str, limits: SandboxLimits) -> tuple[ErrorKind, str] | None:
        if not isinstance(code, str):
            return "blocked", f"code must be a string, got {type(code).__name__}"
        if len(code) > limits.max_code_chars:
            return "blocked", f"Blocked: the code is {len(code)} characters long (limit {limits.max_code_chars})."
        try:
            violations = guard.check(code, self.language) if limits.guard else []
        except SyntaxError as exc:
            pointer = f"\n    {exc.text.rstrip()}\n    {' ' * max((exc.offset or 1) - 1, 0)}^" if exc.text else ""
            return "exception", f'  File "<cell>", line {exc.lineno}{pointer}\nSyntaxError: {exc.msg}'
        if violations:
            return "blocked", guard.describe(violations)
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._kernel is not None:
            self._kernel.kill()
            self._kernel.finish()
            self._kernel = None
        try:
            reply = self.sandbox._client.call({"op": "close_session", "session": self.sid})
            self.memory_peak_bytes = reply.get("memory_peak_bytes")
        except SandboxUnavailable:
            pass  # the zygote is gone, and its cgroups with it
        self.workspace.cleanup()
        self.sandbox._sessions.discard(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _classify(outcome: str | None, exit_info, limits: SandboxLimits) -> tuple[ErrorKind | None, str]:
    if outcome == "ok":
        return None, ""
    if outcome == "exception":
        return "exception", ""
    if outcome == "memory":
        return "memory", f"[sandbox] memory limit reached ({limits.memory_mb} MB address space)."
    if outcome == "timeout":
        return "timeout", f"[sandbox] execution stopped: wall-time limit of {limits.wall_s:g} s exceeded."
    if outcome == "protocol":
        return "killed", "[sandbox] the process corrupted its status channel and was stopped."
    if outcome == "output_limit":
        return "output_limit", f"[sandbox] execution stopped: output exceeded {limits.max_output_bytes} bytes."
    status = exit_info.status
    if exit_info.oom_kills:
        return "memory", f"[sandbox] {_session_memory(limits)}."
    if status >= 0 and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and exit_info.cpu_s >= limits.cpu_s):
            return "timeout", f"[sandbox] execution stopped: CPU-time limit of {limits.cpu_s} s exceeded."
        return "killed", f"[sandbox] the process was killed by {signal.Signals(sig).name}."
    if status >= 0 and os.WIFEXITED(status):
        return "killed", f"[sandbox] the process exited with code {os.WEXITSTATUS(status)} before finishing."
    return "killed", "[sandbox] the process ended without reporting a result."


def _session_memory(limits: SandboxLimits) -> str:
    return f"memory limit reached ({limits.memory_mb} MB for the session)"


def _killed_for_memory(n: int, limits: SandboxLimits) -> str:
    """The note for processes of a cell (its children, or the cell itself) the session's memory limit killed."""
    return f"[sandbox] {n} of this cell's processes {'was' if n == 1 else 'were'} killed: {_session_memory(limits)}."


def _sweep_stale_roots() -> None:
    """Remove working-directory roots left by sandbox owners that died without closing (SIGKILL, OOM)."""
    tmp = Path(tempfile.gettempdir())
    for path in tmp.glob(f"{_ROOT_PREFIX}*-*"):
        pid = path.name[len(_ROOT_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            if path.stat().st_uid != os.geteuid():
                continue
            os.kill(int(pid), 0)
            continue  # owner alive
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def _default_hidden_paths(limits: SandboxLimits) -> list[str]:
    from datamind.settings import REPO_ROOT, Settings

    hidden = [
        str(REPO_ROOT),
        os.path.expanduser("~"),
        os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow"),
    ]
    data_root = Settings.from_env().data_root
    if "://" not in data_root or data_root.startswith("file://"):
        hidden.append(data_root.removeprefix("file://"))
    hidden += list(limits.hide_paths)
    return [os.path.realpath(p) for p in hidden if p and os.path.realpath(p) != "/"]
