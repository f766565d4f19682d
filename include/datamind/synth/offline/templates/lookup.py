"""Retrieval and arithmetic questions: aggregation, ranking, counting, comparison, arithmetic,
descriptive analysis and fact checking."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from datamind.data_source import qi, ql
from datamind.synth.offline.columns import python_scalar
from datamind.synth.offline.generators import (
    GROUP_MEAN_SORT,
    MISSING_COUNTS,
    PLACEHOLDERS,
    Task,
    an,
    c,
    fmt,
    missing_counts,
    ranked_mean,
    sample,
    template,
    two_values,
    unique_top,
)

# -- aggregation -------------------------------------------------------------------------------


@template("aggregation")
def agg_mean(view, rng):
    for m in sample(view.measures, rng):
        yield Task(
            "aggregation",
            "agg_mean",
            f"What is the average {m} across all records?",
            f"Mean of the numeric column {m}, ignoring missing values.",
            f"answer = round(float({c(m)}.mean()), 4)",
            f"SELECT ROUND(AVG({qi(m)}), 4) FROM {{src}}",
            params={"m": m},
        )


@template("aggregation")
def agg_group_sum(view, rng):
    for m, g in sample(itertools.product(view.additive, view.groups), rng):
        if m == g:
            continue
        for v in view.group_values(g)[:1]:
            yield Task(
                "aggregation",
                "agg_group_sum",
                f"What is the total {m} for records where {g} is {fmt(v)}?",
                f"Sum of {m} restricted to one {g} group.",
                f"answer = round(float(df.loc[{c(g)} == {v!r}, {m!r}].sum()), 4)",
                f"SELECT ROUND(SUM({qi(m)}), 4) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
                params={"m": m, "g": g, "v": v},
            )


@template("aggregation")
def agg_group_max(view, rng):
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g:
            continue
        vals = [v for v in view.group_values(g) if view.df.loc[view.df[g] == v, m].notna().any()]
        for v in vals[1:2] or vals[:1]:
            yield Task(
                "aggregation",
                "agg_group_max",
                f"What is the highest {m} recorded among records with {g} equal to {fmt(v)}?",
                f"Maximum of {m} within one {g} group.",
                f"answer = df.loc[{c(g)} == {v!r}, {m!r}].max()\nanswer = round(float(answer), 4)",
                f"SELECT ROUND(MAX({qi(m)}), 4) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
                params={"m": m, "g": g, "v": v},
            )


# -- ranking -----------------------------------------------------------------------------------


@template("ranking")
def rank_top_mean(view, rng):
    df = view.df
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g or not ranked_mean(df, g, m):
            continue
        yield Task(
            "ranking",
            "rank_top_mean",
            f"Which {g} has the highest average {m}?",
            f"Group by {g}, average {m}, report the group with the largest mean.",
            GROUP_MEAN_SORT.format(g=repr(g), m=repr(m)) + f"answer = means[{g!r}].iloc[0]",
            f"SELECT {qi(g)} FROM {{src}} WHERE {qi(g)} IS NOT NULL AND {qi(m)} IS NOT NULL "
            f"GROUP BY {qi(g)} ORDER BY AVG({qi(m)}) DESC, {qi(g)} ASC LIMIT 1",
            params={"m": m, "g": g},
        )


@template("ranking")
def rank_top3_total(view, rng):
    df = view.df
    for m, g in sample(itertools.product(view.additive, view.groups), rng):
        if m == g:
            continue
        totals = df.dropna(subset=[g, m]).groupby(g)[m].sum().sort_values(ascending=False)
        if len(totals) < 4 or np.isclose(totals.iloc[2], totals.iloc[3]) or not unique_top(totals.iloc[:3]):
            continue
        yield Task(
            "ranking",
            "rank_top3_total",
            f"List the three {g} values with the largest total {m}, from highest to lowest.",
            f"Sum {m} per {g} and return the top three group labels in descending order.",
            f"totals = df.dropna(subset=[{g!r}, {m!r}]).groupby({g!r})[{m!r}].sum()\n"
            f"top = totals.reset_index().sort_values([{m!r}, {g!r}], ascending=[False, True]).head(3)\n"
            f"answer = ', '.join(str(x) for x in top[{g!r}])",
            f"SELECT {qi(g)} FROM {{src}} WHERE {qi(g)} IS NOT NULL AND {qi(m)} IS NOT NULL "
            f"GROUP BY {qi(g)} ORDER BY SUM({qi(m)}) DESC, {qi(g)} ASC LIMIT 3",
            params={"m": m, "g": g},
        )


@template("ranking")
def rank_row_max(view, rng):
    df = view.df
    labels = [
        n
        for n, col in view.columns.items()
        if col.kind in ("text", "categorical", "id") and col.n_unique == view.n_rows
    ]
    for m, lab in sample(itertools.product(view.measures, labels), rng):
        if df[m].dropna().empty or not unique_top(df[m]):
            continue
        yield Task(
            "ranking",
            "rank_row_max",
            f"Which {lab} has the highest {m}?",
            f"Find the single record with the largest {m} and report its {lab}.",
            f"answer = df.loc[{c(m)}.idxmax(), {lab!r}]",
            f"SELECT {qi(lab)} FROM {{src}} WHERE {qi(m)} IS NOT NULL ORDER BY {qi(m)} DESC LIMIT 1",
            params={"m": m, "label": lab},
        )


# -- counting ----------------------------------------------------------------------------------


@template("counting")
def count_eq(view, rng):
    for g in sample(view.groups, rng):
        for v in view.group_values(g)[1:2]:
            yield Task(
                "counting",
                "count_eq",
                f"How many records have {g} equal to {fmt(v)}?",
                f"Filter on {g} and count the matching rows.",
                f"answer = int(({c(g)} == {v!r}).sum())",
                f"SELECT COUNT(*) FROM {{src}} WHERE {qi(g)} = {ql(v)}",
                params={"g": g, "v": v},
            )


@template("counting")
def count_above_mean(view, rng):
    for m in sample(view.measures, rng):
        yield Task(
            "counting",
            "count_above_mean",
            f"How many records have {an(m)} {m} greater than the average {m}?",
            f"Compute the mean of {m}, then count rows strictly above it.",
            f"answer = int(({c(m)} > {c(m)}.mean()).sum())",
            f"SELECT COUNT(*) FROM {{src}} WHERE {qi(m)} > (SELECT AVG({qi(m)}) FROM {{src}})",
            params={"m": m},
        )


@template("counting")
def count_distinct(view, rng):
    for g in sample(view.groups, rng):
        yield Task(
            "counting",
            "count_distinct",
            f"How many distinct {g} values appear in the data?",
            f"Number of unique non-missing values of {g}.",
            f"answer = int({c(g)}.nunique())",
            f"SELECT COUNT(DISTINCT {qi(g)}) FROM {{src}}",
            params={"g": g},
        )


# -- comparison --------------------------------------------------------------------------------


@template("comparison")
def cmp_mean_diff(view, rng):
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g:
            continue
        for a, b in two_values(view, g, m)[:1]:
            yield Task(
                "comparison",
                "cmp_mean_diff",
                f"What is the difference between the average {m} of records with {g} {fmt(a)} and those with {g} "
                f"{fmt(b)} (first minus second)?",
                f"Mean {m} for two {g} groups, subtracted.",
                f"a = df.loc[{c(g)} == {a!r}, {m!r}].mean()\nb = df.loc[{c(g)} == {b!r}, {m!r}].mean()\n"
                f"answer = round(float(a - b), 4)",
                f"SELECT ROUND((SELECT AVG({qi(m)}) FROM {{src}} WHERE {qi(g)} = {ql(a)}) - "
                f"(SELECT AVG({qi(m)}) FROM {{src}} WHERE {qi(g)} = {ql(b)}), 4)",
                params={"m": m, "g": g, "a": a, "b": b},
            )


@template("comparison")
def cmp_median_higher(view, rng):
    df = view.df
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g:
            continue
        for a, b in two_values(view, g, m)[:1]:
            ma, mb = df.loc[df[g] == a, m].median(), df.loc[df[g] == b, m].median()
            if pd.isna(ma) or pd.isna(mb) or np.isclose(ma, mb):
                continue
            yield Task(
                "comparison",
                "cmp_median_higher",
                f"Between {g} {fmt(a)} and {g} {fmt(b)}, which has the higher median {m}?",
                f"Median {m} of each of the two {g} groups; name the larger.",
                f"ma = df.loc[{c(g)} == {a!r}, {m!r}].median()\nmb = df.loc[{c(g)} == {b!r}, {m!r}].median()\n"
                f"answer = {a!r} if ma > mb else {b!r}",
                params={"m": m, "g": g, "a": a, "b": b},
                duck=f"SELECT CASE WHEN (SELECT MEDIAN({qi(m)}) FROM {{src}} WHERE {qi(g)} = {ql(a)}) > "
                f"(SELECT MEDIAN({qi(m)}) FROM {{src}} WHERE {qi(g)} = {ql(b)}) THEN {ql(a)} ELSE {ql(b)} END",
                alt=(
                    (
                        f"vals, groups = {c(m)}.to_numpy(dtype=float), {c(g)}.to_numpy()\n"
                        f"ma = np.nanmedian(vals[groups == {a!r}])\n"
                        f"mb = np.nanmedian(vals[groups == {b!r}])\n"
                        f"answer = {a!r} if ma > mb else {b!r}",
                        ("import numpy as np",),
                    ),
                ),
            )


# -- arithmetic --------------------------------------------------------------------------------


@template("arithmetic_calculation")
def arith_ratio(view, rng):
    df = view.df
    pairs = [(a, b) for a, b in itertools.permutations(view.additive, 2) if view.same_unit(a, b)]
    for a, b in sample(pairs, rng):
        if np.isclose(df[b].sum(), 0):
            continue
        yield Task(
            "arithmetic_calculation",
            "arith_ratio",
            f"What is the ratio of the total {a} to the total {b}?",
            f"sum({a}) / sum({b}).",
            f"answer = round(float({c(a)}.sum() / {c(b)}.sum()), 4)",
            f"SELECT ROUND(1.0 * SUM({qi(a)}) / SUM({qi(b)}), 4) FROM {{src}}",
            params={"a": a, "b": b},
        )


@template("arithmetic_calculation")
def arith_range(view, rng):
    for m in sample(view.measures, rng):
        yield Task(
            "arithmetic_calculation",
            "arith_range",
            f"What is the difference between the largest and the smallest {m}?",
            f"max({m}) - min({m}).",
            f"answer = round(float({c(m)}.max() - {c(m)}.min()), 4)",
            f"SELECT ROUND(MAX({qi(m)}) - MIN({qi(m)}), 4) FROM {{src}}",
            params={"m": m},
        )


@template("arithmetic_calculation")
def arith_pair_total(view, rng):
    for m, g in sample(itertools.product(view.additive, view.groups), rng):
        if m == g:
            continue
        for a, b in two_values(view, g, m)[:1]:
            yield Task(
                "arithmetic_calculation",
                "arith_pair_total",
                f"What is the combined total {m} of records with {g} {fmt(a)} and records with {g} {fmt(b)}?",
                f"Add the {m} sums of two {g} groups.",
                f"answer = round(float(df.loc[{c(g)}.isin([{a!r}, {b!r}]), {m!r}].sum()), 4)",
                f"SELECT ROUND(SUM({qi(m)}), 4) FROM {{src}} WHERE {qi(g)} IN ({ql(a)}, {ql(b)})",
                params={"m": m, "g": g, "a": a, "b": b},
            )


# -- descriptive -------------------------------------------------------------------------------


@template("descriptive_analysis")
def desc_min_max_mean(view, rng):
    for m in sample(view.measures, rng):
        yield Task(
            "descriptive_analysis",
            "desc_min_max_mean",
            f"What are the minimum, maximum and mean of {m}? Give them in that order, separated by commas.",
            f"Basic summary of {m}; mean rounded to 4 decimals.",
            f"s = {c(m)}\n"
            "answer = f'{round(float(s.min()), 4)}, {round(float(s.max()), 4)}, {round(float(s.mean()), 4)}'",
            f"SELECT ROUND(MIN({qi(m)}), 4), ROUND(MAX({qi(m)}), 4), ROUND(AVG({qi(m)}), 4) FROM {{src}}",
            params={"m": m},
        )


@template("descriptive_analysis")
def desc_shape_missing(view, rng):
    nulls = missing_counts(view.df)
    top = nulls.sort_values(ascending=False, kind="stable")
    if top.iloc[0] > 0 and len(top) > 1 and top.iloc[0] == top.iloc[1]:
        return
    # the program counts; none of its texts holds the answer (a reference that writes 'none' verifies itself)
    body = MISSING_COUNTS + (
        "most = missing.idxmax() if missing.max() > 0 else 'none'\n"
        "answer = f'{df.shape[0]} rows, {df.shape[1]} columns, {most}'"
    )
    alts = (
        (
            f"placeholders = set({PLACEHOLDERS!r})\n"
            "def is_missing(v):\n"
            "    if isinstance(v, str):\n"
            "        return v.strip().lower() in placeholders\n"
            "    return bool(pd.isna(v))\n"
            "counts = {col: sum(is_missing(v) for v in df[col]) for col in df.columns}\n"
            "most = max(counts, key=counts.get) if max(counts.values()) > 0 else 'none'\n"
            "answer = f'{len(df)} rows, {len(df.columns)} columns, {most}'",
            (),
        ),
        (
            f"placeholders = {PLACEHOLDERS!r}\n"
            "cells = df.astype(object)\n"
            "blank = cells.apply(lambda s: s.map(lambda v: isinstance(v, str) and v.strip().lower() in placeholders))\n"
            "missing = (df.isna() | blank).to_numpy().sum(axis=0)\n"
            "most = df.columns[int(np.argmax(missing))] if missing.max() > 0 else 'none'\n"
            "n_rows, n_cols = df.shape\n"
            "answer = f'{n_rows} rows, {n_cols} columns, {most}'",
            ("import numpy as np",),
        ),
    )
    yield Task(
        "descriptive_analysis",
        "desc_shape_missing",
        "How many rows and columns does the table have, and which column has the most missing values? Count empty "
        "cells and placeholder text such as 'None', 'NA', 'N/A', 'null', '-' or '?' as missing, and answer 'none' if "
        "nothing is missing.",
        "Structure overview: shape and the column with the most gaps, placeholder text included.",
        body,
        params={},
        alt=alts,
    )


@template("descriptive_analysis")
def desc_mode(view, rng):
    df = view.df
    for g in sample(view.groups, rng):
        counts = df[g].value_counts()
        if not unique_top(counts):
            continue
        yield Task(
            "descriptive_analysis",
            "desc_mode",
            f"What is the most common value of {g}, and how many records have it?",
            f"Mode of {g} with its frequency, as 'value, count'.",
            f"counts = {c(g)}.value_counts()\nanswer = f'{{counts.index[0]}}, {{int(counts.iloc[0])}}'",
            f"SELECT {qi(g)}, COUNT(*) FROM {{src}} WHERE {qi(g)} IS NOT NULL GROUP BY {qi(g)} ORDER BY COUNT(*) "
            "DESC LIMIT 1",
            params={"g": g},
        )


# -- fact checking -----------------------------------------------------------------------------


@template("fact_checking")
def fact_higher_mean(view, rng):
    df = view.df
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g:
            continue
        for a, b in two_values(view, g, m)[:1]:
            if np.isclose(df.loc[df[g] == a, m].mean(), df.loc[df[g] == b, m].mean()):
                continue
            yield Task(
                "fact_checking",
                "fact_higher_mean",
                f"Is it true that records with {g} {fmt(a)} have a higher average {m} than records with {g} "
                f"{fmt(b)}? Answer Yes or No.",
                f"Verify a claim by comparing two group means of {m}.",
                f"a = df.loc[{c(g)} == {a!r}, {m!r}].mean()\nb = df.loc[{c(g)} == {b!r}, {m!r}].mean()\n"
                "answer = 'Yes' if a > b else 'No'",
                f"SELECT CASE WHEN (SELECT AVG({qi(m)}) FROM {{src}} WHERE {qi(g)} = {ql(a)}) > "
                f"(SELECT AVG({qi(m)}) FROM {{src}} WHERE {qi(g)} = {ql(b)}) THEN 'Yes' ELSE 'No' END",
                params={"m": m, "g": g, "a": a, "b": b},
            )


@template("fact_checking")
def fact_max_owner(view, rng):
    df = view.df
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g or not unique_top(df[m]):
            continue
        owner = df.loc[df[m].idxmax(), g]
        if pd.isna(owner):
            continue
        others = [v for v in view.group_values(g) if v != python_scalar(owner)]
        claim = python_scalar(owner) if (rng.random() < 0.5 or not others) else others[0]
        yield Task(
            "fact_checking",
            "fact_max_owner",
            f"Is it true that the record with the highest {m} has {g} equal to {fmt(claim)}? Answer Yes or No.",
            f"Locate the maximum of {m} and check the claimed {g}.",
            f"answer = 'Yes' if df.loc[{c(m)}.idxmax(), {g!r}] == {claim!r} else 'No'",
            f"SELECT CASE WHEN (SELECT {qi(g)} FROM {{src}} WHERE {qi(m)} IS NOT NULL ORDER BY {qi(m)} DESC LIMIT 1) "
            f"= {ql(claim)} THEN 'Yes' ELSE 'No' END",
            params={"m": m, "g": g, "claim": claim},
        )
