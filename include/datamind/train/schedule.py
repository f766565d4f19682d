"""Schedules: the SFT/RL mixing weight gamma (Eq. 7) annealed by cosine from its peak to its valley."""

from __future__ import annotations

import math


def cosine_gamma(step: int, total_steps: int, peak: float = 0.9, valley: float = 0.05) -> float:
    """gamma at ``step`` (0-based) of ``total_steps``: ``peak`` at the first step, ``valley`` at the last."""
    if total_steps < 1:
        raise ValueError("total_steps must be >= 1")
    if total_steps == 1:
        return peak
    progress = min(max(step, 0), total_steps - 1) / (total_steps - 1)
    return valley + 0.5 * (peak - valley) * (1.0 + math.cos(math.pi * progress))


def gamma_at(step: int, total_steps: int, schedule: str, peak: float, valley: float) -> float:
    if schedule == "cosine":
        return cosine_gamma(step, total_steps, peak, valley)
    if schedule == "constant":
        return peak
    raise ValueError(f"unknown gamma schedule {schedule!r}")
