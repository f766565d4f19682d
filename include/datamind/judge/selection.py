"""Which trajectories of a judged query become training samples: the paper's four settings (its Fig. 3).

- ``con_select``    (paper default) consistent sets only; keep the judge's best trajectory.
- ``random_select`` consistent sets only; keep one answered trajectory chosen at random (seeded per query,
                    so reruns pick the same one).
- ``non_select``    consistent sets only; keep every answered trajectory.
- ``non_con``       no consistency filter; keep every answered trajectory.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from datamind.ids import stable_id
from datamind.judge.verdict import Verdict

STRATEGIES = ("con_select", "random_select", "non_select", "non_con")
DEFAULT_STRATEGY = "con_select"


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"selection strategy must be one of {STRATEGIES}, got {strategy!r}")
    return strategy


def needs_consistency(strategy: str) -> bool:
    return check_strategy(strategy) != "non_con"


def select(
    strategy: str, verdict: Verdict, answered: Sequence[bool], *, seed_key: str = "", seed: int = 0
) -> list[int]:
    """0-based indices of the trajectories to keep, in index order."""
    check_strategy(strategy)
    candidates = [i for i, ok in enumerate(answered) if ok]
    if strategy == "non_con":
        return candidates
    if not verdict.consistent or not candidates:
        return []
    if strategy == "con_select":
        best = verdict.best_index
        return [best] if 0 <= best < len(answered) and answered[best] else candidates[:1]
    if strategy == "random_select":
        rng = random.Random(int(stable_id("select", seed_key, seed), 16))
        return [rng.choice(candidates)]
    return candidates
