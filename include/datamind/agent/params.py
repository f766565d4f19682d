"""Typed settings of the trajectory-sampling stage (DAG params / XCom travel as plain dicts)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from datamind.llm.config import CONNECTION_KEYS
from datamind.stage_params import StageParams, check_ranges, param

BACKENDS = ("offline", "llm")
SANDBOX_MODES = ("auto", "chunked", "live")
# DAG params that configure the task around the stage, not the stage itself.


@dataclass(frozen=True)
class RolloutParams(StageParams):
    backend: str = param("offline", "Expert policy", enum=BACKENDS)
    n_samples: int = param(3, "Trajectories per query (N)", minimum=1, maximum=8)  # paper: N = 3
    max_turns: int = param(10, "Maximum turns", minimum=1, maximum=50)  # assistant turns per trajectory
    # Expert sampling parameters (LLM backend): the paper's inference settings (table 2: temperature 0.7,
    # top-p 0.95). Round 0 and reflection resampling both read them from here.
    temperature: float = param(0.7, "Sampling temperature", minimum=0, maximum=2, section="LLM")
    top_p: float = param(0.95, "Top-p", minimum=0.01, maximum=1, section="LLM")
    max_tokens: int = param(2048, "Tokens per turn", minimum=16, maximum=32768, section="LLM")
    seed: int | None = param(None, "Sampling seed", description="Empty: unseeded.", section="LLM")
    # A trajectory that runs out of turns has no answer, so its whole query fails the judge's completeness check
    # and pays a reflection round: measured with Qwen2.5-Coder-1.5B on the demo, 6 of 24 trajectories ended so.
    last_turn_answers: bool = param(
        True,
        "Answer on the last turn",
        section="LLM",
        description="The model's last allowed turn must answer (its grammar and a note say so) instead of running "
        "out of turns.",
    )
    # The offline expert's thoughts come from sentence patterns, and a small model's copy the question; the
    # expert model can reword them (agent/rewrite.py).
    rewrite_thoughts: bool = param(
        False,
        "Model rewords the thoughts",
        section="LLM",
        description="Needs an LLM connection. The expert model rewords every thought of an offline replay, and the "
        "thoughts of its own trajectories that copy the question; code, outputs and answers stay as they ran, "
        "and a rewrite that adds a number or a name is not used.",
    )
    # Each task instance starts its own sandbox (an interpreter with pandas, scipy.stats, polars and duckdb
    # imported: ~2 s of CPU): sampling the 52 DABench tables 20 queries per task took 14% longer than 50.
    shard_size: int = param(50, "Queries per task instance", minimum=1, maximum=1000, fingerprint=False)
    concurrency: int = param(
        8, "Concurrent rollouts per task", minimum=1, maximum=64, description="Trajectories in flight per shard.",
        fingerprint=False,
    )  # fmt: skip
    exec_workers: int = param(
        2, "Sandbox executions at once", minimum=1, maximum=64, section="Sandbox", description="Per shard.",
        fingerprint=False,
    )  # fmt: skip
    sandbox_mode: str = param(
        "auto",
        "Sandbox mode",
        enum=SANDBOX_MODES,
        section="Sandbox",
        description="chunked: each cell replays the trajectory's earlier cells, nothing held while a model "
        "thinks; live: one interpreter per trajectory; auto: live for the offline policy, chunked for a model.",
    )
    max_consecutive_void: int = param(
        3, "Void turns before stopping", minimum=1, maximum=20, section="Sandbox",
        description="A trajectory that keeps producing turns with neither code nor answer is stopped.",
    )  # fmt: skip
    # A trajectory that failed for a transient cause (the endpoint gave up, rate limits) is sampled again by
    # later runs, up to this many attempts in all; until then its query is not handed to the judge.
    max_attempts: int = param(3, "Attempts per trajectory", minimum=1, maximum=20, section="LLM", fingerprint=False)
    FORM_ONLY = frozenset(CONNECTION_KEYS)  # the orchestrator's (e.g. ``llm_conn_id``)

    def __post_init__(self) -> None:
        check_ranges(self)

    @staticmethod
    def attempts_allowed(recorded: str | None) -> int:
        """``max_attempts`` of the parameters a trajectory row recorded (``sampling_params`` JSON)."""
        return (RolloutParams.from_form(json.loads(recorded)) if recorded else RolloutParams()).max_attempts

    def sampling(self) -> dict[str, Any]:
        """The parameters sent to the expert model."""
        out: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.seed is not None:
            out["seed"] = self.seed
        return out

    @property
    def resolved_sandbox_mode(self) -> str:
        """The mode sessions run in.  The offline policy answers each turn at once, so a live interpreter is
        held only while its trajectory runs (and its transcripts are the chunked ones: 651 of 651 equal on the
        bundled samples); a model's turn takes seconds, and chunked mode holds nothing meanwhile."""
        if self.sandbox_mode != "auto":
            return self.sandbox_mode
        return "live" if self.backend == "offline" else "chunked"

    def fingerprint_view(self) -> dict[str, Any]:
        d = super().fingerprint_view()
        d["sandbox_mode"] = self.resolved_sandbox_mode
        if self.backend == "offline":  # sampling parameters do not influence a replay
            for k in ("temperature", "top_p", "max_tokens", "seed", "last_turn_answers"):
                d.pop(k)
        if not self.rewrites:  # off: the partitions written before the switch existed keep their ids
            d.pop("rewrite_thoughts")
        return d

    @property
    def rewrites(self) -> bool:
        """Whether a model rewords thoughts (all of an offline replay's, those of a model's that copy the
        question)."""
        return self.rewrite_thoughts
