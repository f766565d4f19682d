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
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _arrow(values) -> pa.Array | None:
    """The column as an Arrow array (NaN -> null), or None when Arrow cannot hold it (mixed objects)."""
    try:
        arr = pa.array(values, from_pandas=True) if isinstance(values, np.ndarray) else pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
        return None
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _column_arrays(df: pd.DataFrame) -> list[pa.Array]:
    out = []
    for j in range(df.shape[1]):
        values = column_values(df, j)
        arr = _arrow(values)
        if arr is None:
            # Mixed python objects: profile their text form, which is what a reader of the table sees.
            arr = pa.array([None if _fmt(v) is None else str(_fmt(v)) for v in values], pa.string())
        out.append(arr)
    return out


def head_markdown(df: pd.DataFrame, n: int = 5, cell_chars: int = 40, arrays: list[pa.Array] | None = None) -> str:
    arrays = arrays if arrays is not None else _column_arrays(df)
    cols = [_cut(str(c), cell_chars).replace("|", "\\|") for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    heads = [a.slice(0, n).to_pylist() for a in arrays]
    for i in range(min(n, len(df))):
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
_COMMON_FORMATS = ["%b %d %Y %I:%M:%S %p", "%b %d %Y %H:%M:%S", "%m/%d/%Y %I:%M:%S %p", "%d %b %Y", "%b %d, %Y",
                   "%Y.%m.%d %H:%M:%S", "%d.%m.%Y %H:%M"]


def _strptime_share(vals: pa.Array, fmt: str) -> tuple[pa.Array | None, float]:
    try:
        parsed = pc.strptime(vals, format=fmt, unit="us", error_is_null=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None, 0.0
    return parsed, 1.0 - parsed.null_count / max(1, len(vals))


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
    vals = pc.utf8_trim_whitespace(pc.replace_substring_regex(vals, r"\s+", " "))
    first = vals[0].as_py()
    probe = vals.slice(0, 50)
    formats = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for dayfirst in (False, True):  # 03.04.2023 is ambiguous: let the sample decide
            fmt = guess_datetime_format(first, dayfirst=dayfirst)
            if fmt and fmt not in formats:
                formats.append(fmt)
    best, best_share = None, 0.0
    formats += [f for f in _COMMON_FORMATS if f not in formats]
    for fmt in formats:
        _, share = _strptime_share(probe, fmt)
        if share > best_share:
            best, best_share = fmt, share
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


def profile_column(arr: pa.Array, name: str, dtype: str, unique_cap: int = 10,
                   description: str | None = None) -> dict[str, Any]:
    """One ``COLUMN_PROFILE`` dict for a column given as an Arrow array."""
    n_null = arr.null_count
    vals = pc.drop_null(arr) if n_null else arr
    prof: dict[str, Any] = {"name": name, "dtype": dtype, "kind": "text", "n_null": int(n_null), "n_unique": 0,
                            "min": None, "max": None, "mean": None, "std": None, "unique_values": [],
                            "description": description}
    typ = arr.type
    if len(vals) == 0:
        prof["kind"] = "numeric" if pa.types.is_integer(typ) or pa.types.is_floating(typ) else "text"
        return prof
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        prof.update(kind="binary", n_unique=int(pc.count_distinct(vals).as_py()))
        return prof
    vc = pc.value_counts(vals)
    counts = vc.field("counts").to_numpy()
    n_unique = len(counts)
    prof["n_unique"] = int(n_unique)
    # Most frequent first; ties keep first-appearance order, so the result is deterministic.
    values = vc.field("values")
    if counts.max() == 1:  # all distinct: the first values in order of appearance
        top = values.slice(0, unique_cap).to_pylist()
    else:
        top = [values[int(i)].as_py() for i in np.argsort(-counts, kind="stable")[:unique_cap]]
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
        mm = pc.min_max(vals)
        prof["min"], prof["max"] = _text(mm["min"].as_py()), _text(mm["max"].as_py())
    else:
        sample = vals.slice(0, 20).to_pylist()
        words = {str(v).strip().lower() for v in top}
        if n_unique <= 2 and words <= _BOOL_WORDS:
            prof["kind"] = "boolean"
        elif (nums := _parse_numbers(vals, sample)) is not None:
            # Numbers stored as text (SQLite VARCHAR columns and the like): profile them as numbers.
            integral = bool(pc.all(pc.equal(pc.floor(nums), nums)).as_py())
            prof["kind"] = "integer" if integral else "numeric"
            numbers = nums
        elif _looks_like_dates(sample) and (parsed := _parse_dates(vals, sample)) is not None:
            prof["kind"] = "datetime"
            mm = pc.min_max(parsed)
            prof["min"], prof["max"] = _text(mm["min"].as_py()), _text(mm["max"].as_py())
        elif n_unique <= 50 and n_unique * 2 <= len(vals):
            prof["kind"] = "categorical"
        elif n_unique == len(vals) and _short_codes(top):
            prof["kind"] = "id"
        else:
            prof["kind"] = "text"
    if numbers is not None:
        mm = pc.min_max(numbers)
        prof["min"], prof["max"] = _text(mm["min"].as_py()), _text(mm["max"].as_py())
        mean = pc.mean(numbers).as_py()
        std = pc.stddev(numbers, ddof=1).as_py() if len(numbers) > 1 else None
        prof["mean"] = float(mean) if mean is not None and math.isfinite(mean) else None
        prof["std"] = float(std) if std is not None and math.isfinite(std) else None
    prof["unique_values"] = [_cut(str(_fmt(v)), 80) for v in top]
    return prof


def _is_counter(vals: pa.Array) -> bool:
    if len(vals) < 3:
        return False
    arr = vals.to_numpy()
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


def profile_table(df: pd.DataFrame, table_name: str = "data", description: str | None = None,
                  column_descriptions: dict[str, str] | None = None, head_rows: int = 5, unique_cap: int = 10,
                  unique_threshold: int = 20, cell_chars: int = 40) -> dict[str, Any]:
    """Profile columns, head and ``meta_info`` (a JSON string) for one table."""
    n_rows, n_cols = df.shape
    col_desc = {str(k).casefold(): v for k, v in (column_descriptions or {}).items() if v}
    names = [str(c) for c in df.columns]
    arrays = _column_arrays(df)
    dtypes = [str(d) for d in df.dtypes.tolist()]
    profiles = [
        profile_column(arrays[j], names[j], dtypes[j], unique_cap, col_desc.get(names[j].casefold()))
        for j in range(n_cols)
    ]
    head = head_markdown(df, head_rows, cell_chars, arrays)
    desc = describe(table_name, n_rows, profiles, description)
    meta = {
        "description": desc,
        "head": head,
        "columns": names,
        "type": {p["name"]: p["kind"] for p in profiles},
        "range": {p["name"]: [_num(p["min"]), _num(p["max"])] for p in profiles
                  if p["kind"] in ("numeric", "integer", "datetime", "id") and p["min"] is not None},
        "unique": {p["name"]: p["unique_values"] for p in profiles
                   if p["unique_values"] and (p["kind"] in ("categorical", "boolean")
                                              or (p["kind"] != "id" and p["n_unique"] <= unique_threshold))},
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
