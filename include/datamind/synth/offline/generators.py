"""Single-hop question templates for all 18 categories: the Task record, the registry, shared helpers.

The templates themselves live in ``offline/templates/`` (importing that package registers them).
Each template looks at the table's column roles, picks real columns and values, and yields a
:class:`Task`: the question, a pandas body that sets ``answer`` on ``df``, and (where SQL expresses it
plainly) an SQL variant over ``{src}``. A template yields nothing when the table cannot support it, and
it checks the data first so the question has one well-defined answer (no ties for "which is highest",
no division by zero, enough values for a test). The engine executes the chosen variant to get the
ground-truth answer.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from datamind.synth.offline.columns import TableView, python_scalar
from datamind.vocabulary import MISSING_TOKENS

OFFLINE_TEMPLATES_VERSION = "offline-1.0"
MAX_COMBOS = 4  # column choices tried per template, after a seeded shuffle


@dataclass
class Task:
    category: str
    template: str
    question: str
    description: str
    py: str  # body: reads ``df``, assigns ``answer``
    sql: str | None = None  # SQLite's formulation, over ``{src}``: a database source's reference where given
    imports: tuple[str, ...] = ()
    params: dict = field(default_factory=dict)
    # DuckDB formulation (uses ``{src}``) for analyses SQLite's dialect cannot express (median,
    # correlation, regression...): an independent engine for the self-consistency variants.
    duck: str | None = None
    # Other Python bodies (numpy, scipy, the standard library) computing the same ``answer``: independent
    # formulations for analyses no SQL engine here expresses.  Each may bring its own imports.
    alt: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The steps the question asks for, each using the result of the one before ("first find the group with the
    # largest total, then average inside it": 2): a single question's hop label counts them.
    hops: int = 1


def task_text(task: Task) -> str:
    """Everything a task says and runs: which columns (and so which parent joins) it needs."""
    return "\n".join([task.question, task.py, task.sql or "", task.duck or "", *(body for body, _ in task.alt)])


Generator = Callable[[TableView, random.Random], Iterator[Task]]
REGISTRY: dict[str, list[Generator]] = {}


def template(category: str):
    def deco(fn: Generator) -> Generator:
        REGISTRY.setdefault(category, []).append(fn)
        return fn

    return deco


# -- helpers -----------------------------------------------------------------------------------


def c(name: str) -> str:
    """pandas column access with the name as a safe literal."""
    return f"df[{name!r}]"


def an(word: str) -> str:
    """The indefinite article for a column name in a question."""
    return "an" if str(word)[:1].lower() in "aeio" else "a"  # "a unit", "a user": u mostly sounds like "you"


def sample(items, rng: random.Random, k: int = MAX_COMBOS) -> list:
    items = list(items)
    rng.shuffle(items)
    return items[:k]


def unique_top(values: pd.Series, ascending: bool = False) -> bool:
    """True when the best value is strictly better than the runner-up (one right answer)."""
    v = values.dropna().sort_values(ascending=ascending)
    return len(v) >= 2 and not np.isclose(v.iloc[0], v.iloc[1], rtol=1e-9, atol=1e-12)


# A group's average is ranked only where it rests on this many values (or a quarter of a small table's rows):
# "the highest average price" won by two records among hundreds says nothing about the group, and the chain's
# next step (its median, its spread) would be computed over those same two rows.
MIN_RANKED_GROUP = 5


def ranked_mean(df: pd.DataFrame, g: str, m: str) -> bool:
    """Whether "which ``g`` has the highest average ``m``" has one answer resting on enough values."""
    stats = df.groupby(g)[m].agg(["mean", "count"]).dropna(subset=["mean"])
    if not unique_top(stats["mean"]):
        return False
    need = min(MIN_RANKED_GROUP, max(2, len(df) // 4))
    return int(stats.loc[stats["mean"].idxmax(), "count"]) >= need


def fmt(v) -> str:
    """A value as it reads inside a question."""
    v = python_scalar(v)
    if isinstance(v, float):
        return f"{round(v, 4):g}"
    return f"'{v}'" if isinstance(v, str) else str(v)


def two_values(view: TableView, g: str, m: str | None = None, min_count: int = 2) -> list[tuple]:
    vals = view.group_values(g, min_count=min_count)
    if m is not None:
        vals = [v for v in vals if view.df.loc[view.df[g] == v, m].notna().sum() >= min_count]
    return list(itertools.combinations(vals[:4], 2))


_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def iso_days(values: pd.Series) -> bool:
    """Whether every value is a calendar day written as ISO text ('2024-03-05'): what SQLite's date functions
    read exactly, so a date question over such a column is one SQL query, as an analyst would write it
    (days alone: differences of whole days are exact in julianday)."""
    v = values.dropna()
    return len(v) > 0 and all(isinstance(x, str) and _ISO_DAY.fullmatch(x) for x in v)


# Data-derived names and values enter program text only as repr() literals in plain expressions, never
# inside f-strings or code fragments, so no column name or cell value can change what a program does.
GROUP_MEAN_SORT = (
    "means = df.groupby({g})[{m}].mean().dropna()\n"
    "means = means.reset_index().sort_values([{m}, {g}], ascending=[False, True])\n"
)


# What the missing-values question counts as missing besides empty cells: text standing for nothing (a database
# or a workbook keeps 'None', 'NA' or '-' as text; profiling records them per column). Its programs count them.
PLACEHOLDERS = list(MISSING_TOKENS)
MISSING_COUNTS = (
    f"placeholders = {PLACEHOLDERS!r}\n"
    "missing = df.isna().sum()\n"
    "for col in df.select_dtypes(include=['object', 'string']).columns:\n"
    "    text = df[col].dropna().astype(str).str.strip().str.lower()\n"
    "    missing[col] += int(text.isin(placeholders).sum())\n"
)


def missing_counts(df: pd.DataFrame) -> pd.Series:
    """Per column: empty cells plus text cells that stand for a missing value (what the programs count)."""
    namespace = {"df": df}
    exec(compile(MISSING_COUNTS, "<missing_counts>", "exec"), namespace)  # noqa: S102 - own generated code
    return namespace["missing"]
