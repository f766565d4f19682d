"""An answer's numbers must come from something the agent saw: a value no output printed and no prompt held was
made up. A small model's reflection round does this (the 1.5B teacher answered 123729.17 after a critique, a
number none of its cells had printed), and a release that keeps such a trajectory teaches a model to answer
past its evidence. The rule filter drops it; counts an analyst reads off a short listing (small integers)
stand.

A number is shown when an output or the prompt holds it to the precision the answer writes it (11.48 is shown
by 11.4837; 12.5% by 0.125, a fall of 5 by -5), or when it is the sum or difference of two numbers of the same
short output cell (an analyst subtracting two printed means).
"""

from __future__ import annotations

import bisect
import math
from decimal import Decimal, InvalidOperation

from datamind.agent import protocol
from datamind.agent.equivalence import parse_answer

SMALL_COUNT = 10  # integers up to this read off a listing by eye ("2 groups") need no printed value
MAX_PAIR_CELL = 40  # the most numbers an output cell may hold for its pairs' sums and differences to count


def _decimals(value: float) -> int:
    """Decimal places of the number (11.50 counts as 11.5: the looser reading)."""
    try:
        exp = Decimal(repr(value)).normalize().as_tuple().exponent
    except InvalidOperation:
        return 0
    return max(0, -int(exp)) if isinstance(exp, int) else 0


def _tolerance(places: int) -> float:
    return 0.5 * 10.0**-places * (1 + 1e-9) + 1e-12


def _near(values: list[float], target: float, tol: float) -> bool:
    i = bisect.bisect_left(values, target - tol)
    return i < len(values) and values[i] <= target + tol


def _targets(answer: float, places: int) -> list[tuple[float, float]]:
    # 12.5% and 12.5 are shown by 0.125; "fell by 5" by -5
    return [(abs(answer), _tolerance(places)), (abs(answer) / 100, _tolerance(places + 2))]


def _pair_makes(cell: list[float], target: float, tol: float) -> bool:
    """Whether x + y or x - y, x and y of one sorted cell, is +-target."""
    return any(_near(cell, t, tol) for x in cell for t in (target - x, -target - x, x - target, x + target))


def unshown_number(final_answer: str, messages: list[dict]) -> float | None:
    """The first number of ``final_answer`` that nothing the agent saw holds (see the module), or None."""
    wanted = [
        v
        for v, pct in parse_answer(final_answer).numbers
        if math.isfinite(v) and not (float(v).is_integer() and abs(v) <= SMALL_COUNT and not pct)
    ]
    if not wanted:
        return None
    cells: list[list[float]] = []
    for m in messages:
        if m.get("role") == "tool":
            text = protocol.interpreter_body(m.get("content") or "") or m.get("content") or ""
        elif m.get("role") in ("user", "system"):
            text = m.get("content") or ""
        else:
            continue
        cells.append(sorted(v for v, _ in parse_answer(text).numbers if math.isfinite(v)))
    seen = sorted({abs(v) for cell in cells for v in cell})
    # a wide print is a table: sums of its pairs would match almost any number by chance
    small = [cell for cell in cells if 2 <= len(cell) <= MAX_PAIR_CELL]
    for value in wanted:
        targets = _targets(value, _decimals(value))
        if any(_near(seen, t, tol) for t, tol in targets):
            continue
        if not any(_pair_makes(cell, t, tol) for cell in small for t, tol in targets):
            return value
    return None
