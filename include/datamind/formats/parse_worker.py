"""Parse untrusted files in a child interpreter with memory and CPU caps.

A reader that aborts (a Rust allocation failure is SIGABRT), allocates without bound or spins would take
the whole ingest task with it, and every file of the shard would lose its catalog row, again on each
retry. Here one child process parses the shard's files one after another under ``RLIMIT_AS``
(``limits.parse_memory_mb``) and a per-file ``RLIMIT_CPU`` budget (``limits.parse_cpu_s``, re-armed
before each file); when it dies, that file is rejected as ``parse_limit`` with the signal and the reader's
last stderr line, and a fresh child takes the next file. A later read of a staged copy reads the same
untrusted bytes and goes through the same child under the same caps: profiling replays the ``read_options``
ingestion recorded (``IsolatedParser.load_recorded``), synthesis runs the reader programs it generated
(``IsolatedParser.call``), and only their results (frames, names) come back to the stage's process.

The child runs ``python -I`` with a minimal environment (no credentials), talks over its stdin/stdout
with length-prefixed pickle frames, and has its own stdout moved to stderr so a library's print cannot
corrupt the channel. Pickle is acceptable here: the frames are produced by our loader code, not by the
file; a parser exploit that reaches code execution is outside what this layer defends.
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar

from datamind.formats import LoadResult
from datamind.settings import Limits

_HEADER = struct.Struct("!Q")
_WALL_FACTOR, _WALL_SLACK_S = 2, 30  # wall-clock kill: CPU budget x 2 + 30 s (I/O waits, a stuck reader)
_START_TIMEOUT_S = 120
_CHILD_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
_SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "ARROW_NUM_THREADS": "1"}
T = TypeVar("T")


class ParserUnavailable(RuntimeError):
    """The child could not start at all: an infrastructure fault (retry the task), not a property of a file."""


class ParseLimit(RuntimeError):
    """A ``call`` died, stalled or ran out of memory in the child: a property of the file (``parse_limit``)."""


def _write_frame(fh: BinaryIO, obj: object) -> None:
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(_HEADER.pack(len(payload)) + payload)
    fh.flush()


def _read_exact(fh: BinaryIO, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = fh.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(fh: BinaryIO) -> object | None:
    head = _read_exact(fh, _HEADER.size)
    if head is None:
        return None
    body = _read_exact(fh, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


class IsolatedParser:
    """``load_tables`` for untrusted files, one child process at a time; use as a context manager."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._proc: subprocess.Popen | None = None
        self._stderr: BinaryIO | None = None
        self.crashes = 0

    def __enter__(self) -> IsolatedParser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def load(self, local_path: str, filename: str | None = None) -> LoadResult:
        return self._request(local_path, filename, {})

    def _request(self, local_path: str, filename: str | None, extra: dict) -> LoadResult:
        result, death = self._exchange({"path": local_path, "filename": filename, **extra})
        if isinstance(result, LoadResult):
            return result
        from datamind.formats import sniff

        declared = sniff.declared_format(filename or os.path.basename(local_path))
        return LoadResult("unknown", declared, None, [], death or "the parser sent no result", "parse_limit")

    def _exchange(self, request: dict) -> tuple[object | None, str | None]:
        """(the child's answer, None) or (None, why it has none: the child died or stalled and is gone)."""
        proc = self._ensure_child()
        started = time.monotonic()
        self._stderr.seek(0)
        self._stderr.truncate()
        try:
            _write_frame(proc.stdin, request)
            result, stalled = self._await(proc, self.limits.parse_cpu_s * _WALL_FACTOR + _WALL_SLACK_S)
        except (OSError, EOFError, pickle.UnpicklingError):
            result, stalled = None, False
        if result is not None:
            return result, None
        return None, self._death(proc, time.monotonic() - started, stalled)

    def load_recorded(self, local_path: str, read_options: list[dict], frames: bool = True) -> LoadResult:
        """``loaders.load_recorded`` in the capped child: a later stage's replay of what ingestion recorded
        reads the same untrusted bytes, so it runs under the same caps.  A failure (the reader died, ran out
        of its budget or raised) is the result's ``error`` / ``error_code``, never an exception."""
        return self._request(local_path, None, {"recorded": read_options, "frames": frames})

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the capped child, for a later stage's own reading of a staged file beyond a recorded
        replay (synthesis runs the reader programs it generated there).  ``fn`` is a module-level function
        (pickle sends it by name; its module is imported in the child, under the cap, so keep it light) and
        its result comes back by pickle.  Raises ``ParseLimit`` when the call died, stalled or ran out of
        memory; what ``fn`` raised otherwise is raised here (as ``RuntimeError`` when it cannot cross)."""
        result, death = self._exchange({"call": fn, "args": args})
        if death is not None:
            raise ParseLimit(death)
        outcome, value = result
        if outcome == "ok":
            return value
        if outcome == "limit":
            raise ParseLimit(value)
        raise value

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # -- internals ----------------------------------------------------------------------------------
    def _ensure_child(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stderr = self._stderr or tempfile.TemporaryFile()
        env = {k: os.environ[k] for k in _CHILD_ENV_KEYS if k in os.environ} | _SINGLE_THREAD
        proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "datamind.formats.parse_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd="/",
            start_new_session=True,
        )
        _write_frame(proc.stdin, self.limits)
        ready, _ = self._await(proc, _START_TIMEOUT_S)
        if ready != "ready":
            proc.kill()
            proc.wait()
            self._stderr.seek(0)
            raise ParserUnavailable(f"the parser process did not start: {_last_words(self._stderr.read())}")
        self._proc = proc
        return proc

    @staticmethod
    def _await(proc: subprocess.Popen, timeout_s: float) -> tuple[object | None, bool]:
        """(the next frame or None on death, whether it stalled past ``timeout_s`` and was killed)."""
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        if not ready:
            proc.kill()
            return None, True
        return _read_frame(proc.stdout), False  # a frame follows once its first byte is there (EOF on death)

    def _death(self, proc: subprocess.Popen, elapsed: float, stalled: bool) -> str:
        """Why the child died or stalled on this request (the next request gets a new child)."""
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # alive but its channel is broken
            proc.kill()
            code = proc.wait()
        self._proc = None
        self.crashes += 1
        self._stderr.seek(0)
        last = _last_words(self._stderr.read())
        limits = self.limits
        if stalled:
            message = f"no result after {elapsed:.0f} s of wall-clock time (the reader is stuck)"
        elif code == -signal.SIGXCPU or (code == -signal.SIGKILL and elapsed >= limits.parse_cpu_s):
            message = f"parsing used more than the {limits.parse_cpu_s:,} s CPU cap"
        elif code < 0:
            name = signal.Signals(-code).name
            hint = f" (usually an allocation past the {limits.parse_memory_mb:,} MB cap)" if name == "SIGABRT" else ""
            message = f"the reader crashed with {name}{hint}"
        else:
            message = f"the parser process exited with code {code}"
        if last:
            message += f"; its last words: {last}"
        return message[:500]


def _last_words(raw: bytes) -> str:
    """The reader's last meaningful stderr line (a Rust panic's message, a Python exception)."""
    lines = [ln.strip() for ln in raw.decode("utf-8", "replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("note: run with")]
    return lines[-1][:200] if lines else ""


# ------------------------------------------------------------------------------------------- child
def _child_main() -> None:
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints from any library land in stderr, never in the result channel
    requests = sys.stdin.buffer
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limits = _read_frame(requests)
    from datamind.formats import load_tables  # imported before the cap: the cap is for parsing

    cap = limits.parse_memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    _write_frame(channel, "ready")
    while True:
        request = _read_frame(requests)
        if request is None:
            return
        used = resource.getrusage(resource.RUSAGE_SELF)
        budget = int(used.ru_utime + used.ru_stime) + 1 + limits.parse_cpu_s
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        resource.setrlimit(resource.RLIMIT_CPU, (budget if hard == resource.RLIM_INFINITY else min(budget, hard), hard))
        if "call" in request:
            _write_frame(channel, _call(request["call"], request["args"], limits))
        elif "recorded" in request:
            _write_frame(channel, _replay(request["path"], request["recorded"], request["frames"], limits))
        else:
            _write_frame(channel, load_tables(request["path"], limits, filename=request["filename"]))


def _replay(path: str, recorded: list[dict], frames: bool, limits: Limits) -> LoadResult:
    """``load_recorded`` as a LoadResult: what the file raises is its result, like ``load_tables``'s."""
    from datamind.formats import load_recorded

    fmt = recorded[0]["format"] if recorded else "unknown"
    try:
        return LoadResult(fmt, None, None, load_recorded(path, recorded, frames=frames))
    except MemoryError:
        message = f"reading needed more than the {limits.parse_memory_mb:,} MB memory cap"
        return LoadResult(fmt, None, None, [], message, "parse_limit")
    except Exception as exc:  # noqa: BLE001 - a reader's failure is a property of the file, recorded by the caller
        return LoadResult(fmt, None, None, [], f"{type(exc).__name__}: {exc}"[:500], "unloadable")


def _call(fn: Callable, args: tuple, limits: Limits) -> tuple[str, object]:
    """("ok", result) | ("limit", why) | ("raised", the exception, as it can be unpickled by the parent)."""
    try:
        return "ok", fn(*args)
    except MemoryError:
        return "limit", f"reading needed more than the {limits.parse_memory_mb:,} MB memory cap"
    except Exception as exc:  # noqa: BLE001 - the caller decides what a failure of its reading means
        try:
            pickle.loads(pickle.dumps(exc))  # an exception whose __init__ its args do not fit cannot cross
        except Exception:  # noqa: BLE001
            exc = RuntimeError(f"{type(exc).__name__}: {exc}"[:500])
        return "raised", exc


if __name__ == "__main__":
    _child_main()
