"""Multi-turn agent rollouts: the policy writes a turn, ``<code>`` runs, ``<interpreter>`` output comes back.

``Rollout`` is the seam the trainer depends on. ``AgentLoopRollout`` is the built-in loop, running
code through any ``Executor``; the trainer's is ``datamind.train.sandbox_exec.SandboxExecutor``, the
trajectory stage's sandbox (one session per trajectory, closed through ``end_trajectory``), so RL
rollouts run model-written code under the same isolation as every other trajectory.

The loop keeps each trajectory's successful cells (``ExecRequest.history``) so the executor can check that
its session holds the same state (the paper's "chunked code maintenance": the sandbox's chunked mode
re-executes them before each new cell).
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol

from datamind.agent.protocol import cut_at_stop
from datamind.agent.protocol import strict_turn as parse_turn

Message = dict[str, str]

log = logging.getLogger(__name__)

# Where a trajectory's data files are staged, relative to its workdir; the file is also linked into the
# workdir itself, where the prompts of the trajectory stage tell the agent it is.
DATA_SUBDIR = os.path.join("data", "files")


def exec_language(data_format: str | None) -> str:
    """The sandbox language for a data format (the trajectory stage's rule: SQLite gets the SQL tools)."""
    return "sql" if (data_format or "").lower() == "sqlite" else "python"


class GenerateFn(Protocol):
    """The policy: next assistant turn (text, stop at ``</code>``/``</answer>``) for each conversation."""

    def __call__(self, conversations: Sequence[list[Message]], max_new_tokens: int) -> list[str]: ...


@dataclass(frozen=True)
class ExecRequest:
    code: str
    history: tuple[str, ...]  # earlier cells of this trajectory that ran without error
    workdir: str  # per-trajectory directory, unique per trajectory; the data file is under data/files/
    timeout_s: float
    language: str = "python"  # "sql": the session offers get_db_info / execute_sql on the database


@dataclass(frozen=True)
class ExecResult:
    output: str
    ok: bool
    error_kind: str | None = None  # the sandbox's kind (blocked, exception, timeout, memory, ...) when not ok


Executor = Callable[[ExecRequest], ExecResult]


@dataclass(frozen=True)
class RolloutPrompt:
    sample_id: str
    messages: list[Message]  # system + user turns
    question: str
    ground_truth: str
    data_uri: str | None = None
    data_format: str | None = None  # csv | xlsx | sqlite


@dataclass
class Trajectory:
    messages: list[Message]  # generated turns only (assistant + tool), prompt excluded
    status: str  # answered | void | max_turns | length
    n_turns: int = 0
    n_void_turns: int = 0
    response_tokens: int = 0


class Rollout(Protocol):
    def __call__(
        self, prompt: RolloutPrompt, *, group_size: int, generate: GenerateFn, execute: Executor
    ) -> list[Trajectory]: ...


def interpreter_message(output: str) -> Message:
    # A closing tag printed by the program would end the block early for every reader of the trajectory.
    body = output.replace("</interpreter>", "</ interpreter>").rstrip()
    return {"role": "tool", "content": f"<interpreter>\n{body}\n</interpreter>"}


@dataclass
class _State:
    workdir: str
    language: str = "python"
    messages: list[Message] = field(default_factory=list)
    history: list[str] = field(default_factory=list)
    tokens: int = 0
    n_void: int = 0
    status: str | None = None
    code: str | None = None  # this turn's cell, until it is submitted


@dataclass
class _Group:
    """One prompt's G trajectories; they take their turns together (one generation per turn)."""

    index: int
    prompt: RolloutPrompt
    states: list[_State]
    turns: int = 0
    running: int = 0  # cells of this turn still executing

    def active(self) -> list[_State]:
        return [s for s in self.states if s.status is None]


@dataclass
class RolloutStats:
    """Where the last batch's wall time went; generation and execution overlap when their sum exceeds it."""

    prompts: int = 0
    generate_calls: int = 0
    generate_s: float = 0.0
    cells: int = 0
    execute_s: float = 0.0  # summed over cells (several run at once)
    wall_s: float = 0.0


@dataclass
class AgentLoopRollout:
    """The ReAct loop. A prompt's G trajectories take their turns together; prompts of a batch run
    asynchronously: while one prompt's cells execute (up to ``exec_workers`` at once), the prompts whose
    cells are done are already generating their next turn, so the policy does not wait for the slowest cell."""

    count_tokens: Callable[[str], int]
    max_turns: int = 10
    max_turn_tokens: int = 1024
    max_response_tokens: int = 8192
    exec_timeout_s: float = 30.0
    workdir_root: str | None = None
    exec_workers: int = 8
    last_stats: RolloutStats = field(default_factory=RolloutStats, init=False)

    def __call__(
        self, prompt: RolloutPrompt, *, group_size: int, generate: GenerateFn, execute: Executor
    ) -> list[Trajectory]:
        return self.batch([prompt], group_size=group_size, generate=generate, execute=execute)[0]

    def batch(
        self, prompts: Sequence[RolloutPrompt], *, group_size: int, generate: GenerateFn, execute: Executor
    ) -> list[list[Trajectory]]:
        """G trajectories for each prompt, in the prompts' order."""
        t0 = time.perf_counter()
        self.last_stats = stats = RolloutStats(prompts=len(prompts))
        groups: list[_Group] = []
        try:
            for i, prompt in enumerate(prompts):
                groups.append(_Group(i, prompt, []))
                for _ in range(group_size):
                    groups[-1].states.append(_State(self._workdir(prompt), exec_language(prompt.data_format)))
            with ThreadPoolExecutor(max(1, self.exec_workers), thread_name_prefix="rollout-exec") as pool:
                self._run(groups, generate, execute, pool, stats)
            stats.wall_s = time.perf_counter() - t0
            return [
                [
                    Trajectory(
                        s.messages,
                        s.status or "max_turns",
                        sum(m["role"] == "assistant" for m in s.messages),
                        s.n_void,
                        s.tokens,
                    )
                    for s in g.states
                ]
                for g in groups
            ]
        finally:
            end = getattr(execute, "end_trajectory", None)  # executors holding per-trajectory state
            for s in (s for g in groups for s in g.states):
                if end is not None:
                    try:
                        end(s.workdir)
                    except Exception:  # noqa: BLE001 - release the other trajectories; the error is logged
                        log.exception("closing the executor state of trajectory %s failed", s.workdir)
                shutil.rmtree(s.workdir, ignore_errors=True)

    def _run(self, groups: list[_Group], generate: GenerateFn, execute: Executor, pool, stats: RolloutStats) -> None:
        ready = [g for g in groups if g.active()]
        cells: dict[Future, tuple[_Group, _State, ExecRequest]] = {}
        try:
            while ready or cells:
                if ready:
                    for g in self._generate(ready, generate, stats):
                        for state, req in self._requests(g):
                            cells[pool.submit(_timed, execute, req)] = (g, state, req)
                        if not g.running and self._continues(g):
                            ready.append(g)
                    continue
                done, _ = wait(cells, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: cells[f][0].index):
                    g, state, req = cells.pop(fut)
                    result, seconds = fut.result()  # an executor that raises ends the batch, as it would alone
                    stats.cells += 1
                    stats.execute_s += seconds
                    self._observe(state, req, result)
                    g.running -= 1
                    if not g.running and self._continues(g):
                        ready.append(g)
        finally:
            for fut in cells:
                fut.cancel()

    def _generate(self, ready: list[_Group], generate: GenerateFn, stats: RolloutStats) -> list[_Group]:
        """One batched generation over the active trajectories of the ready prompts (in prompt order)."""
        batch = sorted(ready, key=lambda g: g.index)
        ready.clear()
        active = [(g, s) for g in batch for s in g.active()]
        budget = min(self.max_response_tokens - s.tokens for _, s in active)
        t0 = time.perf_counter()
        texts = generate([g.prompt.messages + s.messages for g, s in active], min(self.max_turn_tokens, budget))
        stats.generate_calls += 1
        stats.generate_s += time.perf_counter() - t0
        for (_, state), raw in zip(active, texts, strict=True):
            self._turn(state, cut_at_stop(raw))
        for g in batch:
            g.turns += 1
        return batch

    def _requests(self, g: _Group) -> list[tuple[_State, ExecRequest]]:
        out = []
        for state in g.active():
            code, state.code = state.code, None
            if code is not None:
                req = ExecRequest(code, tuple(state.history), state.workdir, self.exec_timeout_s, state.language)
                out.append((state, req))
        g.running = len(out)
        return out

    def _continues(self, g: _Group) -> bool:
        if g.turns < self.max_turns and g.active():
            return True
        for s in g.states:
            s.status = s.status or "max_turns"
        return False

    def _turn(self, state: _State, text: str) -> None:
        state.messages.append({"role": "assistant", "content": text})
        state.tokens += self.count_tokens(text)
        turn = parse_turn(text)
        if turn.answer is not None and turn.answer.strip():
            state.status = "answered"
            return
        if turn.is_void:
            # The trajectory is masked out of the loss anyway; stop spending compute on it.
            state.n_void += 1
            state.status = "void"
            return
        state.code = turn.code

    def _observe(self, state: _State, req: ExecRequest, result: ExecResult) -> None:
        if result.ok:
            state.history.append(req.code)
        obs = interpreter_message(result.output)
        state.messages.append(obs)
        state.tokens += self.count_tokens(obs["content"])
        if state.tokens >= self.max_response_tokens:
            state.status = "length"

    def _workdir(self, prompt: RolloutPrompt) -> str:
        workdir = tempfile.mkdtemp(prefix="datamind-rollout-", dir=self.workdir_root)
        files = os.path.join(workdir, DATA_SUBDIR)
        os.makedirs(files)
        os.makedirs(os.path.join(workdir, "data", "tmp"))
        if prompt.data_uri:
            name = posixpath.basename(prompt.data_uri.rstrip("/"))
            try:
                _stage(prompt.data_uri, os.path.join(files, name))
            except BaseException:
                shutil.rmtree(workdir, ignore_errors=True)
                raise
            if name != "data":  # (a file called "data" stays reachable under data/files/ only)
                os.symlink(os.path.join(DATA_SUBDIR, name), os.path.join(workdir, name))
        return workdir


def _timed(execute: Executor, req: ExecRequest) -> tuple[ExecResult, float]:
    t0 = time.perf_counter()
    return execute(req), time.perf_counter() - t0


def _stage(uri: str, dest: str) -> None:
    """Make the sample's data file visible in the workdir (symlink when local, a copy otherwise)."""
    if "://" not in uri or uri.startswith("file://"):
        path = uri.removeprefix("file://")
        if not os.path.exists(path):
            raise FileNotFoundError(f"data file for rollout not found: {path}")
        os.symlink(os.path.abspath(path), dest)
        return
    import fsspec

    with fsspec.open(uri, "rb") as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst)
