"""Multi-turn agent rollouts: the policy writes a turn, ``<code>`` runs, ``<interpreter>`` output comes back.

``Rollout`` is the seam the trainer depends on. ``AgentLoopRollout`` runs each trajectory through the
package's one agent loop (``datamind.agent.loop.run_agent``, with training's ``TurnRules``), its policy a
batched ``GenerateFn`` and its code going to any ``Executor``; the trainer's is
``datamind.train.sandbox_exec.SandboxExecutor``, the trajectory stage's sandbox (one session per trajectory,
closed through ``end_trajectory``), so RL rollouts run model-written code under the same isolation as every
other trajectory.

The loop keeps each trajectory's successful cells (``ExecRequest.history``) so the executor can check that
its session holds the same state (the paper's "chunked code maintenance": the sandbox's chunked mode
re-executes them before each new cell).
"""

from __future__ import annotations

import asyncio
import logging
import os
import posixpath
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor as ConcurrentExecutor
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from datamind.agent.loop import PolicyReply, TurnRules, run_agent
from datamind.agent.protocol import (
    VOID_BAD_CODE,
    VOID_NO_ACTION,
    ParsedTurn,
    cut_at_stop,
    format_interpreter,
    strict_turn,
)

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
    return {"role": "tool", "content": format_interpreter(output)}


def read_turn(text: str) -> ParsedTurn:
    """A generated turn as the trainer reads it (``strict_turn``: a malformed turn still has its code run or
    its answer read; the format reward punishes it): an answer when it holds answer text, void when it holds
    neither runnable code nor an answer, else code to run."""
    turn = strict_turn(text)
    if turn.answer is not None and turn.answer.strip():
        return ParsedTurn(turn.think, None, turn.answer, None)
    if turn.is_void:
        # The trajectory is masked out of the loss anyway; stop spending compute on it.
        reason = VOID_NO_ACTION if turn.code is None else VOID_BAD_CODE
        return ParsedTurn(turn.think, turn.code, turn.answer, reason)
    return ParsedTurn(turn.think, turn.code, None, None)


# Training's conventions in the one agent loop: a turn is cut at its stop string as generation cut it, the
# first void turn ends the trajectory, and the executor's output is shown as it is (the sandbox executor
# labels failures itself).
TRAINING = TurnRules(clip=cut_at_stop, parse=read_turn, observation=lambda result: result.output, void_ends=True)


@dataclass
class _State:
    index: int  # of its prompt in the batch
    workdir: str
    language: str = "python"
    history: list[str] = field(default_factory=list)  # cells that ran without error
    tokens: int = 0
    counted: int = 0  # generated messages already in ``tokens``
    phase: str = "transit"  # transit (between two of the states below) | waiting (a turn) | cell | done
    conversation: list[Message] = field(default_factory=list)
    turn: asyncio.Future | None = None
    failure: BaseException | None = None  # what the executor raised: it ends the batch


@dataclass
class RolloutStats:
    """Where the last batch's wall time went; generation and execution overlap when their sum exceeds it."""

    prompts: int = 0
    generate_calls: int = 0
    generate_s: float = 0.0
    cells: int = 0
    execute_s: float = 0.0  # summed over cells (several run at once)
    wall_s: float = 0.0


class _Cells(ConcurrentExecutor):
    """The thread pool as one trajectory's agent loop submits its cell to it: the submission tells the turn
    scheduler that the trajectory now waits for its cell, not for a turn."""

    def __init__(self, pool: ThreadPoolExecutor, submitted: Callable[[], None]) -> None:
        self.pool, self.submitted = pool, submitted

    def submit(self, fn, /, *args, **kwargs):
        self.submitted()
        return self.pool.submit(fn, *args, **kwargs)


class _Turns:
    """Hands out turns: a prompt's G trajectories take their turns together, and one ``generate`` call serves
    every prompt whose trajectories are all waiting, once no trajectory is between two states (so a batch
    holds everything ready at that moment, as a loop that stepped the prompts by hand would batch it)."""

    def __init__(self, loop_: AgentLoopRollout, states: list[list[_State]], generate: GenerateFn, stats) -> None:
        self.cfg, self.groups, self.generate, self.stats = loop_, states, generate, stats
        self.ready: set[int] = set()
        self.transit = sum(len(g) for g in states)
        self.live = self.transit
        self.changed = asyncio.Event()

    def count(self, state: _State, generated: list[Message]) -> None:
        for m in generated[state.counted :]:
            state.tokens += self.cfg.count_tokens(m["content"])
        state.counted = max(state.counted, len(generated))

    def move(self, state: _State, phase: str) -> None:
        self.transit += (phase == "transit") - (state.phase == "transit")
        self.live -= phase == "done"
        state.phase = phase
        group = self.groups[state.index]
        if all(s.phase in ("waiting", "done") for s in group) and any(s.phase == "waiting" for s in group):
            self.ready.add(state.index)
        self.changed.set()

    async def turn(self, state: _State, conversation: list[Message]) -> str:
        state.conversation = conversation
        state.turn = asyncio.get_running_loop().create_future()
        self.move(state, "waiting")
        return await state.turn

    async def serve(self) -> None:
        while self.live:
            await self.changed.wait()
            self.changed.clear()
            if self.transit or not self.ready:
                continue
            batch, self.ready = sorted(self.ready), set()
            active = [s for i in batch for s in self.groups[i] if s.phase == "waiting"]
            budget = min(self.cfg.max_response_tokens - s.tokens for s in active)
            t0 = time.perf_counter()
            texts = self.generate([s.conversation for s in active], min(self.cfg.max_turn_tokens, budget))
            self.stats.generate_calls += 1
            self.stats.generate_s += time.perf_counter() - t0
            for state, text in zip(active, texts, strict=True):
                self.move(state, "transit")
                state.turn.set_result(text)


class _TurnPolicy:
    name = "train"

    def __init__(self, turns: _Turns, state: _State, n_prompt: int) -> None:
        self.turns, self.state, self.n_prompt = turns, state, n_prompt

    async def next_turn(self, messages: list[Message], last_observation: object | None) -> PolicyReply:
        self.turns.count(self.state, messages[self.n_prompt :])
        return PolicyReply(await self.turns.turn(self.state, messages))


@dataclass
class AgentLoopRollout:
    """The ReAct loop (the package's one agent loop, ``datamind.agent.loop.run_agent``, per trajectory). A
    prompt's G trajectories take their turns together; prompts of a batch run asynchronously: while one
    prompt's cells execute (up to ``exec_workers`` at once), the prompts whose cells are done are already
    generating their next turn, so the policy does not wait for the slowest cell."""

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
        groups: list[list[_State]] = []
        try:
            for i, prompt in enumerate(prompts):
                groups.append([])
                for _ in range(group_size):
                    groups[-1].append(_State(i, self._workdir(prompt), exec_language(prompt.data_format)))
            with ThreadPoolExecutor(max(1, self.exec_workers), thread_name_prefix="rollout-exec") as pool:
                out = asyncio.run(self._run(prompts, groups, generate, execute, pool, stats))
            stats.wall_s = time.perf_counter() - t0
            return out
        finally:
            end = getattr(execute, "end_trajectory", None)  # executors holding per-trajectory state
            for s in (s for g in groups for s in g):
                if end is not None:
                    try:
                        end(s.workdir)
                    except Exception:  # noqa: BLE001 - release the other trajectories; the error is logged
                        log.exception("closing the executor state of trajectory %s failed", s.workdir)
                shutil.rmtree(s.workdir, ignore_errors=True)

    async def _run(self, prompts, groups, generate, execute, pool, stats) -> list[list[Trajectory]]:
        turns = _Turns(self, groups, generate, stats)
        lock = threading.Lock()
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(turns.serve())
                runs = [
                    [tg.create_task(self._trajectory(prompts[i], s, turns, execute, pool, stats, lock)) for s in g]
                    for i, g in enumerate(groups)
                ]
        except BaseExceptionGroup as group:  # the first failure ends the batch, as it would alone
            raise group.exceptions[0] from None
        return [[r.result() for r in g] for g in runs]

    async def _trajectory(self, prompt, state: _State, turns: _Turns, execute, pool, stats, lock) -> Trajectory:
        def run_cell(code: str) -> ExecResult:
            req = ExecRequest(code, tuple(state.history), state.workdir, self.exec_timeout_s, state.language)
            t0 = time.perf_counter()
            try:
                result = execute(req)
            except BaseException as exc:
                state.failure = exc
                raise
            with lock:
                stats.cells += 1
                stats.execute_s += time.perf_counter() - t0
            if result.ok:
                state.history.append(code)
            return result

        n_prompt = len(prompt.messages)

        def budget_spent(messages: list[Message]) -> str | None:
            turns.move(state, "transit")  # the cell is back
            turns.count(state, messages[n_prompt:])
            return "length" if state.tokens >= self.max_response_tokens else None

        try:
            result = await run_agent(
                _TurnPolicy(turns, state, n_prompt),
                run_cell,
                prompt=prompt.messages,
                max_turns=self.max_turns,
                executor=_Cells(pool, lambda: turns.move(state, "cell")),
                rules=TRAINING,
                stop=budget_spent,
            )
        finally:
            turns.move(state, "done")
        if state.failure is not None:
            raise state.failure
        generated = result.messages[n_prompt:]
        turns.count(state, generated)
        return Trajectory(
            generated,
            result.status,
            sum(m["role"] == "assistant" for m in generated),
            result.n_void_turns,
            state.tokens,
        )

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
