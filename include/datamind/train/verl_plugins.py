"""The project's pieces inside verl (loaded by verl, in verl's own environment, never by the pipeline).

verl runs multi-turn RL through its tool agent loop: the policy writes a turn, a *tool parser* finds the
tool calls in it, the *tool* runs them, and its reply comes back as the next (environment) turn, masked
out of the loss. The paper's agents do not call JSON functions; they write ``<think>``/``<code>`` turns
and read ``<interpreter>`` replies, and that is the format the SFT data taught. So:

* ``ReactCodeParser`` (registered as the multi-turn format ``datamind_react``) reads a turn's ``<code>``
  block with the project's own turn parser and hands it to the ``run_code`` tool; a turn with an
  ``<answer>`` (or nothing runnable) calls nothing, which ends the trajectory.
* ``SandboxCodeTool`` runs the code in the project's sandbox (``datamind.sandbox``: CPU, memory and wall
  caps, no network, the sample's data file in the workspace), Python for CSV/XLSX and SQL for SQLite,
  and words the reply exactly as the trajectory stage recorded it (``observation_text``), inside
  ``<interpreter>`` tags. verl creates and releases a tool instance around every call; the trajectory's
  state (its successful cells, replayed before each new one -- the paper's chunked code maintenance)
  is its successful cells, kept as text per verl request id; a sandbox session (a workspace holding a copy
  of the data file) serves the trajectory while it is active and is closed after ``session_idle_s``
  without calls (or when more than ``max_sessions`` are open), since verl never says a trajectory ended.
  A trajectory that calls again after that gets a fresh session with its cells replayed: nothing is lost.
* ``compute_score`` is the reward (eq. 8) with the project's judge: the rule judge (numbers within 3 %,
  lists element-wise, text normalised) or, where ``DATAMIND_JUDGE_BASE_URL`` names an OpenAI-compatible
  endpoint, the model-as-judge of appendix G.4 with the rule judge as its fallback.

Everything verl-specific is imported here, so the core environment never needs verl.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from typing import Any

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from datamind.agent.protocol import strict_turn

log = logging.getLogger(__name__)

TOOL_NAME = "run_code"
FORMAT_NAME = "datamind_react"

TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run a code cell (Python for CSV/XLSX files, SQL for SQLite databases) on the task's data.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the cell's source"}},
            "required": ["code"],
        },
    },
}


@ToolParser.register(FORMAT_NAME)
class ReactCodeParser(ToolParser):
    """A ``<code>`` block is a call of ``run_code``; the turn's text is kept whole as the assistant message."""

    async def extract_tool_calls(self, responses_ids, tools=None) -> tuple[str, list[FunctionCall]]:
        text = await asyncio.get_running_loop().run_in_executor(None, self.tokenizer.decode, responses_ids)
        turn = strict_turn(text)
        if turn.answer is not None and turn.answer.strip():
            return text, []
        if turn.is_void or not turn.code:
            return text, []
        return text, [FunctionCall(name=TOOL_NAME, arguments=json.dumps({"code": turn.code}, ensure_ascii=False))]


class SandboxCodeTool(BaseTool):
    """``run_code`` in the project sandbox, one session per trajectory (verl's request id)."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(TOOL_SCHEMA)
        self.config, self.tool_schema, self.name = config, schema, schema.function.name  # (no schema print)
        self.session_idle_s = float(config.get("session_idle_s", 120))
        self.max_sessions = int(config.get("max_sessions", 256))
        self.max_histories = int(config.get("max_histories", 100_000))
        self._sandbox = None
        self._sessions: OrderedDict[str, tuple[Any, float]] = OrderedDict()  # least recently used first
        self._histories: OrderedDict[str, list[str]] = OrderedDict()
        self._instances: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        create = kwargs.get("create_kwargs") or {}
        instance_id = instance_id or os.urandom(8).hex()
        self._instances[instance_id] = dict(create)
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        code = parameters.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolResponse(text=_interpreter("Error:\nno code to run")), 0.0, {"ok": False}
        create = self._instances.get(instance_id, {})
        agent_data = kwargs.get("agent_data")
        key = str(getattr(agent_data, "request_id", None) or create.get("trajectory_id") or instance_id)
        ok, text, kind = await asyncio.to_thread(self._run, key, create, code)
        return ToolResponse(text=_interpreter(text)), 0.0, {"ok": ok, "error_kind": kind}

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instances.pop(instance_id, None)
        self._close_idle()

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, {}
            sandbox, self._sandbox = self._sandbox, None
        for session, _ in sessions.values():
            session.close()
        if sandbox is not None:
            sandbox.close()

    # -- internals ----------------------------------------------------------------------------------
    def _run(self, key: str, create: dict[str, Any], code: str) -> tuple[bool, str, str | None]:
        from datamind.agent.protocol import observation_text

        session = self._session(key, create)
        obs = session.run(code)
        with self._lock:
            self._sessions[key] = (session, time.monotonic())
            self._sessions.move_to_end(key)
            self._histories[key] = list(session.history)
            self._histories.move_to_end(key)
            while len(self._histories) > self.max_histories:
                self._histories.popitem(last=False)
        return obs.ok, observation_text(obs.ok, obs.output, obs.error_kind), obs.error_kind

    def _session(self, key: str, create: dict[str, Any]):
        from datamind.sandbox import Sandbox, SandboxLimits
        from datamind.train.rollout import exec_language

        with self._lock:
            if key in self._sessions:
                return self._sessions[key][0]
            if self._sandbox is None:
                limits = SandboxLimits.from_env()
                if self.config.get("wall_s"):
                    import dataclasses

                    limits = dataclasses.replace(limits, wall_s=float(self.config["wall_s"]))
                self._sandbox = Sandbox(limits=limits, mode="chunked")
            sandbox = self._sandbox
        files = [_local_file(create["data_uri"])] if create.get("data_uri") else []
        session = sandbox.session(files, language=exec_language(create.get("data_format")))
        with self._lock:
            session.history = list(self._histories.get(key, ()))  # replayed before the next cell (chunked mode)
            self._sessions[key] = (session, time.monotonic())
        return session

    def _close_idle(self) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [k for k, (_, t) in self._sessions.items() if now - t > self.session_idle_s]
            closing = [self._sessions.pop(k)[0] for k in idle]
            while len(self._sessions) > self.max_sessions:
                closing.append(self._sessions.popitem(last=False)[1][0])
        for session in closing:
            session.close()


_DOWNLOADS: dict[str, str] = {}


def _local_file(uri: str) -> str:
    """A local path for the sample's data file (the sandbox copies it into the trajectory's workspace);
    files on object storage are fetched once per worker process."""
    if "://" not in uri or uri.startswith("file://"):
        path = uri.removeprefix("file://")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"data file for the rollout not found: {path}")
        return path
    if uri not in _DOWNLOADS:
        import shutil
        import tempfile

        import fsspec

        folder = tempfile.mkdtemp(prefix="datamind-verl-data-")
        dest = os.path.join(folder, uri.rstrip("/").rsplit("/", 1)[-1])
        with fsspec.open(uri, "rb") as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst)
        _DOWNLOADS[uri] = dest
    return _DOWNLOADS[uri]


def _interpreter(text: str) -> str:
    from datamind.train.rollout import interpreter_message

    return interpreter_message(text)["content"]


def compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    *,
    tokenizer_path: str | None = None,
    l_min: int = 256,
    l_max: int = 1024,
    format_penalty: float = -0.1,
    length_basis: str = "answer",
    **_: Any,
) -> dict[str, Any]:
    """verl's reward-function contract: the decoded response (every generated and environment turn) ->
    the eq. 8 reward as ``score``, with ``acc`` (the judge's verdict, which eq. 5's group filter counts),
    ``format`` and ``void`` (a turn with neither runnable code nor an answer) as extra metrics. The
    ``reward_kwargs`` of the generated config fill the keywords."""
    from datamind.train.config import RewardConfig
    from datamind.train.reward import score, turns_from_text, void_turns

    question = (extra_info or {}).get("question") or ""
    cfg = RewardConfig(l_min=l_min, l_max=l_max, format_penalty=format_penalty, length_basis=length_basis)
    turns = turns_from_text(solution_str)
    parts = score(turns, question, str(ground_truth), _judge(), _counter(tokenizer_path), cfg)
    return {
        "score": parts.reward,
        "acc": float(parts.r_answer),
        "format": float(parts.r_format),
        "void": float(void_turns(turns) > 0),  # such a rollout leaves the DAPO term (verl_joint.rl_weights)
    }


_JUDGE = None
_COUNTERS: dict[str | None, Any] = {}


def _judge():
    """The reward judge, once per process: the model-as-judge over the configured LLM Connection
    (``DATAMIND_REWARD_JUDGE=llm``; ``AIRFLOW_CONN_DATAMIND_LLM`` or ``DATAMIND_LLM_*``), else the rule judge."""
    global _JUDGE
    if _JUDGE is None:
        from datamind.train.reward import LLMRewardJudge, MatchJudge

        if os.environ.get("DATAMIND_REWARD_JUDGE", "rules") == "llm":
            from datamind.llm.client import LLMClient
            from datamind.llm.config import LLMConfig

            _JUDGE = LLMRewardJudge(LLMClient(LLMConfig.from_env()))
        else:
            _JUDGE = MatchJudge()
    return _JUDGE


def _counter(tokenizer_path: str | None):
    """Token counts for the length factor: the policy's tokenizer (local files only), else words."""
    if tokenizer_path not in _COUNTERS:
        if tokenizer_path:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
            _COUNTERS[tokenizer_path] = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])
        else:
            _COUNTERS[tokenizer_path] = lambda s: len(s.split())
    return _COUNTERS[tokenizer_path]
