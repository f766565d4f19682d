"""Profile one table: column kinds and statistics, a head sample and the ``meta_info`` JSON for prompts.

``meta_info`` keys (what the synthesis prompt template reads):

* ``description``: the table's description (BIRD column descriptions when present, else a summary
  generated from the profile: size and which columns are numeric, categorical, temporal);
* ``head``: the first rows as a markdown table, cells cut to ``cell_chars``;
* ``columns``: column names in order; ``type``: {column: kind};
* ``range``: {column: [min, max]} for numeric, integer and datetime columns;
* ``unique``: {column: most frequent values} for categorical and boolean columns and any column with at
  most ``unique_threshold`` distinct values, capped at ``unique_cap`` values;
* ``row_count``, ``column_count``.

Kinds: ``integer``, ``numeric`` (floats), ``boolean``, ``datetime`` (native, or text that parses as
dates in >= 90% of cells), ``id`` (all distinct: integer keys named like ids or counting 1..n, short text
codes), ``categorical`` (at most 50 distinct values and at most half as many as non-null cells), ``text``,
and ``binary`` (SQLite blobs). Every statistic is computed on the DataFrame exactly as ``load_table`` returns it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pandas.tseries.api import guess_datetime_format

from datamind.ingest.loaders import column_values

_DATEISH = re.compile(
    r"^\s*(\d{4}[-/.]\d{1,2}([-/.]\d{1,2})?|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}|"
    r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d{1,2},?\s+\d{2,4}|"
    r"\d{1,2}\s+(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?,?\s+\d{2,4})",
    re.IGNORECASE,
)
_IDNAME = re.compile(r"(^|[_\s])(id|key|code|no|nr|num)$|id$|^index$|^unnamed: 0$", re.IGNORECASE)
_BOOL_WORDS = {"true", "false", "yes", "no", "y", "n", "t", "f"}


def _kernel(name: str, options: pc.FunctionOptions | None = None):
    """A compute function bound to fixed options and called directly. ``pyarrow.compute``'s wrappers build
    an options object and check their arguments on every call, which costs as much as the kernel itself
    on columns of a few hundred values (a table's profile makes several such calls per column)."""
    fn = pc.get_function(name)
    return lambda *args: fn.call(args, options)


_MEAN = _kernel("mean")
_SAMPLE_STDDEV = _kernel("stddev", pc.VarianceOptions(ddof=1))
_MIN_MAX = _kernel("min_max")
_VALUE_COUNTS = _kernel("value_counts")
_DROP_NULL = _kernel("drop_null")
_TAKE = _kernel("take", pc.TakeOptions(boundscheck=False))  # indices come from an argsort of the same values


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


def _text(v: Any) -> str | None:
    v = _fmt(v)
    return None if v is None else str(v)


def _cut(s: str, n: int) -> str:
    if len(s) <= n and " " not in s and s.isprintable():  # no whitespace at all: nothing to collapse
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
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
        return None
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _text_array(values) -> pa.Array:
    """Mixed python objects: profile their text form, which is what a reader of the table sees."""
    return pa.array([None if _fmt(v) is None else str(_fmt(v)) for v in values], pa.string())


def _column_arrays(df: pd.DataFrame) -> list[pa.Array]:
    out = []
    for j in range(df.shape[1]):
        values = column_values(df, j)
        arr = _arrow(values)
        out.append(_text_array(values) if arr is None else arr)
    return out


def head_markdown(df: pd.DataFrame, n: int = 5, cell_chars: int = 40, arrays: list[pa.Array] | None = None) -> str:
    arrays = arrays if arrays is not None else _column_arrays(df)
    heads = [a.slice(0, n).to_pylist() for a in arrays]
    return _head_table([str(c) for c in df.columns], heads, min(n, len(df)), cell_chars)


def _head_table(names: list[str], heads: list[list[Any]], n: int, cell_chars: int) -> str:
    cols = [_cut(c, cell_chars).replace("|", "\\|") for c in names]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for i in range(n):
        cells = []
        for h in heads:
            t = _fmt(h[i])
            cells.append("" if t is None else _cut(str(t), cell_chars).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _looks_like_dates(sample: list[Any]) -> bool:
    hits = sum(1 for v in sample if isinstance(v, str) and _DATEISH.match(v))
    return hits >= max(1, math.ceil(0.8 * len(sample)))


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
            fmt = "mixed"
            probed = pd.to_datetime(pd.Series(probe.to_pylist(), dtype=object), errors="coerce", format=fmt)
            if probed.notna().mean() < 0.9:
                return None
            parsed = pd.to_datetime(pd.Series(vals.to_pylist(), dtype=object), errors="coerce", format=fmt)
        except (ValueError, TypeError, OverflowError):
            return None
    if parsed.notna().mean() >= 0.9:
        return pa.array(parsed.dropna())
    return None


_NUMTEXT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


def _parse_numbers(vals: pa.Array, sample: list[Any]) -> pa.Array | None:
    if not all(isinstance(v, str) and _NUMTEXT.match(v) for v in sample):
        return None
    try:
        return pc.cast(pc.utf8_trim_whitespace(vals), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def profile_column(
    arr: pa.Array, name: str, dtype: str, unique_cap: int = 10, description: str | None = None
) -> dict[str, Any]:
    """One ``COLUMN_PROFILE`` dict for a column given as an Arrow array."""
    n_null = arr.null_count
    vals = _DROP_NULL(arr) if n_null else arr
    prof: dict[str, Any] = {
        "name": name,
        "dtype": dtype,
        "kind": "text",
        "n_null": int(n_null),
        "n_unique": 0,
        "min": None,
        "max": None,
        "mean": None,
        "std": None,
        "unique_values": [],
        "description": description,
    }
    typ = arr.type
    if len(vals) == 0:
        prof["kind"] = "numeric" if pa.types.is_integer(typ) or pa.types.is_floating(typ) else "text"
        return prof
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        prof.update(kind="binary", n_unique=int(pc.count_distinct(vals).as_py()))
        return prof
    vc = _VALUE_COUNTS(vals)
    counts = vc.field("counts").to_numpy()
    n_unique = len(counts)
    prof["n_unique"] = int(n_unique)
    # Most frequent first; ties keep first-appearance order, so the result is deterministic.
    values = vc.field("values")
    if counts.max() == 1:  # all distinct: the first values in order of appearance
        top = values.slice(0, unique_cap).to_pylist()
    else:
        top = _TAKE(values, pa.array(np.argsort(-counts, kind="stable")[:unique_cap])).to_pylist()
    numbers = None
    if pa.types.is_integer(typ):
        ids = n_unique == len(vals) and (bool(_IDNAME.search(name)) or _is_counter(vals))
        prof["kind"] = "id" if ids else "integer"
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
        prof["mean"], prof["std"] = _moments(numbers)
    prof["unique_values"] = [_cut(str(_fmt(v)), 80) for v in top]
    return prof


def _moments(numbers: pa.Array) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (None where not finite), by Arrow's kernels on every route, so
    every digit is the same whichever route profiled the column (summation order matters)."""
    mean = _MEAN(numbers).as_py()
    std = _SAMPLE_STDDEV(numbers).as_py() if len(numbers) > 1 else None
    return (
        float(mean) if mean is not None and math.isfinite(mean) else None,
        float(std) if std is not None and math.isfinite(std) else None,
    )


def _profile_numbers(
    values: np.ndarray, name: str, dtype: str, unique_cap: int, description: str | None
) -> dict[str, Any] | None:
    """``profile_column`` for one numpy int or float column: ``_profile_number_block`` on a block of one."""
    return _profile_number_block(values[None, :], [name], dtype, unique_cap, [description])[0]


def _profile_number_block(
    block: np.ndarray, names: list[str], dtype: str, unique_cap: int, descriptions: list[str | None]
) -> list[dict[str, Any] | None]:
    """``profile_column`` for each row of a (columns x rows) block of numpy numbers of one dtype, with the
    same results. A table's columns of one dtype are sorted in one call, and the null counts, ranges,
    distinct counts and counter test are read off the sorted block for all of them at once (per-column
    calls cost more than the arithmetic on tables of hundreds of rows). Where every value is distinct the
    top values are simply the first ones and the hash table (~40 ns per distinct value) is skipped. A
    column profiles as None (use the Arrow route) when it is all null or holds a signed zero, which Arrow's
    hashing keeps apart from zero and a sort does not."""
    k, n = block.shape
    if n == 0:
        return [None] * k
    floating = block.dtype.kind == "f"
    ordered = np.sort(block, axis=1)  # NaN sorts last
    if floating:
        missing = np.isnan(block)
        n_null = np.count_nonzero(missing, axis=1)
        negative_zero = np.any((block == 0) & np.signbit(block), axis=1)
    else:
        missing, n_null, negative_zero = None, np.zeros(k, np.intp), np.zeros(k, bool)
    n_valid = n - n_null
    # Distinct values: changes between neighbours of the sorted row, counted only among the valid prefix.
    changes = ordered[:, 1:] != ordered[:, :-1]
    if floating:
        changes &= np.arange(1, n) < n_valid[:, None]
    n_unique = np.count_nonzero(changes, axis=1) + 1
    lows = ordered[:, 0].tolist()
    highs = ordered[np.arange(k), np.maximum(n_valid - 1, 0)].tolist()
    counters = (n >= 3) & np.all(np.diff(block, axis=1) == 1, axis=1) if not floating else np.zeros(k, bool)
    out: list[dict[str, Any] | None] = []
    for j in range(k):
        valid = int(n_valid[j])
        if valid == 0 or negative_zero[j]:
            out.append(None)
            continue
        vals = block[j][~missing[j]] if n_null[j] else block[j]
        distinct = int(n_unique[j])
        numbers = pa.array(vals)
        if distinct == valid:  # all distinct: the first values in order of appearance, as value_counts lists them
            top = vals[:unique_cap].tolist()
        else:  # most frequent first; ties keep first-appearance order
            vc = _VALUE_COUNTS(numbers)
            counts = vc.field("counts").to_numpy()
            top = vc.field("values").to_numpy()[np.argsort(-counts, kind="stable")[:unique_cap]].tolist()
        kind = "numeric"
        if not floating:
            ids = distinct == valid and (bool(_IDNAME.search(names[j])) or bool(counters[j]))
            kind = "id" if ids else "integer"
        mean, std = _moments(numbers)
        out.append(
            {
                "name": names[j],
                "dtype": dtype,
                "kind": kind,
                "n_null": int(n_null[j]),
                "n_unique": distinct,
                "min": _text(lows[j]),
                "max": _text(highs[j]),
                "mean": mean,
                "std": std,
                # Numbers print short and without blanks: nothing to cut.
                "unique_values": [str(_fmt(v)) for v in top] if floating else list(map(str, top)),
                "description": descriptions[j],
            }
        )
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


def _number_groups(columns: list[Any]) -> dict[np.dtype, list[int]]:
    """Positions of the columns the numpy route profiles, by dtype (native-endian ints and floats of at
    least 32 bits; narrower ones and everything else take the Arrow route)."""
    groups: dict[np.dtype, list[int]] = {}
    for j, values in enumerate(columns):
        if (
            isinstance(values, np.ndarray)
            and values.dtype.kind in "iuf"
            and values.dtype.itemsize >= 4
            and values.dtype.isnative
        ):
            groups.setdefault(values.dtype, []).append(j)
    return groups


def profile_table(
    df: pd.DataFrame,
    table_name: str = "data",
    description: str | None = None,
    column_descriptions: dict[str, str] | None = None,
    head_rows: int = 5,
    unique_cap: int = 10,
    unique_threshold: int = 20,
    cell_chars: int = 40,
) -> dict[str, Any]:
    """Profile columns, head and ``meta_info`` (a JSON string) for one table."""
    n_rows, n_cols = df.shape
    col_desc = {str(k).casefold(): v for k, v in (column_descriptions or {}).items() if v}
    names = [str(c) for c in df.columns]
    columns = [column_values(df, j) for j in range(n_cols)]
    dtypes = [_dtype_name(values.dtype) for values in columns]
    descriptions = [col_desc.get(name.casefold()) for name in names]
    profiles: list[dict[str, Any] | None] = [None] * n_cols
    for positions in _number_groups(columns).values():
        # Plain numpy numbers (most columns), a dtype's columns at a time: one sort where a hash table per
        # column gives the same.
        block = np.stack([columns[j] for j in positions])
        dtype = dtypes[positions[0]]
        found = _profile_number_block(
            block, [names[j] for j in positions], dtype, unique_cap, [descriptions[j] for j in positions]
        )
        for j, prof in zip(positions, found):
            profiles[j] = prof
    heads = []
    for j in range(n_cols):
        values = columns[j]
        if profiles[j] is not None:
            heads.append(values[:head_rows].tolist())  # NaN formats as empty, like Arrow's null
            continue
        arr = _arrow(values)
        if arr is None:
            arr = _text_array(values)
        profiles[j] = profile_column(arr, names[j], dtypes[j], unique_cap, descriptions[j])
        heads.append(arr.slice(0, head_rows).to_pylist())
    head = _head_table(names, heads, min(head_rows, n_rows), cell_chars)
    desc = describe(table_name, n_rows, profiles, description)
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
