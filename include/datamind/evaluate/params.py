"""The parameters of evaluate_agent: its form, the Python API and the eval id read them from here.

Kept free of heavy imports: the DAG file reads the defaults at parse time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from datamind.ids import stable_id
from datamind.judge.consistency import REL_TOL
from datamind.vocabulary import EVAL_SUITES

SUITE_KINDS = EVAL_SUITES
OFFLINE_AGENT = "offline"


@dataclass(frozen=True)
class EvalParams:
    """The form of evaluate_agent (and the Python API): every default lives here."""

    agent_conn_id: str = OFFLINE_AGENT  # Connection of an OpenAI-compatible endpoint; "offline" = reference policy
    # A local checkpoint folder (train_agent's output) served on loopback for the run, instead of a Connection.
    checkpoint: str | None = None
    serve_engine: str = "auto"  # how a checkpoint is served: vllm (GPU worker), cpu, or auto
    model: str | None = None  # overrides the connection's ``agent`` model
    suites: dict = field(default_factory=dict)  # kind -> folder or file ("heldout" -> a version, "" = latest)
    trials: int = 3  # paper: 3 independent trials
    temperature: float = 0.7
    top_p: float = 0.95
    max_turns: int = 10
    max_tokens: int = 2048
    judge_conn_id: str | None = None  # empty: rule-based judges only
    limit: int | None = None  # questions per suite; None = all
    rel_tol: float = REL_TOL  # the paper's 3% numeric tolerance for free-form answers
    concurrency: int = 8
    exec_workers: int = 2
    _NOT_IN_ID = ("concurrency", "exec_workers", "serve_engine")

    def __post_init__(self) -> None:
        unknown = set(self.suites) - set(SUITE_KINDS)
        if unknown:
            raise ValueError(f"unknown suite kinds {sorted(unknown)}; known: {', '.join(SUITE_KINDS)}")
        if self.serve_engine not in ("auto", "cpu", "vllm"):
            raise ValueError(f"serve_engine must be auto, cpu or vllm, got {self.serve_engine!r}")
        if self.checkpoint and self.agent_conn_id != OFFLINE_AGENT:
            raise ValueError("give either a checkpoint to serve or an agent_conn_id, not both")
        if not self.suites:
            raise ValueError("name at least one suite, e.g. {'dabench': '/data/dabench'}")
        if self.trials < 1 or self.max_turns < 1 or self.concurrency < 1 or self.exec_workers < 1:
            raise ValueError("trials, max_turns, concurrency and exec_workers must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be >= 1 (or empty for all questions)")
        if not 0 <= self.temperature <= 2 or not 0 < self.top_p <= 1:
            raise ValueError("need 0 <= temperature <= 2 and 0 < top_p <= 1")

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> "EvalParams":
        raw = {k: v for k, v in (raw or {}).items() if v is not None and v != ""}
        extra = set(raw) - {f.name for f in fields(cls)}
        if extra:
            raise ValueError(f"unknown evaluation parameters: {sorted(extra)}")
        return cls(**raw)

    @property
    def offline(self) -> bool:
        return self.agent_conn_id == OFFLINE_AGENT and not self.checkpoint

    def eval_id(self) -> str:
        d = {k: v for k, v in asdict(self).items() if k not in self._NOT_IN_ID}
        return "eval-" + stable_id(d, length=12)
