"""The profiling stage's parameters (its form and the Python API read them here)."""

from __future__ import annotations

from dataclasses import dataclass

from datamind.stage_params import StageParams, check_ranges, param


@dataclass(frozen=True)
class ProfileParams(StageParams):
    shard_size: int = param(50, "Files per task instance", minimum=1, maximum=1000)

    def __post_init__(self) -> None:
        check_ranges(self)
