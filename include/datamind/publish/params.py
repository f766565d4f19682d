"""The publishing stage's parameters: release layout and the rule filters' limits (form and Python API)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datamind.filters import linguistic
from datamind.filters.rules import MAX_ANSWER_TOKENS, FilterConfig
from datamind.stage_params import StageParams, check_ranges, param


@dataclass(frozen=True)
class PublishParams(StageParams):
    shard_rows: int = param(500, "Rows per Parquet shard", minimum=1, maximum=100_000)
    judged_partition: str | None = param(
        None,
        "Judging configuration",
        description="Which judged/params=<fingerprint> partition to publish; needed only when several "
        "judging configurations (e.g. selection strategies) were run side by side.",
    )
    mix_partitions: bool = param(
        False,
        "Mix judging configurations",
        description="Publish every judged partition in one release (a teacher model's and the offline engine's, "
        "say); each sample names who wrote it (model, question_model). A query judged in several keeps the "
        "samples of the first partition by name; the others are recorded as duplicate_query.",
    )
    test_fraction: float = param(0.1, "Held-out share", minimum=0, maximum=0.5, description="Split by file.")
    min_test_files: int = param(
        2, "Held-out files at least", minimum=0, maximum=1000,
        description="A small corpus still holds out this many files (never past half of them), so a held-out "
        "evaluation measures more than one file's quirks.",
    )  # fmt: skip
    max_file_share: float = param(
        0.25, "Largest share of one file", minimum=0.01, maximum=1,
        description="No file gives more than this share of a release's samples (the rest are recorded as "
        "file_share_cap); applied where the release has enough files to meet it (4 at 0.25). 1: no cap.",
    )  # fmt: skip
    # paper, section 3.4: answers over 1,024 tokens are filtered out
    max_answer_tokens: int = param(MAX_ANSWER_TOKENS, "Answer length limit (tokens)", minimum=1, maximum=32768,
                                   section="Rule filters")  # fmt: skip
    allow_void_turns: bool = param(False, "Keep trajectories with void turns", section="Rule filters")
    max_minority_script_share: float = param(
        linguistic.MAX_MINORITY_SHARE, "Largest share of a second script", minimum=0, maximum=1,
        section="Rule filters", description="Linguistic integrity: text mixing scripts beyond this is filtered.",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_ranges(self)

    @classmethod
    def normalize(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """The form's empty judging configuration is none named: the only one there is."""
        return {**raw, "judged_partition": raw.get("judged_partition") or None}

    def filter_config(self) -> FilterConfig:
        return FilterConfig(self.max_answer_tokens, self.allow_void_turns, self.max_minority_script_share)


@dataclass(frozen=True)
class ReviewForm:
    """What the reviewer of a release that missed its audit fills in beside Approve / Reject."""

    comment: str = param("", "Comment", description="Why, for the release's card")
