"""The judging stage's parameters (its form, the Python API and the partition fingerprint read them here).

Kept free of heavy imports: the DAG file reads the defaults at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from datamind.agent.equivalence import REL_TOL
from datamind.agent.params import RolloutParams
from datamind.judge import selection
from datamind.llm.config import CONNECTION_KEYS
from datamind.stage_params import StageParams, check_ranges, param

JUDGE_BACKENDS = ("offline", "llm")


@dataclass(frozen=True)
class JudgeParams(StageParams):
    judge_backend: str | None = param(
        None, "Judge", enum=(*JUDGE_BACKENDS, None), description="Empty: the rollout backend (one switch for a run)."
    )
    strategy: str = param(selection.DEFAULT_STRATEGY, "Selection strategy", enum=selection.STRATEGIES)
    reflection_rounds: int = param(1, "Reflection rounds", minimum=0, maximum=5)  # 0 disables the rescue loop
    # Fewer trajectories than this cannot show consistency. None: the N the judged trajectories were sampled
    # with (their recorded n_samples; paper: N = 3), so judging never needs to be told what sampling used.
    min_samples: int | None = param(
        None,
        "Minimum trajectories to judge",
        minimum=1,
        maximum=8,
        description="Empty: N, the trajectories per query the sampling run drew.",
    )
    # numeric tolerance of the offline judge and of the reference check (paper, appendix G.4: 3 %)
    rel_tol: float = param(REL_TOL, "Numeric tolerance (offline judge)", minimum=0, maximum=1)
    # Compare the selected answer with the synthesizer's executed reference answer where there is one.
    verify_reference: bool = param(True, "Check against the executed reference answer")
    judge_temperature: float = param(0.0, "Judge temperature", minimum=0, maximum=2, section="LLM")
    # Answers that are the same after normalisation (numbers within rel_tol) need no model to say so: measured
    # with Qwen2.5-Coder-1.5B as the judge on the demo, it called three identical "Engineering" answers
    # inconsistent and sent the query through a reflection round (about 5 minutes of sampling) for nothing.
    agree_by_rule: bool = param(
        True,
        "The rule decides where it is certain",
        section="LLM",
        description="Answers equal after normalisation (numbers within the tolerance) and confirmed by the "
        "reference are consistent without an LLM call; the LLM judges the rest, and its 'consistent' over "
        "answers whose numbers differ beyond the tolerance is overruled.",
    )
    concurrency: int = param(8, "Queries judged at once per task", minimum=1, maximum=64, fingerprint=False)
    shard_size: int = param(20, "Queries per task instance", minimum=1, maximum=1000, fingerprint=False)
    seed: int = param(0, "Seed (random selection)")
    # RolloutParams for reflection resampling of trajectories that do not record their own: a query's
    # reflection reuses the parameters its round-0 trajectories were sampled with (trajectories 1.2+).
    rollout: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_ranges(self)
        RolloutParams.from_form(self.rollout)  # validate early

    FORM_ONLY = frozenset(CONNECTION_KEYS)

    @classmethod
    def normalize(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """Judge fields, plus rollout fields either nested under ``rollout`` or flat (``backend``, ``n_samples``,
        ``max_turns``, ``temperature``...; flat ones win)."""
        own = {f.name for f in fields(cls)}
        rollout_fields = {f.name for f in fields(RolloutParams)}
        rollout = dict(raw.pop("rollout", None) or {})
        for key in sorted(set(raw) - own):
            if key in rollout_fields:
                rollout[key] = raw.pop(key)
        return {**raw, "rollout": rollout}

    @property
    def judge(self) -> str:
        """The judge that runs: ``judge_backend``, or the rollout backend when unset."""
        return self.judge_backend or self.rollout_params.backend

    def fingerprint_view(self) -> dict[str, Any]:
        d = super().fingerprint_view()
        d["judge_backend"] = self.judge
        if self.judge == "offline":  # the offline judge is the rule: the switch changes nothing there
            d.pop("agree_by_rule")
        d["rollout"] = self.rollout_params.fingerprint
        return d

    @property
    def partition(self) -> str:
        return f"params={self.fingerprint}"

    @property
    def rollout_params(self) -> RolloutParams:
        return RolloutParams.from_form(self.rollout)
