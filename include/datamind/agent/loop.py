"""The multi-turn ReAct loop: ask a policy for a turn, run its code in a sandbox session, feed the output back.

The loop is policy-agnostic (offline expert, LLM expert, any test double that speaks the protocol) and
executor-agnostic: ``execute(code) -> Observation`` is a blocking call (a sandbox session) that the loop
runs in a worker thread, so many trajectories of a shard interleave their LLM waits and code executions.

Two message lists are kept: ``view`` is what the policy reads (it may carry extra guidance such as the
judge's critique during reflection) and ``record`` is what the trajectory stores for training, where
the first user turn is always the plain task.  Both share every assistant/tool turn.

It is the one agent loop of the package: sampling, judging's reflection rounds, evaluation and RL training
(``train.rollout``, whose policy generates a batch of turns at once) all run it. ``TurnRules`` says how a
reply is read and an execution shown back where training's conventions differ from sampling's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

from datamind.agent import protocol
from datamind.vocabulary import SANDBOX_FAILURE

STATUS_ANSWERED = "answered"
STATUS_MAX_TURNS = "max_turns"
STATUS_ERROR = "error"
STATUS_VOID = "void"  # TurnRules.void_ends: the first void turn ended the trajectory
# A trajectory whose sandbox failed (a cell could not be set up, the zygote died) ends with SANDBOX_FAILURE:
# the platform's failure, sampled again by a later run and never published or shown to a model.


@dataclass(frozen=True)
class PolicyReply:
    text: str
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # of the tokens above, those the response cache answered
    cached_completion_tokens: int = 0


class PolicyGaveUp(RuntimeError):
    """The policy cannot continue this trajectory (offline: a replayed program failed; LLM: a call failed)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Policy(Protocol):
    name: str

    async def next_turn(self, messages: list[dict], last_observation: Any | None) -> PolicyReply: ...


def _observation(obs: Any) -> str:
    return protocol.observation_text(obs.ok, obs.output, getattr(obs, "error_kind", None))


@dataclass(frozen=True)
class TurnRules:
    """How the loop reads a reply and shows an execution back. The defaults are sampling's: a reply is
    clipped after its first closing tag and parsed leniently, a void turn gets a note and the trajectory goes
    on, and an execution is labelled (``protocol.observation_text``). RL training reads its own replies."""

    clip: Callable[[str], str] = protocol.clip_reply
    parse: Callable[[str], protocol.ParsedTurn] = protocol.parse_turn
    observation: Callable[[Any], str] = _observation  # the text inside <interpreter> for one execution
    void_ends: bool = False  # a void turn ends the trajectory at once (STATUS_VOID), with no note


SAMPLING = TurnRules()


@dataclass
class AgentResult:
    messages: list[dict]
    final_answer: str | None
    status: str  # answered | max_turns | error
    n_turns: int
    n_void_turns: int
    void_reasons: list[str] = field(default_factory=list)
    error: str | None = None  # reason code when status == error
    error_detail: str | None = None
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    exec_seconds: float = 0.0
    n_exec_errors: int = 0


async def run_agent(
    policy: Policy,
    execute: Callable[[str], Any],
    *,
    system: str = "",
    user: str = "",
    user_view: str | None = None,
    system_view: str | None = None,
    max_turns: int = 10,
    max_consecutive_void: int = 3,
    executor: Executor | None = None,
    prompt: list[dict] | None = None,
    rules: TurnRules | None = None,
    stop: Callable[[list[dict]], str | None] | None = None,
) -> AgentResult:
    """Drive one trajectory until an answer, ``max_turns`` assistant turns, or a fatal error.

    ``prompt``: the opening messages as they are (both views), instead of ``system`` and ``user``.
    ``stop``: asked after each execution with the messages so far; a status it returns ends the trajectory."""
    if max_turns < 1:
        raise ValueError("max_turns must be >= 1")
    rules = rules or SAMPLING
    if prompt is not None:
        record, view_head = list(prompt), list(prompt)
    else:
        record = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        view_head = [
            {"role": "system", "content": system_view or system},
            {"role": "user", "content": user_view or user},
        ]
    n_head = len(record)
    res = AgentResult(messages=record, final_answer=None, status=STATUS_MAX_TURNS, n_turns=0, n_void_turns=0)
    last_obs: Any | None = None
    consecutive_void = 0
    loop = asyncio.get_running_loop()
    for _ in range(max_turns):
        try:
            reply = await policy.next_turn(view_head + record[n_head:], last_obs)
        except PolicyGaveUp as exc:
            res.status, res.error, res.error_detail = STATUS_ERROR, exc.code, str(exc)
            break
        res.n_turns += 1
        res.model = reply.model or res.model
        res.prompt_tokens += reply.prompt_tokens
        res.completion_tokens += reply.completion_tokens
        res.cached_prompt_tokens += reply.cached_prompt_tokens
        res.cached_completion_tokens += reply.cached_completion_tokens
        text = rules.clip(reply.text or "")
        turn = rules.parse(text)
        record.append({"role": "assistant", "content": text})
        if turn.is_answer:
            res.final_answer, res.status = turn.answer, STATUS_ANSWERED
            break
        if turn.is_void:
            res.n_void_turns += 1
            res.void_reasons.append(turn.void_reason)
            if rules.void_ends:
                res.status = STATUS_VOID
                break
            consecutive_void += 1
            record.append(
                {
                    "role": "tool",
                    "content": protocol.format_interpreter(protocol.void_note(turn.void_reason, turn.detail)),
                }
            )
            last_obs = None
            if consecutive_void >= max_consecutive_void:
                res.status, res.error = STATUS_ERROR, "void_turn_limit"
                res.error_detail = f"{consecutive_void} void turns in a row ({turn.void_reason})"
                break
            continue
        consecutive_void = 0
        t0 = time.perf_counter()
        try:
            obs = await loop.run_in_executor(executor, execute, turn.code)
        except Exception as exc:  # the sandbox itself failed (not the agent's code): the trajectory is unusable
            res.status, res.error, res.error_detail = STATUS_ERROR, SANDBOX_FAILURE, f"{type(exc).__name__}: {exc}"
            break
        res.exec_seconds += time.perf_counter() - t0
        if not getattr(obs, "ok", False):
            res.n_exec_errors += 1
        record.append({"role": "tool", "content": protocol.format_interpreter(rules.observation(obs))})
        last_obs = obs
        ended = stop(record) if stop is not None else None
        if ended is not None:
            res.status = ended
            break
    return res
