"""Rollout code execution in the project sandbox (``datamind.sandbox``), the one the trajectory stage uses.

RL rollouts run model-written code, so they get the same isolation as trajectory sampling, and their
observations are worded by the same ``observation_text`` the SFT trajectories were recorded with (an
error reads "Error:\\n<traceback>", an empty output "[no output: ...]"), so the policy sees one
interpreter in both phases.

One ``Sandbox`` (one zygote process) per training process, started on the first cell, closed by
``close()``; one ``Session`` per trajectory, keyed by the trajectory's working directory and closed by
``end_trajectory`` (the agent loop calls it when the trajectory is done). The session, not the request,
holds the history: in chunked mode it re-executes the trajectory's earlier successful cells before each
new one, exactly as during trajectory sampling.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Literal

from datamind.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, Session
from datamind.train.rollout import DATA_SUBDIR, ExecRequest, ExecResult

log = logging.getLogger(__name__)


@dataclass
class SandboxExecutor:
    """The trainer's ``Executor`` on top of ``datamind.sandbox``.

    The sandbox's ``limits.wall_s`` is the per-cell time limit (the trainer sets it from
    ``rl.exec_timeout_s``); ``ExecRequest.timeout_s`` cannot change it per cell.
    """

    limits: SandboxLimits | None = None  # None: SandboxLimits.from_env() when the sandbox starts
    mode: Literal["chunked", "live"] = "chunked"
    workdir_root: str | None = None  # None: the sandbox makes and removes its own root
    _sandbox: Sandbox | None = field(default=None, init=False, repr=False)
    _sessions: dict[str, Session] = field(default_factory=dict, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)
    # The agent loop runs cells of different trajectories from several threads; one sandbox starts once.
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def sandbox(self) -> Sandbox | None:
        """The running sandbox (its ``layers`` say which isolation is active); None before the first cell."""
        return self._sandbox

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    def __call__(self, req: ExecRequest) -> ExecResult:
        with self._lock:
            session = self._sessions.get(req.workdir) or self._open(req)
        # The loop and the session count the same successful cells; if they disagree, the cell would
        # run against a different state than the loop believes, so refuse rather than train on it.
        if len(req.history) != len(session.history):
            raise RuntimeError(
                f"trajectory {req.workdir}: the request carries {len(req.history)} earlier cells but its sandbox "
                f"session ran {len(session.history)}; one SandboxExecutor session serves one trajectory"
            )
        obs = session.run(req.code)
        # Imported here: datamind.agent pulls in the LLM client (openai), ~1.5 s the trainer pays only
        # once a cell actually runs.
        from datamind.agent.protocol import observation_text

        return ExecResult(observation_text(obs.ok, obs.output, obs.error_kind), obs.ok, obs.error_kind)

    def end_trajectory(self, workdir: str) -> None:
        with self._lock:
            session = self._sessions.pop(workdir, None)
        if session is not None:
            session.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            sandbox, self._sandbox = self._sandbox, None
            self._sessions.clear()  # Sandbox.close closes every session it handed out
        if sandbox is not None:
            sandbox.close()

    def __enter__(self) -> SandboxExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------------
    def _open(self, req: ExecRequest) -> Session:
        if self._closed:
            raise RuntimeError("SandboxExecutor is closed")
        files_dir = os.path.join(req.workdir, DATA_SUBDIR)
        names = sorted(os.listdir(files_dir)) if os.path.isdir(files_dir) else []
        # The workspace copies the real file, never the staging symlink (the data root is hidden inside).
        data_files = [os.path.realpath(os.path.join(files_dir, n)) for n in names]
        session = self._start().session(data_files, language=req.language)
        self._sessions[req.workdir] = session
        return session

    def _start(self) -> Sandbox:
        if self._sandbox is None:
            limits = self.limits or SandboxLimits.from_env()
            try:
                self._sandbox = Sandbox(limits=limits, mode=self.mode, workdir_root=self.workdir_root)
            except SandboxUnavailable as exc:
                raise SandboxUnavailable(
                    f"{exc} -- rollouts execute model-written code and need the sandbox. On a host that cannot "
                    "provide it, set DATAMIND_SANDBOX_ISOLATION=best_effort (degraded isolation, logged)."
                ) from exc
            log.info("rollout sandbox started: mode %s, isolation layers %s", self.mode, self._sandbox.layers)
        return self._sandbox
