"""Whether two answers say the same thing: programmatic answer equivalence, no LLM (the offline
self-consistency judge, evaluation's rule judge and the RL reward all use it).

Two answers are equivalent when
  * their numbers agree as multisets, each pair within a relative tolerance (3 %, the paper's rule;
    25 % and 0.25 count as the same value), and
  * their words agree: the same set of content words after normalisation (case, accents, punctuation,
    yes/true and no/false, filler such as "the final answer is"), or, when numbers carried the answer,
    one word set contains the other (a unit or label added on one side only).
An empty answer is never equivalent to anything (completeness).  The answers are grouped into clusters
of mutually equivalent answers; the set is consistent when one cluster holds them all.  The best answer
is the most concise member of the largest cluster.

Limits, stated plainly: this judges *surface* equivalence.  Paraphrases with different content words
("rises" vs "increases") are judged different; the LLM judge exists for descriptive answers.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

REL_TOL = 0.03

_NUM = re.compile(
    r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?\s*%?",
)
_FILLER = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?(?:answer|result)\s*(?:is|:|=)\s*", re.IGNORECASE)
_BOOL = {"true": "yes", "yes": "yes", "false": "no", "no": "no"}
_STOP = frozenset(
    "a an the is are was were be of in on at to for and or by with as that this these those it its from "
    "which what there their than then so final answer result approximately about around roughly equal "
    "equals value values total".split()
)


@dataclass(frozen=True)
class Parsed:
    text: str
    numbers: tuple[tuple[float, bool], ...]  # (value, was_percent)
    words: frozenset[str]
    word_seq: tuple[str, ...] = ()  # content words in order (labels of numbers keep their position)

    @property
    def empty(self) -> bool:
        return not self.numbers and not self.words


def _strip_accents(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


def parse_answer(text: str | None) -> Parsed:
    raw = unicodedata.normalize("NFKC", text or "")
    body = _FILLER.sub("", raw.strip())
    numbers: list[tuple[float, bool]] = []

    def grab(m: re.Match) -> str:
        tok = m.group(0).strip()
        if not re.search(r"\d", tok):
            return m.group(0)
        pct = tok.endswith("%")
        tok = tok.rstrip("%").strip().replace(",", "").replace("−", "-")
        try:
            value = float(tok)
        except ValueError:
            return m.group(0)
        if math.isfinite(value):
            numbers.append((value, pct))
        return " "

    rest = _NUM.sub(grab, body)
    for special in ("nan", "inf", "-inf"):
        if re.search(rf"(?<![\w-]){re.escape(special)}(?!\w)", rest.lower()):
            numbers.append((float(special), False))
    seq = [_BOOL.get(w, w) for w in re.findall(r"[^\W_]+", _strip_accents(rest.lower())) if w not in ("nan", "inf")]
    return Parsed(raw, tuple(numbers), frozenset(w for w in seq if w not in _STOP), tuple(seq))


def numbers_close(a: float, b: float, rel_tol: float = REL_TOL) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if a == b:
        return True
    return abs(a - b) <= rel_tol * max(abs(a), abs(b))


def _num_match(x: tuple[float, bool], y: tuple[float, bool], rel_tol: float) -> bool:
    (a, pa), (b, pb) = x, y
    if numbers_close(a, b, rel_tol):
        return True
    if pa != pb:  # 25% vs 0.25
        return numbers_close(a / 100 if pa else a, b / 100 if pb else b, rel_tol)
    return False


def _multiset_match(xs, ys, rel_tol: float) -> bool:
    if len(xs) != len(ys):
        return False
    left = list(ys)
    # Closest-first greedy matching: each number pairs with the nearest unused one on the other side.
    for x in sorted(xs, key=lambda t: abs(t[0]) if math.isfinite(t[0]) else math.inf):
        candidates = [j for j, y in enumerate(left) if _num_match(x, y, rel_tol)]
        if not candidates:
            return False
        j = min(candidates, key=lambda j: abs(left[j][0] - x[0]) if math.isfinite(x[0] - left[j][0]) else 0)
        left.pop(j)
    return True


def equivalent(a: str | Parsed | None, b: str | Parsed | None, rel_tol: float = REL_TOL) -> tuple[bool, str]:
    """Whether two answers say the same thing, and a short reason."""
    pa = a if isinstance(a, Parsed) else parse_answer(a)
    pb = b if isinstance(b, Parsed) else parse_answer(b)
    if pa.empty or pb.empty:
        return False, "an answer is empty"
    if pa.word_seq and pa.word_seq == pb.word_seq and len(pa.numbers) == len(pb.numbers):
        # Same labels in the same order ("A: 3, B: 5"): numbers must agree position by position.
        if not all(_num_match(x, y, rel_tol) for x, y in zip(pa.numbers, pb.numbers, strict=True)):
            na, nb = _fmt([v for v, _ in pa.numbers]), _fmt([v for v, _ in pb.numbers])
            return False, f"numbers differ position by position ({na} vs {nb})"
        return True, "same values and wording"
    if not _multiset_match(pa.numbers, pb.numbers, rel_tol):
        na = [v for v, _ in pa.numbers]
        nb = [v for v, _ in pb.numbers]
        return False, f"numbers differ ({_fmt(na)} vs {_fmt(nb)}, tolerance {rel_tol:.0%})"
    if pa.words == pb.words:
        return True, "same values and wording" if pa.numbers else "same wording"
    if pa.numbers and (pa.words <= pb.words or pb.words <= pa.words):
        return True, "same values; one answer adds labels or units"
    only_a = sorted(pa.words - pb.words)[:8]
    only_b = sorted(pb.words - pa.words)[:8]
    return False, f"wording differs (only in one: {only_a}; only in the other: {only_b})"


def _fmt(values: list[float]) -> str:
    shown = ", ".join(f"{v:.6g}" for v in values[:6])
    return f"[{shown}{', ...' if len(values) > 6 else ''}]"


def cluster(answers: list[str], rel_tol: float = REL_TOL) -> tuple[list[list[int]], list[str]]:
    """Groups of equivalent answers (each compared with the group's first member) and the reasons seen."""
    parsed = [parse_answer(a) for a in answers]
    groups: list[list[int]] = []
    notes: list[str] = []
    for i, p in enumerate(parsed):
        for g in groups:
            ok, why = equivalent(parsed[g[0]], p, rel_tol)
            if ok:
                g.append(i)
                break
            notes.append(f"answer {i + 1} vs answer {g[0] + 1}: {why}")
        else:
            groups.append([i])
    return groups, notes


def numbers_differ(answers: list[str], rel_tol: float = REL_TOL) -> tuple[int, int, str] | None:
    """The first pair of answers that both carry numbers and whose numbers do not agree (as multisets, within
    ``rel_tol``), with the reason; None when every pair that carries numbers agrees. Answers without numbers
    are left to whoever reads words."""
    parsed = [parse_answer(a) for a in answers]
    for i, a in enumerate(parsed):
        for j in range(i + 1, len(parsed)):
            b = parsed[j]
            if a.numbers and b.numbers and not _multiset_match(a.numbers, b.numbers, rel_tol):
                return i, j, f"numbers differ ({_fmt([v for v, _ in a.numbers])} vs {_fmt([v for v, _ in b.numbers])})"
    return None
