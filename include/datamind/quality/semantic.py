"""Row-level semantic checks that plain column expectations cannot state (cross-column and nested rules).

Each check is a pure pandas function: it returns one entry per row, ``None`` where the row is fine and a
short problem text (naming the row's id) where it is not. The validator stores the result as a derived
column ``dq__<check>`` and lets Great Expectations assert it holds only ``"ok"``, so semantic failures show
up in the same validation result and Data Docs as every other expectation, with the problem texts as the
unexpected values. Kept free of Great Expectations so the rules are unit-testable in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

OK = "ok"


@dataclass(frozen=True)
class RowCheck:
    name: str
    why: str
    needs: tuple[str, ...]
    problems: Callable[[pd.DataFrame, str], list[str | None]]

    @property
    def column(self) -> str:
        return f"dq__{self.name}"

    def evaluate(self, df: pd.DataFrame, id_column: str) -> pd.Series:
        """``"ok"`` per passing row, the problem text per failing row."""
        missing = [c for c in self.needs if c not in df.columns]
        if missing:
            values: list[str | None] = [f"column(s) {', '.join(missing)} missing"] * len(df)
        else:
            values = self.problems(df, id_column)
        return pd.Series([OK if v is None else v for v in values], index=df.index, dtype=object)


# -- value helpers (Arrow -> pandas gives numpy arrays for lists, pandas NA/NaN/None for nulls) ------------
def is_missing(value) -> bool:
    if value is None:
        return True
    if isinstance(value, (list, tuple, np.ndarray, dict)):
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def as_list(value) -> list:
    if is_missing(value):
        return []
    if isinstance(value, np.ndarray):
        return value.tolist()
    return list(value)


def is_blank(value) -> bool:
    return is_missing(value) or not str(value).strip()


def _rows(df: pd.DataFrame, columns: Sequence[str]):
    return zip(*(df[c].tolist() for c in columns), strict=True) if len(df) else iter(())


# -- catalog_files ------------------------------------------------------------------------------------------
def accepted_file_consistent(df: pd.DataFrame, id_col: str) -> list[str | None]:
    out: list[str | None] = []
    for fid, status, n_tables, verdicts in _rows(df, [id_col, "status", "n_tables", "table_verdicts"]):
        verdicts = as_list(verdicts)
        n_accepted = sum(1 for v in verdicts if isinstance(v, dict) and v.get("status") == "accepted")
        if status == "accepted" and verdicts and not is_missing(n_tables) and n_accepted != int(n_tables):
            out.append(f"{fid}: n_tables={int(n_tables)} but {n_accepted} accepted table verdict(s)")
        elif status == "rejected" and n_accepted:
            out.append(f"{fid}: rejected file has {n_accepted} accepted table verdict(s)")
        else:
            out.append(None)
    return out


def accepted_file_within_limits(max_rows: int, max_cols: int, max_db_table_rows: int | None = None):
    """Per-table limits summed over a file's tables: n_rows <= cap * n_tables, n_cols <= max_cols * n_tables,
    where the row cap of a database's tables is ``max_db_table_rows``."""

    def check(df: pd.DataFrame, id_col: str) -> list[str | None]:
        out: list[str | None] = []
        cols = [id_col, "status", "n_tables", "n_rows", "n_cols", "format"]
        for fid, status, n_tables, n_rows, n_cols, fmt in _rows(df, cols):
            if status != "accepted" or is_missing(n_tables):
                out.append(None)
                continue
            k = int(n_tables)
            row_cap = max_db_table_rows if fmt == "sqlite" and max_db_table_rows else max_rows
            if not is_missing(n_rows) and int(n_rows) > row_cap * k:
                out.append(f"{fid}: {int(n_rows)} rows over {k} table(s) exceeds {row_cap} per table")
            elif not is_missing(n_cols) and int(n_cols) > max_cols * k:
                out.append(f"{fid}: {int(n_cols)} columns over {k} table(s) exceeds {max_cols} per table")
            else:
                out.append(None)
        return out

    return check


# -- catalog_tables -----------------------------------------------------------------------------------------
def columns_match_count(df: pd.DataFrame, id_col: str) -> list[str | None]:
    out: list[str | None] = []
    for tid, n_cols, columns, profiles in _rows(df, [id_col, "n_cols", "columns", "column_profiles"]):
        cols, profs = as_list(columns), as_list(profiles)
        if is_missing(n_cols):
            out.append(None)
        elif cols and len(cols) != int(n_cols):
            out.append(f"{tid}: n_cols={int(n_cols)} but {len(cols)} column names")
        elif cols and len(set(map(str, cols))) != len(cols):
            out.append(f"{tid}: duplicate column names")
        elif profs and len(profs) != int(n_cols):
            out.append(f"{tid}: n_cols={int(n_cols)} but {len(profs)} column profiles")
        else:
            out.append(None)
    return out


# -- queries --------------------------------------------------------------------------------------------------
def lineage_matches_hop(df: pd.DataFrame, id_col: str) -> list[str | None]:
    """A 1-hop query stands alone; a composed (2..5-hop) query names its parents and its chain's root. A single
    question that itself asks for several steps ("first find the group with the largest total, then average
    inside it") counts them in its hop and stands alone: no parents, its own root."""
    out: list[str | None] = []
    for qid, hop, parents, root in _rows(df, [id_col, "hop", "parent_query_ids", "root_query_id"]):
        parents = as_list(parents)
        if is_missing(hop):
            out.append(None)  # the not-null expectation reports it
        elif int(hop) == 1 and parents:
            out.append(f"{qid}: hop 1 but {len(parents)} parent(s)")
        elif int(hop) > 1 and not parents and root != qid:
            out.append(f"{qid}: hop {int(hop)} but no parent query")
        elif int(hop) > 1 and is_missing(root):
            out.append(f"{qid}: hop {int(hop)} but no root_query_id")
        elif qid in parents:
            out.append(f"{qid}: lists itself as parent")
        else:
            out.append(None)
    return out


# -- trajectories / dataset ----------------------------------------------------------------------------------
def answered_has_answer(df: pd.DataFrame, id_col: str) -> list[str | None]:
    return [
        f"{tid}: status answered but final_answer is empty" if status == "answered" and is_blank(answer) else None
        for tid, status, answer in _rows(df, [id_col, "status", "final_answer"])
    ]


def messages_well_formed(final_from_assistant: bool):
    """Every message carries a role; training samples must end on the assistant's turn (the final answer)."""

    def check(df: pd.DataFrame, id_col: str) -> list[str | None]:
        out: list[str | None] = []
        for rid, messages in _rows(df, [id_col, "messages"]):
            msgs = as_list(messages)
            roles = [m.get("role") if isinstance(m, dict) else None for m in msgs]
            if not msgs:
                out.append(f"{rid}: no messages")
            elif any(is_blank(r) for r in roles):
                out.append(f"{rid}: message without a role")
            elif final_from_assistant and roles[-1] != "assistant":
                out.append(f"{rid}: last message is from {roles[-1]!r}, not the assistant")
            else:
                out.append(None)
        return out

    return check


def correct_matches_outcome(df: pd.DataFrame, id_col: str) -> list[str | None]:
    out: list[str | None] = []
    for item, correct, outcome in _rows(df, [id_col, "correct", "outcome"]):
        if bool(correct) != (outcome == "correct"):
            out.append(f"{item}: correct={correct} but outcome {outcome!r}")
        else:
            out.append(None)
    return out
