"""Near-duplicate question removal within one table: word-shingle Jaccard similarity.

Questions are lower-cased, reduced to word tokens and turned into overlapping 3-word shingles (the
token set for very short questions). Two questions whose shingle sets overlap at or above the
threshold are near-duplicates; the one seen first is kept. Rows other rows depend on (chain parents)
are never dropped, so lineage stays intact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
_WORD = re.compile(r"\w+", re.UNICODE)


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def shingles(text: str, k: int = 3) -> frozenset:
    toks = tokens(text)
    if len(toks) < k:
        return frozenset(toks)
    return frozenset(tuple(toks[i : i + k]) for i in range(len(toks) - k + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def near_duplicates(
    items: Sequence[T],
    text: Callable[[T], str],
    threshold: float,
    protected: Callable[[T], bool] = lambda _: False,
) -> tuple[list[T], list[tuple[T, T, float]]]:
    """(kept, dropped) where dropped holds (item, the kept item it duplicates, similarity)."""
    kept: list[T] = []
    kept_sh: list[frozenset] = []
    dropped: list[tuple[T, T, float]] = []
    for item in items:
        sh = shingles(text(item))
        best, best_sim = None, 0.0
        for other, osh in zip(kept, kept_sh, strict=True):
            sim = jaccard(sh, osh)
            if sim > best_sim:
                best, best_sim = other, sim
        if best is not None and best_sim >= threshold and not protected(item):
            dropped.append((item, best, best_sim))
            continue
        kept.append(item)
        kept_sh.append(sh)
    return kept, dropped
