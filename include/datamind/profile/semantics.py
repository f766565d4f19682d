"""What rows and cells mean, found at profiling: aggregate rows and missing values written as text.

**Aggregate rows** are rows that total other rows: a "Total" line under a sheet, subtotals, a country's line
beside its regions and its states (the census sheet holds "United States", the 4 regions, then the states).
A question that takes the maximum, the mean or a count above the mean over such a table counts the totals
as data ("the highest population" answers "United States"). A row is an aggregate when

* its label cell says so (``Total``, ``Grand total``, ``Subtotal``, ``All``, ``Overall``, ``Gesamt``...), or
  the label starts or ends with such a word and the row holds the largest value of every amount column; or
* its amounts equal the sum of the other rows in every amount column (a total line without a label); or
* it holds the largest amounts and the next largest rows sum to exactly its amounts in at least two amount
  columns, while the rest sum to about as much again (a total beside one level of subtotals: the country,
  its regions, its states).

Amount columns are the profile's additive measures (``datamind.roles``): a rate or a key is never summed.
What is found goes into ``meta_info["aggregate_rows"]`` with its evidence, and synthesis leaves those rows
out of every question on the table, saying so in the question.

**Disguised missing values** are cells that hold text standing for nothing: ``''``, ``'None'``, ``'NA'``,
``'N/A'``, ``'null'``, ``'-'``, ``'?'``. pandas reads several of them from a CSV as missing, but a database's
or a workbook's text keeps them (the BIRD Disney table's voice_actor holds 53 ``'None'`` strings), so
"which column has the most missing values" is wrong when only nulls are counted. Counts per column go into
``meta_info["disguised_missing"]`` ({column: {token as written: count}}).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datamind import roles as R
from datamind.vocabulary import MISSING_TOKENS

# A whole label that names a total of other rows.
_TOTAL_WORD = r"(?:grand\s+total|sub-?\s?total|totals?|all|overall|sum|gesamt|insgesamt|gesamtsumme|summe|zusammen)"
_TOTAL_LABEL = re.compile(rf"^{_TOTAL_WORD}$", re.IGNORECASE)
# A label that starts or ends with such a word ("Total Europe", "All industries", "Europe total"): an aggregate only
# when the row also holds the largest amounts ("Total Recall" is a film).
_TOTAL_AFFIX = re.compile(rf"^(?:{_TOTAL_WORD})\b\W*\S|\S\W*\b(?:total|subtotal|insgesamt|gesamt)$", re.IGNORECASE)
MAX_LABELS = 50  # distinct aggregate labels recorded
MAX_ROWS = 200  # aggregate row positions recorded
MAX_PREFIX = 60  # subtotal rows looked for beside a total
_SUM_ROWS = 200_000  # sums are compared on tables up to this many rows


def _norm(text: str) -> str:
    return " ".join(str(text).split()).lower()


def is_missing_token(value: Any) -> bool:
    """Whether a cell's text stands for a missing value."""
    return isinstance(value, str) and _norm(value) in MISSING_TOKENS


def disguised_missing(arr: pa.Array) -> dict[str, int]:
    """{token as written: count} of the text cells of ``arr`` that stand for missing values. ``'NA'`` is
    a code, not a blank, in a column of short upper-case codes (North America beside EU and AS)."""
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) or len(arr) == 0:
        return {}
    norm = pc.utf8_lower(pc.utf8_trim_whitespace(arr))
    hit = pc.is_in(norm, value_set=pa.array(MISSING_TOKENS, arr.type))
    if not pc.any(hit).as_py():
        return {}
    found = pc.filter(arr, hit)
    counts = pc.value_counts(found)
    out = {
        str(v): int(n)
        for v, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    }
    if any(_norm(k) == "na" for k in out):
        others = pc.filter(arr, pc.invert(pc.fill_null(hit, False))).drop_null()
        sample = others.slice(0, 200).to_pylist()
        if sample and all(len(s) <= 3 and s.strip().isupper() for s in sample):
            out = {k: n for k, n in out.items() if _norm(k) != "na"}
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def _close(a: np.ndarray, b: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Element-wise equality: exact for whole-number columns, to 1e-6 relative for the others."""
    return np.where(exact, a == b, np.isclose(a, b, rtol=1e-6, atol=1e-9))


def amount_columns(profiles: list[dict], values: dict[int, np.ndarray]) -> list[int]:
    """Positions of the columns whose sum means something (additive measures, not keys or rates) among
    those ``values`` holds as numbers."""
    out = []
    for j, p in enumerate(profiles):
        if j in values and p.get("kind") in ("integer", "numeric") and R.column_role(p) == R.ADDITIVE:
            out.append(j)
    return out


def _sum_evidence(x: np.ndarray, filled: np.ndarray, exact: np.ndarray, names: list[str]) -> dict[int, str]:
    """{aggregate row position: evidence} from the amounts ``x`` (rows x amount columns, NaN missing): a row
    equal to the sum of all the others, or a total beside one level of subtotals."""
    n, k = x.shape
    if n < 4 or k == 0 or n > _SUM_ROWS:
        return {}
    tops = [int(np.nanargmax(x[:, c])) for c in range(k) if not np.all(np.isnan(x[:, c]))]
    if not tops:
        return {}
    t = max(sorted(set(tops)), key=tops.count)
    row = x[t]
    usable = ~np.isnan(row) & (row != 0)
    if not usable.any():
        return {}
    shown = _shown([names[c] for c in np.flatnonzero(usable)])
    others = np.delete(np.arange(n), t)
    rest = filled[others].sum(axis=0)
    if _close(row[usable], rest[usable], exact[usable]).all() and (usable.sum() >= 2 or n >= 5):
        return {t: f"row {t + 1} equals the sum of the other {n - 1} rows in {shown}"}
    if usable.sum() < 2:
        return {}
    c0 = int(np.flatnonzero(usable)[0])
    # the subtotals: the rows right after the total (a report lists the regions under the country), or else the
    # largest rows (regions outweigh any of their members)
    after = others[others > t][:MAX_PREFIX]
    largest = others[np.argsort(-filled[others, c0], kind="stable")][:MAX_PREFIX]
    for order in (after, largest):
        prefix = np.cumsum(filled[order], axis=0)
        for m in range(2, min(len(order), n - 3) + 1):
            if not _close(row[usable], prefix[m - 1][usable], exact[usable]).all():
                continue
            if not np.all((rest - prefix[m - 1])[usable] >= 0.9 * row[usable]):
                break
            members = sorted(int(i) for i in order[:m])
            listed = ", ".join(str(i + 1) for i in members[:8]) + (" ..." if m > 8 else "")
            out = {
                t: f"row {t + 1} equals the sum of rows {listed} in {shown}, and the other rows sum to about as much "
                "again"
            }
            out.update(
                {i: f"row {i + 1} is one of the {m} subtotals that sum to row {t + 1} in {shown}" for i in members}
            )
            return out
    return {}


def _whole(x: np.ndarray) -> np.ndarray:
    """Per column: whether every value is a whole number (its sums are compared exactly)."""
    with np.errstate(invalid="ignore"):
        return np.all(np.isnan(x) | (x == np.round(x)), axis=0)


def _shown(cols: list[str]) -> str:
    return ", ".join(cols[:4]) + (" ..." if len(cols) > 4 else "")


def _block_totals(x: np.ndarray, filled: np.ndarray, exact: np.ndarray, rows: list[int]) -> bool:
    """Whether each of ``rows`` (sorted) equals the sum of the rows between it and the previous one (a
    subtotal under its group), or of those between it and the next one (a subtotal above its group), in
    every amount column it fills."""
    if x.shape[1] == 0:
        return False
    bounds = [-1, *rows, x.shape[0]]
    for b, r in enumerate(rows, start=1):
        usable = ~np.isnan(x[r])
        if not usable.any():
            return False
        above = filled[bounds[b - 1] + 1 : r].sum(axis=0)
        below = filled[r + 1 : bounds[b + 1]].sum(axis=0)
        if not (
            _close(x[r][usable], above[usable], exact[usable]).all()
            or _close(x[r][usable], below[usable], exact[usable]).all()
        ):
            return False
    return True


def _column_max(x: np.ndarray) -> np.ndarray:
    """Each amount column's largest value (NaN where a column holds none)."""
    if x.shape[1] == 0 or x.shape[0] == 0:
        return np.empty(x.shape[1])
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column
        return np.nanmax(x, axis=0)


_SUBTOTAL = re.compile(r"^sub-?\s?totals?$", re.IGNORECASE)


def aggregate_rows(
    names: list[str], profiles: list[dict], strings: dict[int, pa.Array], numbers: dict[int, np.ndarray], n_rows: int
) -> dict[str, Any] | None:
    """The table's aggregate rows with their evidence, or None. ``strings``: the text columns (position ->
    Arrow array), ``numbers``: number columns as float arrays (position -> values)."""
    amounts = amount_columns(profiles, numbers)
    x = np.column_stack([numbers[j] for j in amounts]).astype(float) if amounts else np.empty((n_rows, 0))
    found: dict[int, str] = {}
    label_hits: dict[int, set[int]] = {}  # text column -> rows its labels mark
    top = _column_max(x)
    filled, exact = np.nan_to_num(x, nan=0.0), _whole(x)  # amounts to sum (NaN as 0), and which sum exactly
    # the rows holding the largest value of every amount column (where a "Total ..." label is a total)
    on_top = np.all(x >= top, axis=1) if amounts else np.zeros(n_rows, bool)
    for j, arr in strings.items():
        # the cells that may name a total, found by Arrow's regex kernel, then grouped by text: only a few
        # distinct labels reach Python
        # the labels are matched once per distinct text (a category column holds a handful), in Python only for
        # the few that may name a total
        encoded = pc.dictionary_encode(pc.utf8_trim_whitespace(arr))
        texts = encoded.dictionary
        maybe = pc.or_(
            pc.match_substring_regex(texts, _TOTAL_LABEL.pattern, ignore_case=True),
            pc.match_substring_regex(texts, _TOTAL_AFFIX.pattern, ignore_case=True),
        )
        candidates = np.flatnonzero(maybe.to_numpy(zero_copy_only=False))
        if not len(candidates):
            continue
        which = encoded.indices.to_numpy(zero_copy_only=False)
        for k in candidates.tolist():
            text = texts[k].as_py()
            whole_label = _TOTAL_LABEL.match(text) is not None
            if not whole_label and not _TOTAL_AFFIX.search(text):
                continue
            mask = which == k
            if not whole_label:
                mask &= on_top  # "Total Europe" names a total only on a row holding the largest amounts
            rows = np.flatnonzero(mask).tolist()
            if not rows or len(rows) * 2 >= n_rows:
                continue  # most rows: a level of the data, not totals beside it
            # a label on one row is its total; one repeated ("Total" under each group) only where each of its rows
            # sums its group, or where it says subtotal ("Total" may also be a kind: a total eclipse)
            if len(rows) == 1 or _SUBTOTAL.match(text) or _block_totals(x, filled, exact, rows):
                label_hits.setdefault(j, set()).update(rows)
    for j, rows in label_hits.items():
        if len(rows) * 2 >= n_rows:
            continue  # most rows: a level of the data, not totals beside it
        for i in sorted(rows):
            found.setdefault(i, f"row {i + 1}: {names[j]} is {strings[j][i].as_py().strip()!r}")
    if not found and amounts:
        found = _sum_evidence(x, filled, exact, [names[j] for j in amounts])
    if not found:
        return None
    rows = sorted(found)
    column, labels = _label_column(names, strings, set(rows), label_hits)
    return {
        "count": len(rows),
        "rows": rows[:MAX_ROWS],
        "label_column": column,
        "labels": labels[:MAX_LABELS],
        "evidence": list(dict.fromkeys(found[i] for i in rows))[:12],
    }


def _label_column(
    names: list[str], strings: dict[int, pa.Array], rows: set[int], label_hits: dict[int, set[int]]
) -> tuple[str | None, list[str]]:
    """The text column whose values name exactly the aggregate rows (a filter on it leaves out those rows and
    no other), with those values; a column whose labels said "total" first."""
    for j in sorted(strings, key=lambda j: (j not in label_hits, j)):
        cells = strings[j].to_pylist()
        labels = [cells[i] for i in sorted(rows)]
        if any(not isinstance(v, str) or not v.strip() for v in labels):
            continue
        wanted = set(labels)
        if all(i in rows for i, v in enumerate(cells) if v in wanted):
            return names[j], list(dict.fromkeys(labels))
    return None, []
