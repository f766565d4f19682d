"""Profile tables: column kinds and statistics, a head sample and the ``meta_info`` JSON for prompts.

``meta_info`` keys (what the synthesis prompt template reads):

* ``description``: the table's description (BIRD column descriptions when present, else a summary
  generated from the profile: size and which columns are numeric, categorical, temporal);
* ``head``: the first rows as a markdown table, cells cut to ``cell_chars``;
* ``columns``: column names in order; ``type``: {column: kind};
* ``range``: {column: [min, max]} for numeric, integer and datetime columns;
* ``unique``: {column: most frequent values} for categorical and boolean columns and any column with at
  most ``unique_threshold`` distinct values, capped at ``unique_cap`` values;
* ``row_count``, ``column_count``;
* where found (``profile.semantics``): ``aggregate_rows`` (rows that total other rows: their positions, the
  column and labels that name them, the evidence) and ``disguised_missing`` ({column: {text standing for a
  missing value, as written: count}}).

Kinds: ``integer``, ``numeric`` (floats), ``boolean``, ``datetime`` (native, or text that parses as
dates in >= 90% of cells), ``id`` (all distinct: integer keys named like ids or counting 1..n, short text
codes), ``categorical`` (at most 50 distinct values and at most half as many as non-null cells), ``text``,
and ``binary`` (SQLite blobs). Every statistic is computed on the DataFrame exactly as ``load_table`` returns it.

``profile_tables`` profiles a batch of tables (a profiling group) and gives each what it alone gets: the
batch's number columns are profiled in shared blocks, and means and standard deviations are pairwise sums
over a column's valid values padded with zeros to a power of two (``_moments``), so no digit depends on
the route a column took or the tables it was profiled with.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.tseries.api import guess_datetime_format

from datamind.formats.common import TableColumns, arrow_kernel, frame_columns
from datamind.profile import semantics

_DATEISH = re.compile(
    r"^\s*(\d{4}[-/.]\d{1,2}([-/.]\d{1,2})?|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}|"
    r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2},?\s+\d{2,4}|"
    r"\d{1,2}\s+(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?,?\s+\d{2,4})",
    re.IGNORECASE,
)
_IDNAME = re.compile(r"(^|[_\s])(id|key|code|no|nr|num)$|id$|^index$|^unnamed: 0$", re.IGNORECASE)
_BOOL_WORDS = {"true", "false", "yes", "no", "y", "n", "t", "f"}


_MIN_MAX = arrow_kernel("min_max")
_VALUE_COUNTS = arrow_kernel("value_counts")
_DROP_NULL = arrow_kernel("drop_null")
_TAKE = arrow_kernel("take", pc.TakeOptions(boundscheck=False))  # indices come from an argsort of the same values


def _fmt(v: Any) -> Any:
    """A JSON-friendly scalar: ints stay ints, floats are rounded to 6 significant digits, dates as ISO."""
    t = type(v)
    if t is str or v is None:
        return v
    if t is int:
        return v
    if t is float:
        if v != v:  # NaN
            return None
        if v.is_integer():
            return int(v) if abs(v) < 2**53 else v
        if math.isinf(v):
            return str(v)
        r = round(v, 6)
        # Six significant digits; most values are already that short, so skip the formatting then.
        return r if len(repr(r)) <= 7 else float(f"{v:.6g}")
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return str(f)
        return int(f) if f.is_integer() and abs(f) < 2**53 else float(f"{f:.6g}")
    if isinstance(v, (pd.Timestamp, dt.datetime)):
        return v.isoformat() if (v.hour or v.minute or v.second or v.microsecond) else v.date().isoformat()
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(v))} bytes>"
    return str(v)


_EXACT_INTS = float(2**53)


def _float_text(v: float) -> str:
    """``str(_fmt(v))`` of a float that is not NaN, without ``_fmt``'s dispatch on type (a profile
    formats thousands of numbers)."""
    if v.is_integer():
        return str(int(v)) if -_EXACT_INTS < v < _EXACT_INTS else repr(v)
    t = repr(v)
    if len(t) <= 7 and "e" not in t:  # at most five decimals (or inf): rounding to six leaves it as it is
        return t
    t = repr(round(v, 6))
    return t if len(t) <= 7 else repr(float(f"{v:.6g}"))


def _text(v: Any) -> str | None:
    if type(v) is float and v == v:
        return _float_text(v)
    v = _fmt(v)
    return None if v is None else str(v)


def _cut(s: str, n: int) -> str:
    # Printable text holds no whitespace but the ASCII space; single inner spaces leave nothing to collapse.
    if len(s) <= n and s.isprintable() and "  " not in s and s[:1] != " " and s[-1:] != " ":
        return s
    if len(s) > 4 * n:
        # Collapsing a prefix gives a prefix of the collapsed whole, so a long cell (up to a sheet's 32,767
        # characters) is collapsed only as far as the cut needs, when that prefix is long enough.
        head = " ".join(s[: 4 * n].split())
        if len(head) > n:
            return head[: n - 1] + "…"
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _arrow(values) -> pa.Array | None:
    """The column as an Arrow array (NaN -> null), or None when Arrow cannot hold it (mixed objects)."""
    try:
        arr = pa.array(values, from_pandas=True) if isinstance(values, np.ndarray) else pa.array(values)
    # OverflowError: Python ints past 64 bits among the objects (a column pandas left as objects)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
        return None
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _text_array(values) -> pa.Array:
    """Mixed python objects: profile their text form, which is what a reader of the table sees."""
    return pa.array([None if _fmt(v) is None else str(_fmt(v)) for v in values], pa.string())


def _head_table(names: list[str], cells: list[list[str]], n: int, cell_chars: int) -> str:
    """The first ``n`` rows as a markdown table; ``cells``: each column's first cells, as ``_cells`` writes them."""
    cols = [_cut(c, cell_chars).replace("|", "\\|") for c in names]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(column[i] for column in cells) + " |" for i in range(n)]
    return "\n".join(lines)


def _cells(values: list[Any], cell_chars: int) -> list[str]:
    """Head cells as the markdown table shows them: formatted, cut, pipes escaped, missing as empty."""
    out = []
    for v in values:
        t = _fmt(v)
        out.append("" if t is None else _cut(str(t), cell_chars).replace("|", "\\|"))
    return out


def _number_cells(values: list[Any]) -> list[str]:
    """``_cells`` of plain numbers (Python ints and floats from numpy): short, no blanks or pipes."""
    return [str(v) if type(v) is int else "" if v != v else _float_text(v) for v in values]


def _looks_like_dates(sample: list[Any]) -> bool:
    """Whether at least 80% of the sample (and one value) looks like a date; most text columns are
    settled by their first few values."""
    misses_allowed = len(sample) - max(1, math.ceil(0.8 * len(sample)))
    if misses_allowed < 0:  # an empty sample
        return False
    for v in sample:
        if not (isinstance(v, str) and _DATEISH.match(v)):
            misses_allowed -= 1
            if misses_allowed < 0:
                return False
    return True


_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?((Z|[+-]\d{2}:?\d{2})?)$")
# Tried after pandas' guess: layouts its guesser misses (12-hour clocks, month names before the year).
_COMMON_FORMATS = [
    "%b %d %Y %I:%M:%S %p",
    "%b %d %Y %H:%M:%S",
    "%m/%d/%Y %I:%M:%S %p",
    "%d %b %Y",
    "%b %d, %Y",
    "%Y.%m.%d %H:%M:%S",
    "%d.%m.%Y %H:%M",
]


def _strptime_share(vals: pa.Array, fmt: str) -> tuple[pa.Array | None, float]:
    try:
        parsed = pc.strptime(vals, format=fmt, unit="us", error_is_null=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None, 0.0
    return parsed, 1.0 - parsed.null_count / max(1, len(vals))


def _candidate_formats(first: str):
    """Formats to try, best guess first: pandas' guess (both day-first readings), then the common layouts;
    lazily, since the first one usually parses every cell."""
    seen = set()
    for dayfirst in (False, True):  # 03.04.2023 is ambiguous: let the sample decide
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fmt = guess_datetime_format(first, dayfirst=dayfirst)
        if fmt and fmt not in seen:
            seen.add(fmt)
            yield fmt
    for fmt in _COMMON_FORMATS:
        if fmt not in seen:
            seen.add(fmt)
            yield fmt


def _has_whitespace_runs(vals: pa.Array) -> bool:
    """Whether ``\\s+`` -> " " could change any cell (RE2's ``\\s`` is [\\t\\n\\f\\r ]). The regex costs ~250 ns
    per cell; one look at the character buffer (which may hold more than the cells: then we only answer
    yes too often) settles it for the usual single-spaced text."""
    if not (pa.types.is_string(vals.type) or pa.types.is_large_string(vals.type)):
        return True
    data = vals.buffers()[2]
    if data is None:
        return False
    chars = data.to_pybytes()
    return any(w in chars for w in (b"  ", b"\t", b"\n", b"\f", b"\r"))


def _parse_dates(vals: pa.Array, sample: list[Any]) -> pa.Array | None:
    """Text -> timestamps when >= 90% of cells parse. Arrow's ISO-8601 parser first; else the format pandas
    guesses from the first cell (both day-first readings, the sample decides), applied with Arrow's
    vectorized strptime, then with pandas; per-cell parsing only when no format can be guessed."""
    iso = _ISO.match(str(sample[0]))
    if iso:
        # A failing cast scans the whole column, so only ISO-looking text is tried, with the right zone type.
        try:
            return pc.cast(vals, pa.timestamp("us", tz="UTC") if iso.group(4) else pa.timestamp("us"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    # Exports pad with double spaces ("Apr 13  2017"); single spaces let a format be guessed.
    if _has_whitespace_runs(vals):
        vals = pc.replace_substring_regex(vals, r"\s+", " ")
    vals = pc.utf8_trim_whitespace(vals)
    first = vals[0].as_py()
    probe = vals.slice(0, 50)
    best, best_share = None, 0.0
    for fmt in _candidate_formats(first):
        _, share = _strptime_share(probe, fmt)
        if share > best_share:
            best, best_share = fmt, share
            if share == 1.0:  # no later format can beat it (ties keep the earlier one)
                break
    if best is not None and best_share >= 0.9:
        parsed, share = _strptime_share(vals, best)
        if parsed is not None and share >= 0.9:
            return parsed
    with warnings.catch_warnings():
        # Per-cell parsing warns that it is per-cell; that is the point of this last resort.
        warnings.simplefilter("ignore", UserWarning)
        try:
            cells = probe.to_pylist()
            if _probe_fails_early(cells):
                return None
            probed = _parse_each(cells)
            if probed.notna().mean() < 0.9:
                return None
            parsed = _parse_each(vals.to_pylist())
        except (ValueError, TypeError, OverflowError):
            return None
    if parsed.notna().mean() >= 0.9:
        return pa.array(parsed.dropna())
    return None


def _parse_each(cells: list[Any]) -> pd.Series:
    """Each cell parsed on its own (pandas' "mixed" format), NaT where it does not parse."""
    return pd.to_datetime(pd.Series(cells, dtype=object), errors="coerce", format="mixed")


_EARLY_CELLS = 8


def _probe_fails_early(cells: list[Any]) -> bool:
    """Whether the probe's first cells already miss so often that the whole probe cannot parse on 90%
    of its cells, even if every other cell parses. Cells parse independently of each other, and per-cell
    parsing costs about 0.1 ms a cell, which text that merely looks like dates (ids, codes) used to pay
    on all 50."""
    head = cells[:_EARLY_CELLS]
    if len(head) == len(cells):
        return False
    hits = int(_parse_each(head).notna().sum())
    return (hits + len(cells) - len(head)) / len(cells) < 0.9


_NUMTEXT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


def _parse_numbers(vals: pa.Array, sample: list[Any]) -> pa.Array | None:
    if not all(isinstance(v, str) and _NUMTEXT.match(v) for v in sample):
        return None
    try:
        return pc.cast(pc.utf8_trim_whitespace(vals), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _counted_top(vals: pa.Array, unique_cap: int) -> tuple[int, list[Any]]:
    """(distinct values, the ``unique_cap`` most frequent) of an array without nulls, by a hash count.
    Most frequent first; ties keep first-appearance order, so the result is deterministic."""
    vc = _VALUE_COUNTS(vals)
    counts = vc.field("counts").to_numpy()
    values = vc.field("values")
    if len(counts) == len(vals):  # all distinct: the first values in order of appearance
        return len(counts), values.slice(0, unique_cap).to_pylist()
    order = _top_order(counts, unique_cap)
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):  # numpy indexes these in place
        return len(counts), values.to_numpy()[order].tolist()
    if len(counts) <= 64:  # a few values: listing them all costs less than a take
        listed = values.to_pylist()
        return len(counts), [listed[i] for i in order.tolist()]
    return len(counts), _TAKE(values, pa.array(order)).to_pylist()


def _top_order(counts: np.ndarray, cap: int) -> np.ndarray:
    """``np.argsort(-counts, kind="stable")[:cap]`` (most frequent first, ties by position) without sorting
    every count: the ``cap``-th largest count splits them into those above it, all kept, and those equal
    to it, kept in order up to ``cap``; only the kept ones are sorted. Large columns have thousands of
    distinct values and keep ten."""
    n = len(counts)
    if n <= 4 * cap:
        return np.argsort(-counts, kind="stable")[:cap]
    threshold = np.partition(counts, n - cap)[n - cap]
    above = np.flatnonzero(counts > threshold)
    kept = np.concatenate([above, np.flatnonzero(counts == threshold)[: cap - len(above)]])
    kept.sort()
    return kept[np.argsort(-counts[kept], kind="stable")]


def _column_profile(name: str, dtype: str, description: str | None, **stats: Any) -> dict[str, Any]:
    """A ``COLUMN_PROFILE`` dict: the one layout both routes (per column and per block) fill in."""
    prof: dict[str, Any] = {
        "name": name,
        "dtype": dtype,
        "kind": "text",
        "n_null": 0,
        "n_unique": 0,
        "min": None,
        "max": None,
        "mean": None,
        "std": None,
        "unique_values": [],
        "description": description,
    }
    prof.update(stats)
    return prof


def _integer_kind(name: str, all_distinct: bool, counter: Callable[[], bool]) -> str:
    """An integer column is an id when every value differs and it is named like one or counts 1, 2, 3, ..."""
    return "id" if all_distinct and (bool(_IDNAME.search(name)) or counter()) else "integer"


def profile_column(
    arr: pa.Array, name: str, dtype: str, unique_cap: int = 10, description: str | None = None
) -> dict[str, Any]:
    """One ``COLUMN_PROFILE`` dict for a column given as an Arrow array."""
    n_null = arr.null_count
    vals = _DROP_NULL(arr) if n_null else arr
    prof = _column_profile(name, dtype, description, n_null=int(n_null))
    typ = arr.type
    if len(vals) == 0:
        prof["kind"] = "numeric" if pa.types.is_integer(typ) or pa.types.is_floating(typ) else "text"
        return prof
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        prof.update(kind="binary", n_unique=int(pc.count_distinct(vals).as_py()))
        return prof
    n_unique, top = _counted_top(vals, unique_cap)
    prof["n_unique"] = n_unique
    numbers = None
    if pa.types.is_integer(typ):
        prof["kind"] = _integer_kind(name, n_unique == len(vals), lambda: _is_counter(vals))
        numbers = vals
    elif pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        prof["kind"] = "numeric"
        numbers = vals
    elif pa.types.is_boolean(typ):
        prof["kind"] = "boolean"
        numbers = pc.cast(vals, pa.int8())
    elif pa.types.is_temporal(typ):
        prof["kind"] = "datetime"
        mm = _MIN_MAX(vals)
        prof["min"], prof["max"] = _text(mm["min"].as_py()), _text(mm["max"].as_py())
    else:
        sample = vals.slice(0, 20).to_pylist()
        if n_unique <= 2 and {str(v).strip().lower() for v in top} <= _BOOL_WORDS:
            prof["kind"] = "boolean"
        elif (nums := _parse_numbers(vals, sample)) is not None:
            # Numbers stored as text (SQLite VARCHAR columns and the like): profile them as numbers.
            integral = bool(pc.all(pc.equal(pc.floor(nums), nums)).as_py())
            prof["kind"] = "integer" if integral else "numeric"
            numbers = nums
        elif _looks_like_dates(sample) and (parsed := _parse_dates(vals, sample)) is not None:
            prof["kind"] = "datetime"
            mm = _MIN_MAX(parsed)
            prof["min"], prof["max"] = _text(mm["min"].as_py()), _text(mm["max"].as_py())
        elif n_unique <= 50 and n_unique * 2 <= len(vals):
            prof["kind"] = "categorical"
        elif n_unique == len(vals) and _short_codes(top):
            prof["kind"] = "id"
        else:
            prof["kind"] = "text"
    if numbers is not None:
        mm = _MIN_MAX(numbers)
        prof["min"], prof["max"] = _text(mm["min"].as_py()), _text(mm["max"].as_py())
        prof["mean"], prof["std"] = _moments_of(np.asarray(numbers.to_numpy(zero_copy_only=False), np.float64))
    prof["unique_values"] = [_cut(v if type(v) is str else str(_fmt(v)), 80) for v in top]
    return prof


def _width(n: int) -> int:
    """The length sums run over: ``n`` values, then zeros up to the next power of two."""
    return 1 << max(n - 1, 0).bit_length()


def _moments(rows: np.ndarray, counts: np.ndarray) -> list[tuple[float | None, float | None]]:
    """(mean, sample standard deviation) of each row, None where not finite. A row holds its ``count``
    valid values in order, then zeros up to ``_width(count)``: sums are pairwise (numpy's), and their
    digits depend on the values and that width alone, so a column gets the same digits on every route and
    in whatever batch of columns it is profiled (numpy sums a row of a block exactly as the row alone).
    ``rows`` is the caller's scratch (float64) and is overwritten: the deviations are computed in place."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        means = rows.sum(axis=1) / counts
        deviations = np.subtract(rows, means[:, None], out=rows)
        _zero_tails(deviations, counts)
        stds = np.sqrt(np.multiply(deviations, deviations, out=deviations).sum(axis=1) / (counts - 1))
    stds[counts < 2] = np.nan
    finite_means, finite_stds = np.isfinite(means), np.isfinite(stds)
    return [
        (m if fm else None, s if fs else None)
        for m, s, fm, fs in zip(means.tolist(), stds.tolist(), finite_means.tolist(), finite_stds.tolist(), strict=True)
    ]


def _zero_tails(rows: np.ndarray, counts: np.ndarray) -> None:
    """Zeros after each row's first ``count`` values (a slice per row: a mask over the block costs more
    than the arithmetic on wide blocks)."""
    for r, n in enumerate(counts.tolist()):
        rows[r, n:] = 0.0


def _moments_of(values: np.ndarray) -> tuple[float | None, float | None]:
    """``_moments`` of one column's valid values."""
    row = np.zeros((1, _width(len(values))))
    row[0, : len(values)] = values
    return _moments(row, np.array([len(values)]))[0]


# Block widths up to which a stable argsort of the rows finds their most frequent values faster than a
# hash count per column (2-4x at 100-300 values); near 1,000 the two cost the same, and past that the
# hash count's linear cost wins (3-12x at 10,000). Both give the same values.
_RUNS_MAX_WIDTH = 512


def _top_of_runs(block: np.ndarray, ordered: np.ndarray, n_valid: np.ndarray, unique_cap: int) -> list[list[Any]]:
    """The ``unique_cap`` most frequent values of each row of ``block`` (``ordered``: the rows sorted, its
    first ``n_valid`` the valid values), ties in order of first appearance: what a hash count in appearance
    order, then a stable sort by count, lists. The runs of equal values in sorted order are the distinct
    values, a run's length is its count, and a stable argsort gives its first appearance (padding sorts
    after the valid values and comes after them in the row). Rows must hold no signed zero (a sort puts
    -0.0 and 0.0 in one run)."""
    k, n = block.shape
    starts = np.empty((k, n), bool)
    starts[:, 0] = True
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=starts[:, 1:])
    starts &= np.arange(n) < n_valid[:, None]
    at = np.flatnonzero(starts)  # run starts, row by row
    row = at // n
    ends = np.empty_like(at)
    ends[:-1] = at[1:]
    last = np.ones(len(at), bool)
    last[:-1] = row[1:] != row[:-1]
    ends[last] = row[last] * n + n_valid[row[last]]
    first = np.argsort(block, axis=1, kind="stable").ravel()[at]
    # One sort key, every part below n + 1: row, then count (most first), then first appearance.
    ranked = np.argsort((row * (n + 1) + (n - (ends - at))) * (n + 1) + first)
    ranked_row = row[ranked]
    place = np.arange(len(ranked)) - np.searchsorted(ranked_row, ranked_row)
    kept = ranked[place < unique_cap]
    values = ordered.ravel()[at[kept]].tolist()
    bounds = np.searchsorted(row[kept], np.arange(k + 1)).tolist()
    return [values[bounds[j] : bounds[j + 1]] for j in range(k)]


class _NumberColumn(NamedTuple):
    values: np.ndarray  # plain numpy numbers: native-endian ints or floats of at least 32 bits
    name: str
    dtype: str
    description: str | None


def _profile_numbers(
    values: np.ndarray, name: str, dtype: str, unique_cap: int, description: str | None
) -> dict[str, Any] | None:
    """``profile_column`` for one numpy int or float column: ``_profile_number_columns`` on a batch of one."""
    return _profile_number_columns([_NumberColumn(values, name, dtype, description)], unique_cap)[0]


def _profile_number_columns(columns: list[_NumberColumn], unique_cap: int) -> list[dict[str, Any] | None]:
    """``profile_column`` for each numpy number column, with the same results, computed a block at a time:
    the columns of one dtype whose lengths round up to the same power of two (those of every table in a
    batch) are padded to the longest and profiled together. Per-call costs dominate the arithmetic on
    columns of a few hundred values, and a batch of tables holds dozens of (table, dtype) groups of a few
    columns each. A column profiles as None (use the Arrow route) when it is empty, all null, or holds a
    signed zero."""
    out: list[dict[str, Any] | None] = [None] * len(columns)
    blocks: dict[tuple[np.dtype, int], list[int]] = {}
    for i, c in enumerate(columns):
        if len(c.values):
            blocks.setdefault((c.values.dtype, _width(len(c.values))), []).append(i)
    for (dtype, _), members in blocks.items():
        lengths = np.fromiter((len(columns[i].values) for i in members), np.int64, len(members))
        # Padding sorts after every valid value: NaN for floats, the largest value for ints (a real
        # largest value ties with it, and the lengths keep it apart).
        pad = np.nan if dtype.kind == "f" else np.iinfo(dtype).max
        block = np.full((len(members), int(lengths.max())), pad, dtype)
        for r, i in enumerate(members):
            block[r, : len(columns[i].values)] = columns[i].values
        for i, prof in zip(
            members, _profile_number_block(block, lengths, [columns[i] for i in members], unique_cap), strict=True
        ):
            out[i] = prof
    return out


def _profile_number_block(
    block: np.ndarray, lengths: np.ndarray, columns: list[_NumberColumn], unique_cap: int
) -> list[dict[str, Any] | None]:
    """``profile_column`` for each row of a (columns x width) block of one numpy dtype, row ``r`` holding
    column ``r``'s ``lengths[r]`` values, then padding. The block is sorted in one call, and the null
    counts, ranges, distinct counts and counter test are read off it for every row at once. Where every
    value is distinct the top values are simply the first ones."""
    k, width = block.shape
    floating = block.dtype.kind == "f"
    ordered = np.sort(block, axis=1)  # NaN and padding sort last
    positions = np.arange(width)
    if floating:
        missing = block != block
        n_null = missing.sum(axis=1) - (width - lengths)
        # -0.0 is the one float whose bits are the sign bit alone (the lowest integer of the same width)
        bits = np.dtype(f"i{block.itemsize}")
        signed_zero = (block.view(bits) == np.iinfo(bits).min).any(axis=1)
    else:
        missing, n_null, signed_zero = None, np.zeros(k, np.int64), np.zeros(k, bool)
    n_valid = lengths - n_null
    # Distinct values: changes between neighbours of the sorted row, among its valid values.
    changes = (ordered[:, 1:] != ordered[:, :-1]) & (positions[1:] < n_valid[:, None])
    n_unique = changes.sum(axis=1) + 1
    lows = ordered[:, 0].tolist()
    highs = ordered[np.arange(k), np.maximum(n_valid - 1, 0)].tolist()
    if floating:
        counters = np.zeros(k, bool)
    else:  # 1, 2, 3, ... from the first value on; the padding passes
        steps = ((block[:, 1:] - block[:, :-1]) == 1) | (positions[1:] >= lengths[:, None])
        counters = steps.all(axis=1) & (lengths >= 3)
    usable = (n_valid > 0) & ~signed_zero
    tops: dict[int, list[Any]] = {}
    repeats = np.flatnonzero(usable & (n_unique < n_valid))
    if len(repeats) and width <= _RUNS_MAX_WIDTH:
        tops.update(
            zip(
                repeats.tolist(),
                _top_of_runs(block[repeats], ordered[repeats], n_valid[repeats], unique_cap),
                strict=True,
            )
        )
    valid_rows: dict[int, np.ndarray] = {}
    for r in np.flatnonzero(usable & (n_null > 0)).tolist():
        valid_rows[r] = block[r, : lengths[r]][~missing[r, : lengths[r]]]
    for r in repeats.tolist():
        if r not in tops:
            tops[r] = _counted_top(pa.array(valid_rows.get(r, block[r, : lengths[r]])), unique_cap)[1]
    moments = _block_moments(block, lengths, usable & (n_null == 0), valid_rows)
    out: list[dict[str, Any] | None] = []
    for r, (c, use, length, valid, distinct, nulls, counter) in enumerate(
        zip(
            columns,
            usable.tolist(),
            lengths.tolist(),
            n_valid.tolist(),
            n_unique.tolist(),
            n_null.tolist(),
            counters.tolist(),
            strict=True,
        )
    ):
        if not use:
            out.append(None)
            continue
        top = tops.get(r)
        if top is None:  # all distinct: the first values in order of appearance
            top = (valid_rows[r] if nulls else block[r, :length])[:unique_cap].tolist()
        kind = "numeric" if floating else _integer_kind(c.name, distinct == valid, lambda counter=counter: counter)
        mean, std = moments[r]
        out.append(
            _column_profile(
                c.name,
                c.dtype,
                c.description,
                kind=kind,
                n_null=nulls,
                n_unique=distinct,
                min=_text(lows[r]),
                max=_text(highs[r]),
                mean=mean,
                std=std,
                # Numbers print short and without blanks: nothing to cut.
                unique_values=[_float_text(v) for v in top] if floating else list(map(str, top)),
            )
        )
    return out


def _block_moments(
    block: np.ndarray, lengths: np.ndarray, complete: np.ndarray, valid_rows: dict[int, np.ndarray]
) -> dict[int, tuple[float | None, float | None]]:
    """``_moments`` of the block's complete rows (no nulls; every row's length has the same ``_width``),
    and of ``valid_rows`` (the valid values of the others), each laid out as ``_moments`` sums them: rows
    of the same width in one call."""
    out: dict[int, tuple[float | None, float | None]] = {}
    rows = np.flatnonzero(complete)
    if len(rows):
        # The block is as wide as its longest row; the sums run over _width of it (the same for every row).
        laid = np.empty((len(rows), _width(block.shape[1])))
        laid[:, : block.shape[1]] = block[rows]
        _zero_tails(laid, lengths[rows])
        out.update(zip(rows.tolist(), _moments(laid, lengths[rows]), strict=True))
    by_width: dict[int, list[tuple[int, np.ndarray]]] = {}
    for r, values in valid_rows.items():
        by_width.setdefault(_width(len(values)), []).append((r, values))
    for w, members in by_width.items():
        laid = np.zeros((len(members), w))
        for i, (_, values) in enumerate(members):
            laid[i, : len(values)] = values
        counts = np.fromiter((len(v) for _, v in members), np.int64, len(members))
        out.update(zip((r for r, _ in members), _moments(laid, counts), strict=True))
    return out


def _is_counter(vals: pa.Array | np.ndarray) -> bool:
    if len(vals) < 3:
        return False
    arr = vals if isinstance(vals, np.ndarray) else vals.to_numpy()
    return bool((np.diff(arr) == 1).all())


def _short_codes(top) -> bool:
    return all(isinstance(v, str) and len(v) <= 40 and " " not in v.strip() for v in top)


def describe(table_name: str, n_rows: int, profiles: list[dict[str, Any]], description: str | None) -> str:
    """The table description: given text (e.g. BIRD), else a factual summary of the profile."""
    by_kind: dict[str, list[str]] = {}
    for p in profiles:
        by_kind.setdefault(p["kind"], []).append(p["name"])
    parts = [f"Table '{table_name}': {n_rows} rows x {len(profiles)} columns."]
    if description:
        parts.append(description.strip())
    for kind in ("datetime", "numeric", "integer", "categorical", "boolean", "id", "text", "binary"):
        if by_kind.get(kind):
            names = by_kind[kind]
            shown = ", ".join(names[:12]) + (f" (+{len(names) - 12} more)" if len(names) > 12 else "")
            parts.append(f"{kind.capitalize()} columns: {shown}.")
    described = [f"{p['name']}: {p['description']}" for p in profiles if p.get("description")]
    if described:
        parts.append("Column descriptions: " + "; ".join(described))
    return " ".join(parts)


_DTYPE_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dtype) -> str:
    """``str(dtype)`` as ``DataFrame.dtypes`` shows it. numpy builds that text anew on each call, so it is
    remembered for numpy dtypes (a small fixed set; extension dtypes such as categoricals are not, since
    each set of categories is a new one)."""
    if not isinstance(dtype, np.dtype):
        return str(dtype)
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def _plain_numbers(values) -> bool:
    """Whether the numpy route profiles a column: native-endian ints and floats of at least 32 bits
    (narrower ones and everything else take the Arrow route)."""
    return (
        isinstance(values, np.ndarray)
        and values.dtype.kind in "iuf"
        and values.dtype.itemsize >= 4
        and values.dtype.isnative
    )


class TableToProfile(NamedTuple):
    table: pd.DataFrame | TableColumns  # a frame, or the arrays one would hold
    name: str = "data"
    description: str | None = None  # given text (e.g. BIRD's), put before the generated summary
    column_descriptions: dict[str, str] | None = None


def profile_table(
    df: pd.DataFrame,
    table_name: str = "data",
    description: str | None = None,
    column_descriptions: dict[str, str] | None = None,
    **options: int,
) -> dict[str, Any]:
    """Profile columns, head and ``meta_info`` (a JSON string) for one table (``profile_tables``)."""
    return profile_tables([TableToProfile(df, table_name, description, column_descriptions)], **options)[0]


def profile_tables(
    tables: list[TableToProfile],
    head_rows: int = 5,
    unique_cap: int = 10,
    unique_threshold: int = 20,
    cell_chars: int = 40,
) -> list[dict[str, Any]]:
    """Profile columns, head and ``meta_info`` (a JSON string) for each table. The number columns of all
    the tables are profiled together (``_profile_number_columns``); each profile is what the table alone
    gives."""
    frames = []
    numbers: list[_NumberColumn] = []
    placed: list[tuple[int, int]] = []  # (table, column) of each number column
    for t, table in enumerate(tables):
        held = table.table if isinstance(table.table, TableColumns) else frame_columns(table.table)
        col_desc = {str(k).casefold(): v for k, v in (table.column_descriptions or {}).items() if v}
        names, columns = held.names, held.values
        dtypes = [_dtype_name(values.dtype) for values in columns]
        descriptions = [col_desc.get(name.casefold()) for name in names]
        for j, values in enumerate(columns):
            if _plain_numbers(values):
                numbers.append(_NumberColumn(values, names[j], dtypes[j], descriptions[j]))
                placed.append((t, j))
        frames.append((held.n_rows, names, columns, dtypes, descriptions, [None] * len(columns)))
    for (t, j), prof in zip(placed, _profile_number_columns(numbers, unique_cap), strict=True):
        frames[t][5][j] = prof
    return [
        _table_profile(table, *frame, head_rows, unique_cap, unique_threshold, cell_chars)
        for table, frame in zip(tables, frames, strict=True)
    ]


def _table_profile(
    table: TableToProfile,
    n_rows: int,
    names: list[str],
    columns: list[Any],
    dtypes: list[str],
    descriptions: list[str | None],
    profiles: list[dict[str, Any] | None],
    head_rows: int,
    unique_cap: int,
    unique_threshold: int,
    cell_chars: int,
) -> dict[str, Any]:
    """One table's profile, its number columns already profiled (``None`` where the Arrow route must)."""
    n_cols = len(columns)
    heads = []
    strings: dict[int, pa.Array] = {}  # the text columns and the number columns, for what rows and cells mean
    numbers: dict[int, np.ndarray] = {}
    for j in range(n_cols):
        values = columns[j]
        if profiles[j] is not None:
            heads.append(_number_cells(values[:head_rows].tolist()))  # NaN shows empty, like Arrow's null
            numbers[j] = values
            continue
        arr = _arrow(values)
        if arr is None:
            arr = _text_array(values)
        profiles[j] = profile_column(arr, names[j], dtypes[j], unique_cap, descriptions[j])
        heads.append(_cells(arr.slice(0, head_rows).to_pylist(), cell_chars))
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            strings[j] = arr
        elif pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_decimal(arr.type):
            numbers[j] = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
    head = _head_table(names, heads, min(head_rows, n_rows), cell_chars)
    desc = describe(table.name, n_rows, profiles, table.description)
    meta = {
        "description": desc,
        "head": head,
        "columns": names,
        "type": {p["name"]: p["kind"] for p in profiles},
        "range": {
            p["name"]: [_num(p["min"]), _num(p["max"])]
            for p in profiles
            if p["kind"] in ("numeric", "integer", "datetime", "id") and p["min"] is not None
        },
        "unique": {
            p["name"]: p["unique_values"]
            for p in profiles
            if p["unique_values"]
            and (p["kind"] in ("categorical", "boolean") or (p["kind"] != "id" and p["n_unique"] <= unique_threshold))
        },
        "row_count": int(n_rows),
        "column_count": int(n_cols),
    }
    # what rows and cells mean (``semantics``): present only where found
    aggregates = semantics.aggregate_rows(names, profiles, strings, numbers, int(n_rows))
    if aggregates:
        meta["aggregate_rows"] = aggregates
    missing = {names[j]: found for j, arr in strings.items() if (found := semantics.disguised_missing(arr))}
    if missing:
        meta["disguised_missing"] = missing
    return {
        "n_rows": int(n_rows),
        "n_cols": int(n_cols),
        "columns": names,
        "column_profiles": profiles,
        "head_markdown": head,
        "description": desc,
        "meta_info": json.dumps(meta, ensure_ascii=False, separators=(",", ":")),
    }


def _num(v: str | None) -> Any:
    """Range bounds back to numbers where they are numbers (they are stored as text in column_profiles)."""
    if v is None:
        return None
    try:
        f = float(v)
    except ValueError:
        return v
    return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f
