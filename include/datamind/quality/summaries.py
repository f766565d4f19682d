"""The numbers a data engineer reads in a task log, computed by pure functions (no Great Expectations).

Definitions (the paper's self-consistency filter with reflection rescue, section 3.2):
- a *judged* query had trajectories sampled and checked for consistency;
- it passes at the *first pass* when a kept trajectory comes from reflection round 0;
- it is *rescued* when its kept trajectories all come from reflection rounds >= 1;
- ``consistency_rate = first_pass / judged``;
- ``rescue_yield = rescued / (judged - first_pass)``: the share of initially inconsistent queries that the
  reflection loop salvaged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from datamind.categories import CATEGORY_IDS
from datamind.quality.semantic import is_missing

MIN_HOP, MAX_HOP = 1, 5
NULL_LABEL = "(null)"


def _label(value) -> str:
    if is_missing(value):
        return NULL_LABEL
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def distribution(values: Iterable, order: Iterable | None = None) -> dict[str, int]:
    """Counts per value as ``{label: n}``: ``order``'s values first (zeros kept), then the rest by count."""
    counts = Counter(_label(v) for v in values)
    out: dict[str, int] = {}
    for key in order or ():
        out[_label(key)] = counts.pop(_label(key), 0)
    for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        out[key] = n
    return out


def category_distribution(df: pd.DataFrame) -> dict[str, int]:
    """All 18 categories in the paper's order (empty ones show 0), then any unknown values."""
    return distribution(df["category"] if "category" in df else [], CATEGORY_IDS)


def hop_distribution(df: pd.DataFrame) -> dict[str, int]:
    return distribution(df["hop"] if "hop" in df else [], range(MIN_HOP, MAX_HOP + 1))


@dataclass(frozen=True)
class ConsistencyStats:
    n_judged: int
    n_first_pass: int
    n_rescued: int
    n_failed: int
    consistency_rate: float | None
    rescue_yield: float | None
    pass_rate: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def consistency_stats(judged_query_ids: Iterable[str], kept: pd.DataFrame) -> ConsistencyStats:
    """Consistency and rescue figures from the judged query ids and the kept rows (query_id, reflection_round).

    A kept row whose query is missing from ``judged_query_ids`` still counts as judged (it got through the
    judge); a null reflection_round is read as round 0.
    """
    first_round: dict[str, int] = {}
    if len(kept):
        rounds = kept["reflection_round"] if "reflection_round" in kept else pd.Series(0, index=kept.index)
        for qid, rnd in zip(kept["query_id"].tolist(), rounds.tolist(), strict=True):
            r = 0 if is_missing(rnd) else int(rnd)
            first_round[qid] = min(r, first_round.get(qid, r))
    judged = {q for q in judged_query_ids if not is_missing(q)} | set(first_round)
    first_pass = sum(1 for r in first_round.values() if r == 0)
    rescued = len(first_round) - first_pass
    failed = len(judged) - len(first_round)
    return ConsistencyStats(
        n_judged=len(judged),
        n_first_pass=first_pass,
        n_rescued=rescued,
        n_failed=failed,
        consistency_rate=_ratio(first_pass, len(judged)),
        rescue_yield=_ratio(rescued, len(judged) - first_pass),
        pass_rate=_ratio(first_pass + rescued, len(judged)),
    )


def drop_reasons(rejections: pd.DataFrame, stage: str | None = None) -> list[dict]:
    """``[{stage, reason_code, count}]`` most frequent first, optionally for one stage only."""
    if not len(rejections):
        return []
    df = rejections if stage is None else _where(rejections, "stage", stage)
    counts = Counter(zip(map(_label, df["stage"].tolist()), map(_label, df["reason_code"].tolist()), strict=True))
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [{"stage": s, "reason_code": r, "count": n} for (s, r), n in ordered]


def file_rejection_reasons(catalog_files: pd.DataFrame) -> list[dict]:
    """Ingestion keeps rejected files in the catalog itself, so its drop reasons come from there."""
    rejected = _where(catalog_files, "status", "rejected")
    counts = Counter(map(_label, rejected["reason_code"].tolist()))
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [{"stage": "ingest", "reason_code": r, "count": n} for r, n in ordered]


_EXAMPLES_PER_REASON = 3
_EXAMPLE_CHARS = 240


def drop_examples(df: pd.DataFrame, item_column: str) -> dict[str, list[dict]]:
    """A few rejected items per reason code (``{code: [{item, reason}]}``), for a person to look at."""
    out: dict[str, list[dict]] = {}
    if not len(df) or "reason_code" not in df:
        return out
    reasons = df["reason"].tolist() if "reason" in df else [None] * len(df)
    items = df[item_column].tolist() if item_column in df else [None] * len(df)
    for code, item, reason in zip(df["reason_code"].tolist(), items, reasons, strict=True):
        bucket = out.setdefault(_label(code), [])
        if len(bucket) < _EXAMPLES_PER_REASON:
            bucket.append({"item": _label(item), "reason": _label(reason)[:_EXAMPLE_CHARS]})
    return out


def category_by_hop(df: pd.DataFrame) -> dict[str, dict[str, int]]:
    """``{category: {hop: n}}`` over the 18 categories (rows with none left out) and hops 1-5."""
    if not {"category", "hop"} <= set(df.columns):
        return {}
    counts = Counter(zip(map(_label, df["category"].tolist()), map(_label, df["hop"].tolist()), strict=True))
    hops = [str(h) for h in range(MIN_HOP, MAX_HOP + 1)]
    cats = list(CATEGORY_IDS) + sorted({c for c, _ in counts} - set(CATEGORY_IDS))
    return {c: {h: counts.get((c, h), 0) for h in hops} for c in cats if any(counts.get((c, h)) for h in hops)}


_MAX_HISTOGRAMS = 6
_BINS = 10


def column_histograms(df: pd.DataFrame) -> dict[str, dict]:
    """Per numeric column (ids and flags left out): ``{"edges": [...], "counts": [...], "nulls": n}``."""
    out: dict[str, dict] = {}
    for col in df.columns:
        if len(out) >= _MAX_HISTOGRAMS or str(col).endswith("_id") or df[col].dtype == bool:
            continue
        values = pd.to_numeric(df[col], errors="coerce") if pd.api.types.is_numeric_dtype(df[col]) else None
        if values is None:
            continue
        present = values.dropna().to_numpy(dtype=float)
        if len(present) < 2 or np.unique(present).size < 2:
            continue
        counts, edges = np.histogram(present, bins=_BINS)
        out[str(col)] = {
            "edges": [round(float(e), 4) for e in edges],
            "counts": [int(c) for c in counts],
            "nulls": int(values.isna().sum()),
        }
    return out


def _where(df: pd.DataFrame, column: str, value: str) -> pd.DataFrame:
    # Compare value by value: a nullable-string comparison yields NA for nulls, which cannot mask a frame.
    mask = np.array([not is_missing(v) and v == value for v in df[column].tolist()], dtype=bool)
    return df.loc[mask]


def _n_unique(df: pd.DataFrame, column: str) -> int:
    return int(df[column].dropna().nunique()) if column in df else 0


def _sum(df: pd.DataFrame, column: str) -> int:
    return int(pd.to_numeric(df[column], errors="coerce").fillna(0).sum()) if column in df else 0


def summarize(table_name: str, df: pd.DataFrame, related: Mapping[str, pd.DataFrame] | None = None) -> dict:
    """Summary numbers for one table. ``related`` may add context from other tables:
    ``trajectories`` (what the judge saw, for consistency and rescue on ``dataset``) and ``rejections``
    (drop reasons)."""
    related = related or {}
    s: dict = {"table": table_name, "n_rows": int(len(df))}
    if table_name == "catalog_files":
        s["by_status"] = distribution(df.get("status", []), ("accepted", "rejected"))
        s["by_format"] = distribution(df.get("format", []))
        accepted = _where(df, "status", "accepted") if "status" in df else df.iloc[0:0]
        s["accepted_tables"] = _sum(accepted, "n_tables")
        s["accepted_rows"] = _sum(accepted, "n_rows")
        s["drop_reasons"] = file_rejection_reasons(df) if {"status", "reason_code"} <= set(df.columns) else []
        if "status" in df:
            s["drop_examples"] = drop_examples(_where(df, "status", "rejected"), "rel_path")
    elif table_name == "catalog_tables":
        s["n_files"] = _n_unique(df, "file_id")
        s["by_format"] = distribution(df.get("format", []))
        s["total_rows"] = _sum(df, "n_rows")
    elif table_name == "queries":
        s["n_files"] = _n_unique(df, "file_id")
        s["by_category"] = category_distribution(df)
        s["by_hop"] = hop_distribution(df)
        s["category_by_hop"] = category_by_hop(df)
        s["by_backend"] = distribution(df.get("backend", []))
    elif table_name == "trajectories":
        s["n_queries"] = _n_unique(df, "query_id")
        s["by_status"] = distribution(df.get("status", []), ("answered", "max_turns", "error"))
        s["by_reflection_round"] = distribution(df.get("reflection_round", []))
        turns, void = _sum(df, "n_turns"), _sum(df, "n_void_turns")
        s["n_turns"], s["n_void_turns"] = turns, void
        s["void_turn_rate"] = _ratio(void, turns)
    elif table_name == "dataset":
        s["n_queries"] = _n_unique(df, "query_id")
        s["n_files"] = _n_unique(df, "file_id")
        s["by_category"] = category_distribution(df)
        s["by_hop"] = hop_distribution(df)
        s["category_by_hop"] = category_by_hop(df)
        s["by_data_format"] = distribution(df.get("data_format", []))
        s["by_model"] = distribution(df.get("model", []))  # who wrote the trajectories
        s["by_question_model"] = distribution(df.get("question_model", []))  # who wrote the questions
        if "trajectories" in related:
            judged = related["trajectories"]["query_id"].tolist()
            s["consistency"] = consistency_stats(judged, df).as_dict()
    elif table_name == "eval_results":
        s["by_suite"] = {
            suite: {
                "trials": int(len(part)),
                "questions": _n_unique(part, "item_id"),
                "correct_share": _ratio(int(part["correct"].sum()), int(len(part))),
                "outcomes": distribution(part.get("outcome", [])),
            }
            for suite, part in (df.groupby("suite") if "suite" in df else [])
        }
    elif table_name == "rejections":
        s["by_stage"] = distribution(df.get("stage", []))
        s["drop_reasons"] = drop_reasons(df)
        s["drop_examples"] = drop_examples(df, "item_id")
    if "rejections" in related and table_name != "rejections":
        s["drop_reasons"] = s.get("drop_reasons", []) + drop_reasons(related["rejections"])
        s.setdefault("drop_examples", {}).update(drop_examples(related["rejections"], "item_id"))
    s["column_histograms"] = column_histograms(df)
    return s


# -- log text ---------------------------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _dist_line(dist: Mapping[str, int], limit: int = 24) -> str:
    """``a=3, b=1`` for the values present, then the declared values with no rows (coverage gaps)."""
    present = [f"{k}={v}" for k, v in dist.items() if v][:limit]
    more = sum(1 for v in dist.values() if v) - len(present)
    text = ", ".join(present) + (f", ... (+{more} more)" if more > 0 else "") if present else "(none)"
    empty = [k for k, v in dist.items() if not v]
    if empty:
        text += f"; no rows for {len(empty)}: {', '.join(empty)}"
    return text


def format_summary(summary: Mapping) -> list[str]:
    """Log lines for a summary, in a stable order."""
    lines = [f"rows: {summary['n_rows']}"]
    for key in ("n_files", "n_queries", "accepted_tables", "accepted_rows", "total_rows"):
        if key in summary:
            lines.append(f"{key.removeprefix('n_')}: {summary[key]}")
    for key, label in (
        ("by_status", "status"),
        ("by_format", "format"),
        ("by_backend", "backend"),
        ("by_data_format", "data format"),
        ("by_model", "written by"),
        ("by_question_model", "question by"),
        ("by_stage", "stage"),
        ("by_reflection_round", "reflection round"),
        ("by_category", "category"),
        ("by_hop", "hop"),
    ):
        if key in summary:
            lines.append(f"{label}: {_dist_line(summary[key])}")
    if "void_turn_rate" in summary:
        lines.append(f"void turns: {summary['n_void_turns']}/{summary['n_turns']} ({_pct(summary['void_turn_rate'])})")
    if "consistency" in summary:
        c = summary["consistency"]
        lines.append(
            f"consistency rate: {_pct(c['consistency_rate'])} ({c['n_first_pass']}/{c['n_judged']} judged queries "
            f"consistent at first pass); rescue yield: {_pct(c['rescue_yield'])} ({c['n_rescued']} rescued, "
            f"{c['n_failed']} failed)"
        )
    if "drop_reasons" in summary:
        reasons = summary["drop_reasons"]
        lines.append(
            "drop reasons: "
            + (", ".join(f"{r['stage']}/{r['reason_code']}={r['count']}" for r in reasons) if reasons else "(none)")
        )
    return lines
