"""Typed settings of the trajectory-sampling stage (DAG params / XCom travel as plain dicts)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from datamind.ids import stable_id

BACKENDS = ("offline", "llm")
SANDBOX_MODES = ("chunked", "live")
# DAG params that configure the task around the stage, not the stage itself.
ORCHESTRATION_KEYS = frozenset({"llm_conn_id"})


@dataclass(frozen=True)
class RolloutParams:
    backend: str = "offline"
    n_samples: int = 3  # N trajectories per query (paper: 3)
    max_turns: int = 10  # assistant turns per trajectory
    max_consecutive_void: int = 3  # stop a trajectory that keeps producing void turns
    # Expert sampling parameters (LLM backend): the paper's inference settings (Table 2: temperature 0.7,
    # top-p 0.95).  Round 0 and reflection resampling both read them from here.
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 2048  # per turn
    seed: int | None = None
    concurrency: int = 8  # trajectories in flight per shard (LLM waits overlap)
    exec_workers: int = 2  # sandbox executions running at once per shard (CPU-bound)
    sandbox_mode: str = "chunked"
    shard_size: int = 20  # queries per shard
    # A trajectory that failed for a transient cause (the endpoint gave up, rate limits) is sampled again by
    # later runs, up to this many attempts in all; until then its query is not handed to the judge.
    max_attempts: int = 3
    _NOT_IN_FINGERPRINT = ("concurrency", "exec_workers", "shard_size", "max_attempts")

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.sandbox_mode not in SANDBOX_MODES:
            raise ValueError(f"sandbox_mode must be one of {SANDBOX_MODES}, got {self.sandbox_mode!r}")
        for name in (
            "n_samples",
            "max_turns",
            "max_consecutive_void",
            "max_tokens",
            "concurrency",
            "exec_workers",
            "shard_size",
            "max_attempts",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if not 0 <= self.temperature <= 2 or not 0 < self.top_p <= 1:
            raise ValueError("need 0 <= temperature <= 2 and 0 < top_p <= 1")

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> "RolloutParams":
        """From DAG params; keys that only the orchestrator reads (e.g. ``llm_conn_id``) are ignored."""
        raw = {k: v for k, v in (raw or {}).items() if k not in ORCHESTRATION_KEYS}
        known = {f.name for f in fields(cls)}
        extra = set(raw) - known
        if extra:
            raise ValueError(f"unknown rollout parameters: {sorted(extra)}")
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sampling(self) -> dict[str, Any]:
        """The parameters sent to the expert model."""
        out: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.seed is not None:
            out["seed"] = self.seed
        return out

    def fingerprint(self) -> str:
        d = {k: v for k, v in self.to_dict().items() if k not in self._NOT_IN_FINGERPRINT}
        if self.backend == "offline":  # sampling parameters do not influence a replay
            for k in ("temperature", "top_p", "max_tokens", "seed"):
                d.pop(k)
        return stable_id(d, length=10)
