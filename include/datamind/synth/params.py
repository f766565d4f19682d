"""Typed parameters of the synthesis stage, with a fingerprint that names their output partition."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from datamind.categories import CATEGORY_IDS
from datamind.ids import stable_id

BACKENDS = ("offline", "llm")


@dataclass(frozen=True)
class SynthParams:
    categories: tuple[str, ...] = CATEGORY_IDS
    queries_per_category: int = 2
    min_hops: int = 2
    max_hops: int = 5
    n_chains: int = 3
    backend: str = "offline"
    shard_size: int = 20
    seed: int = 0
    dedup_threshold: float = 0.8
    llm_concurrency: int = 4
    # Re-run every stored reference program from its own text in a fresh interpreter before writing.
    verify_solutions: bool = True
    solution_timeout_s: float = 30.0
    # LLM backend: times a question whose program fails is sent back with the error before it is rejected.
    reference_repairs: int = 1
    # Decontamination: a question sharing this many consecutive words with a benchmark question is dropped
    # (benchmarks from DATAMIND_BENCHMARKS; the usual 13-gram rule).
    benchmark_ngram: int = 13
    # Fields that change how work is grouped or scheduled, not what is produced, stay out of the fingerprint.
    _NOT_IN_FINGERPRINT = ("shard_size", "llm_concurrency", "solution_timeout_s")

    def __post_init__(self) -> None:
        unknown = [c for c in self.categories if c not in CATEGORY_IDS]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; known: {', '.join(CATEGORY_IDS)}")
        if not self.categories:
            raise ValueError("categories must not be empty")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if not 2 <= self.min_hops <= self.max_hops <= 5:
            raise ValueError(f"need 2 <= min_hops <= max_hops <= 5, got {self.min_hops}..{self.max_hops}")
        for name in ("queries_per_category", "n_chains"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.benchmark_ngram < 3:
            raise ValueError("benchmark_ngram must be >= 3")
        if self.reference_repairs < 0:
            raise ValueError("reference_repairs must be >= 0")
        if self.shard_size < 1 or self.llm_concurrency < 1:
            raise ValueError("shard_size and llm_concurrency must be >= 1")
        if self.solution_timeout_s <= 0:
            raise ValueError("solution_timeout_s must be positive")
        if not 0 < self.dedup_threshold <= 1:
            raise ValueError("dedup_threshold must be in (0, 1]")

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> "SynthParams":
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)}
        extra = set(raw) - known
        if extra:
            raise ValueError(f"unknown synthesis parameters: {sorted(extra)}")
        if "categories" in raw:
            cats = raw["categories"]
            raw["categories"] = tuple(CATEGORY_IDS if cats in (None, "all") else cats)
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["categories"] = list(self.categories)
        return d

    @property
    def fingerprint(self) -> str:
        d = self.to_dict()
        for name in self._NOT_IN_FINGERPRINT:
            d.pop(name, None)
        return stable_id("synth-params", d, length=12)
