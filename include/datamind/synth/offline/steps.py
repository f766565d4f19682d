"""The step catalogue of easy-to-hard composition: the roots (hop 1) and, for each kind of value, the steps
that take it one hop further, each with the category of analysis it performs and the kind of value it yields.

A step reads the table view and the previous value and returns what it made (``Made``: its question parts,
reference program and answer), or None where it does not fit the data. ``compose`` chains them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from datamind.data_source import qi, ql
from datamind.synth.offline.columns import TableView
from datamind.synth.offline.generators import Task, an, c, iso_days, ranked_mean, unique_top

NP = ("import numpy as np",)


@dataclass(frozen=True)
class Value:
    kind: str  # group | level | spread | count | distinct | diff | pct | ratio | corr | days | bool
    value: object
    col: str | None  # the grouping column (group) or measure (level, spread, diff)
    ref: str  # how a later step refers to this value: "that region", "that average"
    steps: tuple[str, ...]  # the imperative steps that produce it, hop order
    # the largest share of all records a count (or, for a percentage, of 100) reaches by what it counts, whatever
    # the data: outliers beyond two of the column's standard deviations (Chebyshev: 25%), outliers against any
    # other spread (a minority, by what the word means), records above the median (half). A claim the bound
    # already settles ("is it more than half?") is fixed by construction.
    share_max: float | None = None


class FixedByConstruction(Exception):
    """A step whose answer follows from how the chain was built, not from the data: rejected with the reason."""

    def __init__(self, task: Task, reason: str):
        super().__init__(reason)
        self.task, self.reason = task, reason


@dataclass(frozen=True)
class Made:
    """What a step proposes: the task (its question is the final ask only), and the value it yields."""

    task: Task
    kind: str
    col: str | None
    step: str  # this computation as an imperative clause, for the questions of later hops
    ref: str
    share_max: float | None = None  # see ``Value.share_max``


Step = Callable[[TableView, "Value", random.Random], "Made | None"]


def _pick(items, rng):
    items = list(items)
    return items[rng.randrange(len(items))] if items else None


def printed_as(x: float, value: float) -> bool:
    """Whether ``x``, a previous hop's printed result (rounded to 4 decimals), is ``value``."""
    return bool(np.isfinite(value) and abs(float(x) - float(value)) <= 1e-4 + 1e-9 * abs(float(value)))


def say(rng: random.Random, *options: str) -> str:
    return options[rng.randrange(len(options))]


def _in_group(g: str, v) -> str:
    return f"{c(g)} == {v!r}"


def root_top_count(view, rng):
    g = _pick([g for g in view.groups if unique_top(view.df[g].value_counts())], rng)
    if g is None:
        return None
    task = Task(
        "ranking",
        "chain_top_count",
        say(
            rng,
            f"Which {g} value has the most records?",
            f"Which {g} occurs most often?",
            f"What is the most frequent {g}?",
        ),
        f"Mode of {g}.",
        f"answer = {c(g)}.value_counts().idxmax()",
        f"SELECT {qi(g)} FROM {{src}} WHERE {qi(g)} IS NOT NULL GROUP BY {qi(g)} ORDER BY COUNT(*) DESC LIMIT 1",
        params={"g": g},
    )
    return Made(task, "group", g, f"find the {g} that occurs most often", f"that {g}")


def root_top_mean(view, rng):
    pairs = [(g, m) for g in view.groups for m in view.measures if g != m and ranked_mean(view.df, g, m)]
    pick = _pick(pairs, rng)
    if pick is None:
        return None
    g, m = pick
    task = Task(
        "ranking",
        "chain_top_mean",
        say(rng, f"Which {g} has the highest average {m}?", f"For which {g} is the mean {m} highest?"),
        f"Group by {g}, rank by mean {m}.",
        f"answer = df.groupby({g!r})[{m!r}].mean().idxmax()",
        f"SELECT {qi(g)} FROM {{src}} WHERE {qi(g)} IS NOT NULL AND {qi(m)} IS NOT NULL GROUP BY {qi(g)} "
        f"ORDER BY AVG({qi(m)}) DESC LIMIT 1",
        params={"g": g, "m": m},
    )
    return Made(task, "group", g, f"find the {g} with the highest average {m}", f"that {g}")


def root_mean(view, rng):
    m = _pick(view.measures, rng)
    if m is None:
        return None
    task = Task(
        "aggregation",
        "chain_mean",
        say(rng, f"What is the average {m} across all records?", f"What is the mean {m} over the whole table?"),
        f"Mean of {m}.",
        f"answer = round(float({c(m)}.mean()), 4)",
        f"SELECT ROUND(AVG({qi(m)}), 4) FROM {{src}}",
        params={"m": m},
    )
    return Made(task, "level", m, f"compute the overall average {m}", "that average")


def root_median(view, rng):
    m = _pick(view.measures, rng)
    if m is None:
        return None
    task = Task(
        "statistical_analysis",
        "chain_median",
        say(
            rng, f"What is the median {m}?", f"What value of {m} splits the records into two equal halves (the median)?"
        ),
        f"Median of {m}.",
        f"answer = round(float({c(m)}.median()), 4)",
        duck=f"SELECT ROUND(MEDIAN({qi(m)}), 4) FROM {{src}}",
        alt=((f"vals = {c(m)}.dropna().to_numpy(dtype=float)\nanswer = round(float(np.median(vals)), 4)", NP),),
        params={"m": m},
    )
    return Made(task, "level", m, f"compute the median {m}", "that median")


def root_spread(view, rng):
    m = _pick([m for m in view.measures if view.df[m].std() > 0], rng)
    if m is None:
        return None
    task = Task(
        "statistical_analysis",
        "chain_std",
        say(
            rng, f"What is the standard deviation of {m}?", f"How widely does {m} vary, as a sample standard deviation?"
        ),
        f"Sample standard deviation of {m}.",
        f"answer = round(float({c(m)}.std()), 4)",
        duck=f"SELECT ROUND(STDDEV_SAMP({qi(m)}), 4) FROM {{src}}",
        alt=((f"vals = {c(m)}.dropna().to_numpy(dtype=float)\nanswer = round(float(np.std(vals, ddof=1)), 4)", NP),),
        params={"m": m},
    )
    return Made(task, "spread", m, f"compute the standard deviation of {m}", "that standard deviation")


ROOTS = (root_top_count, root_top_mean, root_mean, root_median, root_spread)


def group_mean(view, prev: Value, rng):
    g, v = prev.col, prev.value
    m = _pick([m for m in view.measures if m != g and view.df.loc[view.df[g] == v, m].notna().any()], rng)
    if m is None:
        return None
    task = Task(
        "aggregation",
        "chain_group_mean",
        say(
            rng,
            f"What is the average {m} of the records of {prev.ref}?",
            f"What is the mean {m} among records of {prev.ref}?",
        ),
        f"Average {m} inside the {g} group found by the previous step.",
        f"answer = round(float(df.loc[{_in_group(g, v)}, {m!r}].mean()), 4)",
        f"SELECT ROUND(AVG({qi(m)}), 4) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
        params={"g": g, "v": v, "m": m},
    )
    return Made(task, "level", m, f"take the average {m} of the records of {prev.ref}", "that average")


def group_mode(view, prev: Value, rng):
    g, v = prev.col, prev.value
    sub = view.df[view.df[g] == v]
    g2 = _pick([x for x in view.groups if x != g and unique_top(sub[x].value_counts())], rng)
    if g2 is None:
        return None
    task = Task(
        "ranking",
        "chain_group_mode",
        say(
            rng,
            f"Among the records of {prev.ref}, which {g2} value is most common?",
            f"Which {g2} appears most often among records of {prev.ref}?",
        ),
        f"Restrict to the previous step's {g} group, then take the mode of {g2}.",
        f"answer = df.loc[{_in_group(g, v)}, {g2!r}].value_counts().idxmax()",
        f"SELECT {qi(g2)} FROM {{src}} WHERE {qi(g)} = {ql(v)} AND {qi(g2)} IS NOT NULL GROUP BY {qi(g2)} "
        f"ORDER BY COUNT(*) DESC LIMIT 1",
        params={"g": g, "v": v, "g2": g2},
    )
    return Made(task, "group", g2, f"find the most common {g2} among the records of {prev.ref}", f"that {g2}")


def group_count(view, prev: Value, rng):
    g, v = prev.col, prev.value
    task = Task(
        "counting",
        "chain_group_count",
        say(rng, f"How many records belong to {prev.ref}?", f"Count the records of {prev.ref}: how many are there?"),
        f"Count the rows of the {g} group found by the previous step.",
        f"answer = int(({_in_group(g, v)}).sum())",
        f"SELECT COUNT(*) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
        params={"g": g, "v": v},
    )
    return Made(task, "count", None, f"count the records of {prev.ref}", "that count")


def group_distinct(view, prev: Value, rng):
    g, v = prev.col, prev.value
    sub = view.df[view.df[g] == v]
    g2 = _pick([x for x in view.groups if x != g and sub[x].nunique() >= 2], rng)
    if g2 is None:
        return None
    task = Task(
        "descriptive_analysis",
        "chain_group_distinct",
        say(
            rng,
            f"How many distinct {g2} values occur among the records of {prev.ref}?",
            f"How many different {g2} values do the records of {prev.ref} cover?",
        ),
        f"Describe the previous step's {g} group by the number of distinct {g2} values.",
        f"answer = int(df.loc[{_in_group(g, v)}, {g2!r}].nunique())",
        f"SELECT COUNT(DISTINCT {qi(g2)}) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
        params={"g": g, "v": v, "g2": g2},
    )
    # a number of distinct values, not of records: no share of the table's rows (it ends a chain)
    return Made(
        task, "distinct", None, f"count the distinct {g2} values among the records of {prev.ref}", "that number"
    )


def group_spread(view, prev: Value, rng):
    g, v = prev.col, prev.value
    m = _pick([m for m in view.measures if m != g and view.df.loc[view.df[g] == v, m].dropna().std() > 0], rng)
    if m is None:
        return None
    sel = f"df.loc[{_in_group(g, v)}, {m!r}]"
    task = Task(
        "statistical_analysis",
        "chain_group_std",
        say(
            rng,
            f"What is the standard deviation of {m} among the records of {prev.ref}?",
            f"How much does {m} vary within {prev.ref}, as a sample standard deviation?",
        ),
        f"Sample standard deviation of {m} inside the previous step's {g} group.",
        f"answer = round(float({sel}.std()), 4)",
        duck=f"SELECT ROUND(STDDEV_SAMP({qi(m)}), 4) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
        alt=((f"vals = {sel}.dropna().to_numpy(dtype=float)\nanswer = round(float(np.std(vals, ddof=1)), 4)", NP),),
        params={"g": g, "v": v, "m": m},
    )
    return Made(
        task, "spread", m, f"compute the standard deviation of {m} within {prev.ref}", "that standard deviation"
    )


def group_gap(view, prev: Value, rng):
    g, v = prev.col, prev.value
    df = view.df
    inside, outside = df[g] == v, df[g].notna() & (df[g] != v)
    m = _pick(
        [m for m in view.measures if m != g and df.loc[inside, m].notna().any() and df.loc[outside, m].notna().any()],
        rng,
    )
    if m is None:
        return None
    task = Task(
        "impact_analysis",
        "chain_group_gap",
        say(
            rng,
            f"How much higher or lower is the average {m} of the records of {prev.ref} than that of all other records "
            "(the group's average minus the others')?",
            f"By how much does belonging to {prev.ref} shift the average {m}, compared with the records outside it "
            "(inside minus outside)?",
        ),
        f"Difference in mean {m} between the previous step's {g} group and the rest.",
        f"inside = df.loc[{c(g)} == {v!r}, {m!r}].mean()\n"
        f"outside = df.loc[{c(g)}.notna() & ({c(g)} != {v!r}), {m!r}].mean()\n"
        "answer = round(float(inside - outside), 4)",
        f"SELECT ROUND(AVG(CASE WHEN {qi(g)} = {ql(v)} THEN {qi(m)} END) - "
        f"AVG(CASE WHEN {qi(g)} <> {ql(v)} THEN {qi(m)} END), 4) FROM {{src}}",
        params={"g": g, "v": v, "m": m},
    )
    return Made(
        task,
        "diff",
        m,
        f"compute the average {m} of {prev.ref} minus the other records' average {m}",
        "that gap",
    )


def group_clean_median(view, prev: Value, rng):
    g, v = prev.col, prev.value
    m = _pick([m for m in view.measures if m != g and view.df.loc[view.df[g] == v, m].notna().any()], rng)
    if m is None:
        return None
    task = Task(
        "comprehensive_data_preprocessing",
        "chain_clean_median",
        say(
            rng,
            f"After removing exact duplicate rows and rows with no {m}, what is the median {m} of the records "
            f"of {prev.ref}?",
            f"Clean the table first (drop fully duplicated rows and rows missing {m}); then what is the median {m} "
            f"within {prev.ref}?",
        ),
        f"Deduplicate, drop missing {m}, then take the median {m} inside the previous step's {g} group.",
        f"clean = df.drop_duplicates().dropna(subset=[{m!r}])\n"
        f"answer = round(float(clean.loc[clean[{g!r}] == {v!r}, {m!r}].median()), 4)",
        duck=f"SELECT ROUND(MEDIAN({qi(m)}), 4) FROM (SELECT DISTINCT * FROM {{src}}) AS t "
        f"WHERE {qi(m)} IS NOT NULL AND {qi(g)} = {ql(v)}",
        alt=(
            (
                f"clean = df.drop_duplicates()\n"
                f"vals = clean.loc[clean[{g!r}] == {v!r}, {m!r}].to_numpy(dtype=float)\n"
                "answer = round(float(np.nanmedian(vals)), 4)",
                NP,
            ),
        ),
        params={"g": g, "v": v, "m": m},
    )
    return Made(
        task,
        "level",
        m,
        f"take the median {m} of {prev.ref} after dropping duplicate rows and missing {m}",
        "that median",
    )


def group_flag_count(view, prev: Value, rng):
    g, v = prev.col, prev.value
    m = _pick([m for m in view.measures if m != g], rng)
    if m is None:
        return None
    med = view.df[m].median()
    if not ((view.df[g] == v) & (view.df[m] > med)).any():
        return None
    task = Task(
        "feature_engineering",
        "chain_flag_count",
        say(
            rng,
            f"Add a flag that marks records whose {m} is above the overall median {m}. How many records of "
            f"{prev.ref} carry the flag?",
            f"Derive a feature 'high_{m}' (true when {m} exceeds its overall median). How many records of "
            f"{prev.ref} have it set?",
        ),
        f"Build a binary feature from {m} and count it inside the previous step's {g} group.",
        f"flag = {c(m)} > {c(m)}.median()\nanswer = int((flag & ({c(g)} == {v!r})).sum())",
        duck=f"SELECT COUNT(*) FROM {{src}} WHERE {qi(g)} = {ql(v)} "
        f"AND {qi(m)} > (SELECT MEDIAN({qi(m)}) FROM {{src}})",
        alt=(
            (
                f"vals = {c(m)}.to_numpy(dtype=float)\n"
                f"flag = vals > np.nanmedian(vals)\n"
                f"answer = int(np.sum(flag & ({c(g)} == {v!r}).to_numpy()))",
                NP,
            ),
        ),
        params={"g": g, "v": v, "m": m},
    )
    return Made(
        task,
        "count",
        None,
        f"count the records of {prev.ref} whose {m} is above the overall median {m}",
        "that count",
        share_max=0.5,  # records above the overall median are at most half of all records
    )


def group_corr(view, prev: Value, rng):
    g, v = prev.col, prev.value
    sub = view.df[view.df[g] == v]
    pairs = []
    for i, x in enumerate(view.measures):
        for y in view.measures[i + 1 :]:
            t = sub[[x, y]].dropna()
            if x != g and y != g and len(t) >= 5 and t[x].std() > 0 and t[y].std() > 0:
                pairs.append((x, y))
    pick = _pick(pairs, rng)
    if pick is None:
        return None
    x, y = pick
    task = Task(
        "correlation_analysis",
        "chain_group_corr",
        say(
            rng,
            f"Within {prev.ref}, what is the Pearson correlation between {x} and {y}?",
            f"How strongly are {x} and {y} correlated (Pearson r) among the records of {prev.ref}?",
        ),
        f"Pearson correlation of {x} and {y} inside the previous step's {g} group.",
        f"t = df.loc[{_in_group(g, v)}, [{x!r}, {y!r}]].dropna()\nanswer = round(float(t[{x!r}].corr(t[{y!r}])), 4)",
        duck=f"SELECT ROUND(CORR({qi(x)}, {qi(y)}), 4) FROM {{src}} WHERE {qi(g)} = {ql(v)} "
        f"AND {qi(x)} IS NOT NULL AND {qi(y)} IS NOT NULL",
        alt=(
            (
                f"t = df.loc[{_in_group(g, v)}, [{x!r}, {y!r}]].dropna().to_numpy(dtype=float)\n"
                "answer = round(float(np.corrcoef(t[:, 0], t[:, 1])[0, 1]), 4)",
                NP,
            ),
        ),
        params={"g": g, "v": v, "x": x, "y": y},
    )
    return Made(
        task, "corr", None, f"compute the Pearson correlation between {x} and {y} within {prev.ref}", "that correlation"
    )


def group_stratified_gap(view, prev: Value, rng):
    g, v = prev.col, prev.value
    sub = view.df[view.df[g] == v]
    pairs = []
    for m in view.measures:
        for x in view.measures:
            if len({m, x, g}) < 3:
                continue
            t = sub[[m, x]].dropna()
            if len(t) < 6:
                continue
            hi = t[x] > t[x].median()
            if hi.sum() >= 2 and (~hi).sum() >= 2:
                pairs.append((m, x))
    pick = _pick(pairs, rng)
    if pick is None:
        return None
    m, x = pick
    task = Task(
        "causal_analysis",
        "chain_stratified_gap",
        say(
            rng,
            f"Within {prev.ref}, split the records at the median {x} of that group (complete {m} and {x} only). "
            f"How much higher is the average {m} in the upper half than in the rest?",
            f"Holding {g} fixed at {prev.ref}: does a high {x} go with a higher {m}? Give the average {m} of records "
            f"above the group's median {x} minus that of the others (rows with both values only).",
        ),
        f"Stratify by the previous step's {g} group, contrast mean {m} above vs at-or-below the median {x}.",
        f"t = df.loc[{_in_group(g, v)}, [{m!r}, {x!r}]].dropna()\n"
        f"high = t[{x!r}] > t[{x!r}].median()\n"
        f"answer = round(float(t.loc[high, {m!r}].mean() - t.loc[~high, {m!r}].mean()), 4)",
        duck=f"WITH t AS (SELECT {qi(m)} AS m, {qi(x)} AS x FROM {{src}} WHERE {qi(g)} = {ql(v)} "
        f"AND {qi(m)} IS NOT NULL AND {qi(x)} IS NOT NULL) "
        "SELECT ROUND(AVG(CASE WHEN x > (SELECT MEDIAN(x) FROM t) THEN m END) - "
        "AVG(CASE WHEN x <= (SELECT MEDIAN(x) FROM t) THEN m END), 4) FROM t",
        alt=(
            (
                f"t = df.loc[{_in_group(g, v)}, [{m!r}, {x!r}]].dropna().to_numpy(dtype=float)\n"
                "high = t[:, 1] > np.median(t[:, 1])\n"
                "answer = round(float(t[high, 0].mean() - t[~high, 0].mean()), 4)",
                NP,
            ),
        ),
        params={"g": g, "v": v, "m": m, "x": x},
    )
    return Made(
        task, "diff", m, f"compare the average {m} above and below the median {x} within {prev.ref}", "that difference"
    )


def group_span_days(view, prev: Value, rng):
    g, v = prev.col, prev.value
    options = []
    for d in view.dates:
        if d == g:
            continue
        stamps = pd.to_datetime(view.df.loc[view.df[g] == v, d], errors="coerce", format="mixed").dropna()
        if len(stamps) >= 2 and stamps.max() > stamps.min():
            options.append(d)
    d = _pick(options, rng)
    if d is None:
        return None
    sel = f"pd.to_datetime(df.loc[{_in_group(g, v)}, {d!r}], errors='coerce', format='mixed').dropna()"
    task = Task(
        "time_based_calculation",
        "chain_span_days",
        say(
            rng,
            f"How many days separate the earliest and the latest {d} among the records of {prev.ref}?",
            f"Over how many days do the {d} values of {prev.ref} extend (latest minus earliest)?",
        ),
        f"Date span of {d} inside the previous step's {g} group.",
        f"stamps = {sel}\nanswer = int((stamps.max() - stamps.min()).days)",
        f"SELECT CAST(MAX(julianday({qi(d)})) - MIN(julianday({qi(d)})) AS INTEGER) FROM {{src}} "
        f"WHERE {qi(g)} = {ql(v)}"
        if iso_days(view.df.loc[view.df[g] == v, d])
        else None,
        alt=(
            (
                f"stamps = {sel}\ndays = sorted({{ts.date() for ts in stamps}})\nanswer = (days[-1] - days[0]).days",
                (),
            ),
            (
                f"stamps = {sel}.sort_values()\n"
                "answer = int((stamps.iloc[-1].normalize() - stamps.iloc[0].normalize()) / pd.Timedelta(days=1))",
                (),
            ),
        ),
        params={"g": g, "v": v, "d": d},
    )
    return Made(task, "days", None, f"measure how many days the {d} values of {prev.ref} span", "that number of days")


def level_count_above(view, prev: Value, rng):
    m, x = prev.col, prev.value
    if int((view.df[m] > x).sum()) == 0:
        return None
    median = view.df[m].median()
    at_or_above_median = bool(x >= median or printed_as(x, median))
    task = Task(
        "counting",
        "chain_count_above",
        say(
            rng,
            f"How many records have {an(m)} {m} greater than {prev.ref}?",
            f"How many records exceed {prev.ref} in {m}?",
        ),
        f"Use the previous result as a threshold on {m}.",
        f"answer = int(({c(m)} > {x!r}).sum())",
        f"SELECT COUNT(*) FROM {{src}} WHERE {qi(m)} > {ql(x)}",
        params={"m": m, "x": x},
    )
    return Made(
        task,
        "count",
        None,
        f"count the records whose {m} is above {prev.ref}",
        "that count",
        share_max=0.5 if at_or_above_median else None,  # above the median: at most half of the records
    )


def level_mode_above(view, prev: Value, rng):
    m, x = prev.col, prev.value
    sub = view.df[view.df[m] > x]
    if sub.empty:
        return None
    g = _pick([g for g in view.groups if g != m and unique_top(sub[g].value_counts())], rng)
    if g is None:
        return None
    task = Task(
        "ranking",
        "chain_mode_above",
        say(
            rng,
            f"Among records with {an(m)} {m} above {prev.ref}, which {g} value is most common?",
            f"Which {g} is most frequent among the records whose {m} exceeds {prev.ref}?",
        ),
        f"Filter {m} by the previous result, then take the mode of {g}.",
        f"answer = df.loc[{c(m)} > {x!r}, {g!r}].value_counts().idxmax()",
        f"SELECT {qi(g)} FROM {{src}} WHERE {qi(m)} > {ql(x)} AND {qi(g)} IS NOT NULL GROUP BY {qi(g)} "
        f"ORDER BY COUNT(*) DESC LIMIT 1",
        params={"m": m, "x": x, "g": g},
    )
    return Made(task, "group", g, f"find the most common {g} among records whose {m} is above {prev.ref}", f"that {g}")


def level_diff_median(view, prev: Value, rng):
    m, x = prev.col, prev.value
    if np.isclose(x, view.df[m].median()):
        return None  # the previous value is the median itself: a difference of zero teaches nothing
    task = Task(
        "comparison",
        "chain_diff_median",
        say(
            rng,
            f"How much does {prev.ref} differ from the overall median {m} (first minus second)?",
            f"Compare {prev.ref} with the median {m} of the whole table: what is the difference (it minus the median)?",
        ),
        f"Compare the previous result with the median of {m}.",
        f"answer = round(float({x!r} - {c(m)}.median()), 4)",
        duck=f"SELECT ROUND({ql(x)} - MEDIAN({qi(m)}), 4) FROM {{src}}",
        alt=((f"answer = round(float({x!r} - np.nanmedian({c(m)}.to_numpy(dtype=float))), 4)", NP),),
        params={"m": m, "x": x},
    )
    return Made(task, "diff", m, f"subtract the overall median {m} from {prev.ref}", "that difference")


def level_percentile(view, prev: Value, rng):
    m, x = prev.col, prev.value
    if view.df[m].notna().sum() == 0:
        return None
    if printed_as(x, view.df[m].median()):
        return None  # the share at or below the median is about 50 percent by definition: nothing to compute
    task = Task(
        "distribution_analysis",
        "chain_percentile_rank",
        say(
            rng,
            f"What percentage of the records with a {m} have a {m} at or below {prev.ref}?",
            f"Where does {prev.ref} sit in the distribution of {m}: what share of non-missing {m} values "
            "(in percent) is at or below it?",
        ),
        f"Percentile rank of the previous result within {m}.",
        f"vals = {c(m)}.dropna()\nanswer = round(float((vals <= {x!r}).mean() * 100), 2)",
        f"SELECT ROUND(100.0 * SUM(CASE WHEN {qi(m)} <= {ql(x)} THEN 1 ELSE 0 END) / COUNT({qi(m)}), 2) FROM {{src}}",
        params={"m": m, "x": x},
    )
    return Made(
        task, "pct", None, f"work out what percentage of {m} values are at or below {prev.ref}", "that percentage"
    )


def level_ratio_max(view, prev: Value, rng):
    m, x = prev.col, prev.value
    if not x or math.isclose(float(x), 0.0) or not np.isfinite(view.df[m].max()):
        return None
    task = Task(
        "multi_hop_numerical_reasoning",
        "chain_ratio_max",
        say(
            rng,
            f"How many times {prev.ref} is the largest {m} in the table?",
            f"Divide the maximum {m} by {prev.ref}. What ratio do you get?",
        ),
        f"Ratio of the maximum {m} to the previous result.",
        f"answer = round(float({c(m)}.max() / {x!r}), 4)",
        f"SELECT ROUND(MAX({qi(m)}) / {ql(float(x))}, 4) FROM {{src}}",
        params={"m": m, "x": x},
    )
    return Made(task, "ratio", None, f"divide the maximum {m} by {prev.ref}", "that ratio")


def level_fact(view, prev: Value, rng):
    m, x = prev.col, prev.value
    if np.isclose(x, view.df[m].median()):
        return None
    task = Task(
        "fact_checking",
        "chain_fact_level",
        say(
            rng,
            f"Is {prev.ref} higher than the overall median {m}?",
            f"True or not: {prev.ref} exceeds the median {m} of all records?",
        ),
        f"Check a claim about the previous result against the median of {m}.",
        f"answer = 'Yes' if {x!r} > {c(m)}.median() else 'No'",
        duck=f"SELECT CASE WHEN {ql(x)} > MEDIAN({qi(m)}) THEN 'Yes' ELSE 'No' END FROM {{src}}",
        params={"m": m, "x": x},
    )
    return Made(task, "bool", None, "", "")


def spread_outliers(view, prev: Value, rng):
    m, s = prev.col, prev.value
    mean = view.df[m].mean()
    n = int(((view.df[m] - mean).abs() > 2 * s).sum())
    if n == 0:
        return None
    task = Task(
        "anomaly_detection",
        "chain_outliers",
        say(
            rng,
            f"Flag as outliers the records whose {m} lies more than two times {prev.ref} away from the overall "
            f"mean {m}. How many are there?",
            f"Using {prev.ref}, how many records have {an(m)} {m} more than 2 such deviations from the mean {m}?",
        ),
        f"Count records beyond mean +/- 2 x the previous spread of {m}.",
        f"answer = int((({c(m)} - {c(m)}.mean()).abs() > 2 * {s!r}).sum())",
        f"SELECT COUNT(*) FROM {{src}} WHERE ABS({qi(m)} - (SELECT AVG({qi(m)}) FROM {{src}})) > 2 * {ql(s)}",
        params={"m": m, "s": s},
    )
    # two of the column's own standard deviations from its mean hold at least three quarters of the values
    # (Chebyshev); against another spread (a group's), outliers are still a minority by what the word means
    own = printed_as(s, view.df[m].std())
    return Made(
        task,
        "count",
        None,
        f"count the {m} outliers more than two times {prev.ref} from the mean",
        "that number of outliers",
        share_max=0.25 if own else 0.5,
    )


def spread_cv(view, prev: Value, rng):
    m, s = prev.col, prev.value
    mean = view.df[m].mean()
    if not np.isfinite(mean) or math.isclose(float(mean), 0.0):
        return None
    task = Task(
        "arithmetic_calculation",
        "chain_cv",
        say(
            rng,
            f"Express {prev.ref} as a percentage of the overall average {m} (the coefficient of variation).",
            f"What is {prev.ref} divided by the mean {m}, times 100?",
        ),
        f"Coefficient of variation of {m} from the previous spread.",
        f"answer = round(float({s!r} / {c(m)}.mean() * 100), 2)",
        f"SELECT ROUND({ql(s)} / AVG({qi(m)}) * 100, 2) FROM {{src}}",
        params={"m": m, "s": s},
    )
    return Made(task, "pct", None, f"express {prev.ref} as a percentage of the mean {m}", "that percentage")


def count_pct(view, prev: Value, rng):
    n = prev.value
    task = Task(
        "arithmetic_calculation",
        "chain_count_pct",
        say(
            rng,
            f"What percentage of all records does {prev.ref} represent?",
            f"Turn {prev.ref} into a share of the whole table, in percent.",
        ),
        "Divide the previous count by the number of records.",
        f"answer = round({n!r} / len(df) * 100, 2)",
        f"SELECT ROUND(100.0 * {ql(n)} / COUNT(*), 2) FROM {{src}}",
        params={"n": n},
    )
    share = prev.share_max
    return Made(
        task,
        "pct",
        None,
        f"express {prev.ref} as a percentage of all records",
        "that percentage",
        share_max=share,
    )


def count_fact(view, prev: Value, rng):
    n = prev.value
    if n * 2 == view.n_rows:
        return None
    if prev.share_max is not None and prev.share_max <= 0.5:
        task = Task("fact_checking", "chain_fact_count", f"Is {prev.ref} more than half of all records?", "", "")
        raise FixedByConstruction(
            task, f"{prev.ref} is at most {prev.share_max:.0%} of the records by what it counts: always No"
        )
    task = Task(
        "fact_checking",
        "chain_fact_count",
        say(
            rng,
            f"Is {prev.ref} more than half of all records?",
            f"Check the claim that {prev.ref} covers over half of the table.",
        ),
        "Compare the previous count with half the table.",
        f"answer = 'Yes' if {n!r} > len(df) / 2 else 'No'",
        f"SELECT CASE WHEN {ql(n)} > COUNT(*) / 2.0 THEN 'Yes' ELSE 'No' END FROM {{src}}",
        params={"n": n},
    )
    return Made(task, "bool", None, "", "")


def diff_pct(view, prev: Value, rng):
    m, d = prev.col, prev.value
    mean = view.df[m].mean()
    if np.isclose(mean, 0):
        return None
    task = Task(
        "arithmetic_calculation",
        "chain_diff_pct",
        say(
            rng,
            f"Express {prev.ref} as a percentage of the overall average {m}.",
            f"What is {prev.ref} relative to the mean {m}, in percent?",
        ),
        f"Scale the previous difference by the mean of {m}.",
        f"answer = round(float({d!r} / {c(m)}.mean() * 100), 2)",
        f"SELECT ROUND({ql(d)} / AVG({qi(m)}) * 100, 2) FROM {{src}}",
        params={"m": m, "d": d},
    )
    return Made(task, "pct", None, f"express {prev.ref} as a percentage of the mean {m}", "that percentage")


def _threshold_fact(name: str, question: str, threshold: float):
    """A yes/no claim comparing the previous number with a fixed threshold (``references.threshold_check``
    reads the comparison back out of its programs)."""

    def step(view, prev: Value, rng):
        x = prev.value
        if math.isclose(float(x), threshold):
            return None
        if prev.kind == "pct" and prev.share_max is not None and prev.share_max * 100 <= threshold:
            raise FixedByConstruction(
                Task("fact_checking", name, question.format(ref=prev.ref), "", ""),
                f"{prev.ref} is at most {prev.share_max:.0%} by what it counts: 'above {threshold:g}' is always No",
            )
        task = Task(
            "fact_checking",
            name,
            question.format(ref=prev.ref),
            "Check a claim about the previous result.",
            f"answer = 'Yes' if {x!r} > {threshold!r} else 'No'",
            f"SELECT CASE WHEN {ql(x)} > {threshold!r} THEN 'Yes' ELSE 'No' END",
            params={"x": x},
        )
        return Made(task, "bool", None, "", "")

    step.__name__ = name
    return step


diff_fact = _threshold_fact("chain_fact_diff", "Is {ref} positive?", 0.0)


pct_fact = _threshold_fact("chain_fact_pct", "Is {ref} above 50 percent?", 50.0)


ratio_fact = _threshold_fact("chain_fact_ratio", "Is {ref} greater than 2?", 2.0)


corr_fact = _threshold_fact(
    "chain_fact_corr", "Is {ref} above 0.3, a positive association of at least moderate strength?", 0.3
)


days_fact = _threshold_fact("chain_fact_days", "Is {ref} more than 30?", 30.0)


TRANSITIONS: dict[str, tuple] = {
    "group": (
        group_mean,
        group_mode,
        group_count,
        group_distinct,
        group_spread,
        group_gap,
        group_clean_median,
        group_flag_count,
        group_corr,
        group_stratified_gap,
        group_span_days,
    ),
    "level": (level_count_above, level_mode_above, level_diff_median, level_percentile, level_ratio_max, level_fact),
    "spread": (spread_outliers, spread_cv),
    "count": (count_pct, count_fact),
    "distinct": (),
    "diff": (diff_pct, diff_fact),
    "pct": (pct_fact,),
    "ratio": (ratio_fact,),
    "corr": (corr_fact,),
    "days": (days_fact,),
    "bool": (),
}


# The kind each step yields, known before it runs: a chain that must go on never takes a step whose
# value nothing can build on.
YIELDS = {
    **{s: "group" for s in (group_mode, level_mode_above)},
    **{s: "level" for s in (group_mean, group_clean_median)},
    **{s: "count" for s in (group_count, group_flag_count, level_count_above, spread_outliers)},
    **{s: "distinct" for s in (group_distinct,)},
    **{s: "spread" for s in (group_spread,)},
    **{s: "diff" for s in (group_gap, group_stratified_gap, level_diff_median)},
    **{s: "pct" for s in (level_percentile, spread_cv, count_pct, diff_pct)},
    **{s: "ratio" for s in (level_ratio_max,)},
    **{s: "corr" for s in (group_corr,)},
    **{s: "days" for s in (group_span_days,)},
    **{s: "bool" for s in (level_fact, count_fact, diff_fact, pct_fact, ratio_fact, corr_fact, days_fact)},
}


def can_continue(step) -> bool:
    return bool(TRANSITIONS[YIELDS[step]])
