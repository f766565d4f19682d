"""Typed parameters of the synthesis stage, with a fingerprint that names their output partition."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from datamind.categories import CATEGORY_IDS
from datamind.roles import parse_overrides
from datamind.stage_params import StageParams, check_ranges, param

BACKENDS = ("offline", "llm")


@dataclass(frozen=True)
class SynthParams(StageParams):
    backend: str = param("offline", "Backend", enum=BACKENDS)
    categories: tuple[str, ...] = param(CATEGORY_IDS, "Task categories", enum=CATEGORY_IDS)
    queries_per_category: int = param(2, "Questions per category per table", minimum=0, maximum=20)
    n_chains: int = param(3, "Composed chains per table", minimum=0, maximum=20)
    # recursive easy-to-hard composition: 2 to 5 hops (paper, section 3.2)
    min_hops: int = param(2, "Minimum hops", minimum=2, maximum=5, section="Composition")
    max_hops: int = param(5, "Maximum hops", minimum=2, maximum=5, section="Composition")
    shard_size: int = param(20, "Tables per task instance", minimum=1, maximum=500, fingerprint=False)
    seed: int = param(0, "Seed")
    dedup_threshold: float = param(
        0.8, "Near-duplicate threshold", minimum=0.01, maximum=1, section="Quality",
        description="Questions of one table this similar (token Jaccard) to an earlier one are dropped.",
    )  # fmt: skip
    # Re-run every stored reference program from its own text in a fresh interpreter before writing.
    verify_solutions: bool = param(True, "Re-run reference programs", section="Quality")
    solution_timeout_s: float = param(
        30.0, "Program time limit (s)", minimum=1, maximum=600, section="Quality", fingerprint=False
    )
    # Decontamination: a question sharing this many consecutive words with a benchmark question is dropped
    # (benchmarks from DATAMIND_BENCHMARKS; the usual 13-gram rule).
    benchmark_ngram: int = param(13, "Benchmark n-gram overlap", minimum=3, maximum=50, section="Quality")
    llm_concurrency: int = param(
        4, "Concurrent LLM requests per task", minimum=1, maximum=64, section="LLM", fingerprint=False
    )
    # LLM backend: times a question whose program fails is sent back with the error before it is rejected.
    reference_repairs: int = param(1, "Repairs of a failing reference program", minimum=0, maximum=5, section="LLM")
    # LLM backend: times a reply that is not in the required tag format is shown to the model again with why.
    parse_retries: int = param(2, "Re-asks of a malformed reply", minimum=0, maximum=5, section="LLM")
    # A data engineer's corrections of the roles profiling gave columns (datamind.roles), by table or for
    # every table; a correction changes the fingerprint, so the next run synthesizes anew.
    column_roles: tuple[str, ...] = param(
        (), "Column role corrections", section="Quality",
        description="Entries 'Table.Column=role' or 'Column=role'; roles: identifier, additive_measure, "
        "nonadditive_measure, category, date, text.",
    )  # fmt: skip
    FINGERPRINT_PREFIX = ("synth-params",)
    FINGERPRINT_LENGTH = 12

    def __post_init__(self) -> None:
        if not self.categories:
            raise ValueError("categories must not be empty")
        check_ranges(self)
        parse_overrides(self.column_roles)
        if self.min_hops > self.max_hops:
            raise ValueError(f"need min_hops <= max_hops, got {self.min_hops}..{self.max_hops}")

    @classmethod
    def normalize(cls, raw: dict[str, Any]) -> dict[str, Any]:
        if "column_roles" in raw:
            raw["column_roles"] = tuple(raw["column_roles"] or ())
        if "categories" in raw:
            cats = raw["categories"]
            raw["categories"] = tuple(CATEGORY_IDS if cats in (None, "all") else cats)
        return raw

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["categories"] = list(self.categories)
        d["column_roles"] = list(self.column_roles)
        return d

    def fingerprint_view(self) -> dict[str, Any]:
        d = super().fingerprint_view()
        if not d["column_roles"]:  # runs without corrections keep the partition they always had
            d.pop("column_roles")
        return d
