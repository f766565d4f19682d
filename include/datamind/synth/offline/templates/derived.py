"""Questions that derive something first: domain-specific measures, multi-hop reasoning, time axes,
engineered features and preprocessing pipelines."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd

from datamind.data_source import qi, ql
from datamind.synth.offline.columns import TableView
from datamind.synth.offline.generators import (
    Task,
    an,
    c,
    fmt,
    iso_days,
    missing_counts,
    sample,
    template,
    unique_top,
)

# -- domain specific ---------------------------------------------------------------------------


@template("domain_specific")
def dom_share(view, rng):
    df = view.df
    for m, g in sample(itertools.product(view.additive, view.groups), rng):
        s = df[m].dropna()
        if m == g or s.empty or (s < 0).any() or s.sum() <= 0:
            continue
        for v in view.group_values(g)[:1]:
            yield Task(
                "domain_specific",
                "dom_share",
                f"What percentage of the total {m} is contributed by records with {g} {fmt(v)}?",
                f"Share of {m} (a non-negative quantity) attributable to one {g} group, in percent.",
                f"answer = round(float(df.loc[{c(g)} == {v!r}, {m!r}].sum() / {c(m)}.sum() * 100), 2)",
                f"SELECT ROUND(100.0 * (SELECT SUM({qi(m)}) FROM {{src}} WHERE {qi(g)} = {ql(v)}) / "
                f"(SELECT SUM({qi(m)}) FROM {{src}}), 2)",
                params={"m": m, "g": g, "v": v},
            )


NP = ("import numpy as np",)
_PRICE = re.compile(r"(^|[_\s.])(close|adj close|price|open|high|low|kurs|preis)($|[_\s.])", re.I)


@template("domain_specific")
def dom_period_return(view, rng):
    df = view.df
    prices = [m for m in view.measures if _PRICE.search(m) and (df[m].dropna() > 0).all()]
    for m, d in sample(itertools.product(prices, view.dates), rng, 2):
        yield Task(
            "domain_specific",
            "dom_period_return",
            f"Treating {m} as a price series ordered by {d}, what is the average period-over-period return in percent?",
            f"Sort by {d}, take the percentage change of {m} between consecutive records, and average it.",
            f"t = df.assign(_t=pd.to_datetime({c(d)}, errors='coerce', format='mixed')).dropna(subset=['_t', {m!r}])\n"
            f"t = t.sort_values('_t', kind='mergesort')\n"
            f"answer = round(float(t[{m!r}].pct_change().mean() * 100), 4)",
            params={"m": m, "d": d},
            alt=(
                (
                    f"t = df.assign(_t=pd.to_datetime({c(d)}, errors='coerce', format='mixed'))\n"
                    f"t = t.dropna(subset=['_t', {m!r}])\n"
                    "order = np.argsort(t['_t'].to_numpy(), kind='stable')\n"
                    f"p = t[{m!r}].to_numpy(dtype=float)[order]\n"
                    "answer = round(float(np.mean(p[1:] / p[:-1] - 1) * 100), 4)",
                    NP,
                ),
                (
                    f"t = df.assign(_t=pd.to_datetime({c(d)}, errors='coerce', format='mixed'))\n"
                    f"t = t.dropna(subset=['_t', {m!r}])\n"
                    f"rows = sorted(zip(t['_t'], range(len(t)), t[{m!r}]))\n"
                    "prices = [float(v) for _, _, v in rows]\n"
                    "returns = [b / a - 1 for a, b in zip(prices, prices[1:])]\n"
                    "answer = round(sum(returns) / len(returns) * 100, 4)",
                    (),
                ),
            ),
        )


@template("domain_specific")
def dom_cv(view, rng):
    df = view.df
    for m in sample(view.measures, rng):
        mean = df[m].mean()
        if pd.isna(mean) or abs(mean) < 1e-12:
            continue
        yield Task(
            "domain_specific",
            "dom_cv",
            f"What is the coefficient of variation of {m} (sample standard deviation divided by the mean, in "
            "percent), a standard measure of relative volatility?",
            f"Relative dispersion of {m}: 100 * std / mean.",
            f"answer = round(float({c(m)}.std() / {c(m)}.mean() * 100), 2)",
            params={"m": m},
            duck=f"SELECT ROUND(stddev_samp({qi(m)}) / AVG({qi(m)}) * 100, 2) FROM {{src}}",
            alt=(
                (
                    f"vals = {c(m)}.dropna().to_numpy(dtype=float)\n"
                    "answer = round(float(vals.std(ddof=1) / vals.mean() * 100), 2)",
                    NP,
                ),
            ),
        )


# -- multi-hop numerical reasoning -------------------------------------------------------------


@template("multi_hop_numerical_reasoning")
def mh_top_group_mean(view, rng):
    df = view.df
    for (m1, m2), g in sample(itertools.product(itertools.product(view.additive, view.measures), view.groups), rng):
        if g in (m1, m2) or not unique_top(df.dropna(subset=[g, m1]).groupby(g)[m1].sum()):
            continue
        yield Task(
            "multi_hop_numerical_reasoning",
            "mh_top_group_mean",
            f"First find the {g} with the largest total {m1}; what is the average {m2} among its records?",
            f"Two steps: rank {g} groups by summed {m1}, then average {m2} inside the winner.",
            f"totals = df.dropna(subset=[{g!r}, {m1!r}]).groupby({g!r})[{m1!r}].sum()\n"
            "top = totals.idxmax()\n"
            f"answer = round(float(df.loc[{c(g)} == top, {m2!r}].mean()), 4)",
            f"SELECT ROUND(AVG({qi(m2)}), 4) FROM {{src}} WHERE {qi(g)} = (SELECT {qi(g)} FROM {{src}} "
            f"WHERE {qi(g)} IS NOT NULL AND {qi(m1)} IS NOT NULL GROUP BY {qi(g)} ORDER BY SUM({qi(m1)}) DESC LIMIT 1)",
            params={"m1": m1, "m2": m2, "g": g},
            hops=2,
        )


@template("multi_hop_numerical_reasoning")
def mh_share_above_group_mean(view, rng):
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g:
            continue
        for v in view.group_values(g)[:1]:
            yield Task(
                "multi_hop_numerical_reasoning",
                "mh_share_above_group_mean",
                f"What percentage of all records have {an(m)} {m} above the average {m} of the {g} {fmt(v)} group?",
                "Compute a group mean, use it as a threshold over the whole table, express the count as a percentage.",
                f"threshold = df.loc[{c(g)} == {v!r}, {m!r}].mean()\n"
                f"answer = round(float(({c(m)} > threshold).sum() / len(df) * 100), 2)",
                f"SELECT ROUND(100.0 * SUM(CASE WHEN {qi(m)} > (SELECT AVG({qi(m)}) FROM {{src}} WHERE {qi(g)} = "
                f"{ql(v)}) "
                f"THEN 1 ELSE 0 END) / COUNT(*), 2) FROM {{src}}",
                params={"m": m, "g": g, "v": v},
                hops=3,  # the group's mean, the records above it, their share
            )


# -- time-based --------------------------------------------------------------------------------


def _years_expr(view: TableView, d: str) -> str:
    if d in view.year_columns:
        return c(d)
    return f"pd.to_datetime({c(d)}, errors='coerce', format='mixed').dt.year"


def _years_sql(view: TableView, d: str) -> str:
    """DuckDB's reading of the same year (ISO dates only: other layouts show up as disagreements)."""
    return qi(d) if d in view.year_columns else f"year(TRY_CAST({qi(d)} AS DATE))"


def _years_sqlite(view: TableView, d: str) -> str | None:
    """SQLite's reading of the year: a year column itself, the year of an ISO day; None for other layouts."""
    if d in view.year_columns:
        return f"CAST({qi(d)} AS INTEGER)"  # a year column stored as REAL would print 2019.0
    return f"CAST(strftime('%Y', {qi(d)}) AS INTEGER)" if iso_days(view.df[d]) else None


def _years(view: TableView, d: str) -> pd.Series:
    if d in view.year_columns:
        return view.df[d]
    return pd.to_datetime(view.df[d], errors="coerce", format="mixed").dt.year


def _time_axes(view: TableView) -> list[str]:
    return view.dates + view.year_columns


def _by_year_sql(view: TableView, d: str) -> str | None:
    year = _years_sqlite(view, d)
    if year is None:
        return None
    return f"SELECT {year} AS y FROM {{src}} WHERE {qi(d)} IS NOT NULL GROUP BY y ORDER BY COUNT(*) DESC LIMIT 1"


@template("time_based_calculation")
def time_busiest_year(view, rng):
    for d in sample(_time_axes(view), rng):
        counts = _years(view, d).value_counts()
        if len(counts) < 2 or not unique_top(counts):
            continue
        yield Task(
            "time_based_calculation",
            "time_busiest_year",
            f"Which year has the most records according to {d}?",
            f"Extract the year from {d} and count records per year.",
            f"years = {_years_expr(view, d)}\nanswer = int(years.value_counts().idxmax())",
            _by_year_sql(view, d),
            params={"d": d},
            duck=f"SELECT y FROM (SELECT {_years_sql(view, d)} AS y FROM {{src}}) WHERE y IS NOT NULL "
            "GROUP BY y ORDER BY COUNT(*) DESC LIMIT 1",
        )


def _growth_sql(year: str | None, d: str, m: str) -> str | None:
    """SQL for the change of the yearly mean from the first year to the last, in percent: averages per year,
    then the first and the last of them; ``year`` is the engine's reading of the year (None: it cannot read it)."""
    if year is None:
        return None
    first, last = "(SELECT a FROM per_year ORDER BY y LIMIT 1)", "(SELECT a FROM per_year ORDER BY y DESC LIMIT 1)"
    return (
        f"WITH per_year AS (SELECT {year} AS y, AVG({qi(m)}) AS a FROM {{src}} WHERE {qi(d)} IS NOT NULL "
        f"AND {qi(m)} IS NOT NULL GROUP BY y HAVING y IS NOT NULL) "
        f"SELECT ROUND(({last} - {first}) * 100.0 / {first}, 2)"
    )


@template("time_based_calculation")
def time_growth(view, rng):
    df = view.df
    for d, m in sample(itertools.product(_time_axes(view), view.measures), rng):
        t = df.assign(_y=_years(view, d)).dropna(subset=["_y", m])
        means = t.groupby("_y")[m].mean()
        if len(means) < 2 or np.isclose(means.iloc[0], 0):
            continue
        yield Task(
            "time_based_calculation",
            "time_growth",
            f"By what percentage did the average {m} change from the earliest year to the latest year (years taken "
            f"from {d})?",
            f"Average {m} per year; growth = (last - first) / first * 100.",
            f"t = df.assign(_y={_years_expr(view, d)}).dropna(subset=['_y', {m!r}])\n"
            f"means = t.groupby('_y')[{m!r}].mean().sort_index()\n"
            "answer = round(float((means.iloc[-1] - means.iloc[0]) / means.iloc[0] * 100), 2)",
            _growth_sql(_years_sqlite(view, d), d, m),
            params={"d": d, "m": m},
            duck=_growth_sql(_years_sql(view, d), d, m),
            alt=(
                (
                    f"t = df.assign(_y={_years_expr(view, d)}).dropna(subset=['_y', {m!r}])\n"
                    f"ys, vs = t['_y'].to_numpy(), t[{m!r}].to_numpy(dtype=float)\n"
                    "years = np.unique(ys)\n"
                    "first, last = vs[ys == years[0]].mean(), vs[ys == years[-1]].mean()\n"
                    "answer = round(float((last - first) / first * 100), 2)",
                    NP,
                ),
                (
                    f"t = df.assign(_y={_years_expr(view, d)}).dropna(subset=['_y', {m!r}])\n"
                    "sums, counts = {}, {}\n"
                    f"for y, v in zip(t['_y'], t[{m!r}]):\n"
                    "    sums[y] = sums.get(y, 0.0) + float(v)\n"
                    "    counts[y] = counts.get(y, 0) + 1\n"
                    "years = sorted(sums)\n"
                    "first, last = sums[years[0]] / counts[years[0]], sums[years[-1]] / counts[years[-1]]\n"
                    "answer = round((last - first) / first * 100, 2)",
                    (),
                ),
            ),
        )


@template("time_based_calculation")
def time_best_month(view, rng):
    df = view.df
    for d, m in sample(itertools.product(view.dates, view.additive), rng):
        t = df.assign(_m=pd.to_datetime(df[d], errors="coerce", format="mixed").dt.to_period("M")).dropna(
            subset=["_m", m]
        )
        totals = t.groupby("_m")[m].sum()
        if len(totals) < 2 or not unique_top(totals):
            continue
        yield Task(
            "time_based_calculation",
            "time_best_month",
            f"Which calendar month (YYYY-MM, from {d}) has the highest total {m}?",
            f"Group records by the month of {d}, sum {m}, report the top month.",
            f"t = df.assign(_m=pd.to_datetime({c(d)}, errors='coerce', format='mixed').dt.to_period('M'))\n"
            f"t = t.dropna(subset=['_m', {m!r}])\n"
            f"answer = str(t.groupby('_m')[{m!r}].sum().idxmax())",
            # a month total is a GROUP BY an analyst writes in SQL where SQLite reads the days (ISO text)
            f"SELECT strftime('%Y-%m', {qi(d)}) AS mo FROM {{src}} WHERE strftime('%Y-%m', {qi(d)}) IS NOT NULL "
            f"AND {qi(m)} IS NOT NULL GROUP BY mo ORDER BY SUM({qi(m)}) DESC LIMIT 1"
            if iso_days(view.df[d])
            else None,
            params={"d": d, "m": m},
            alt=(
                (
                    f"stamps = pd.to_datetime({c(d)}, errors='coerce', format='mixed')\n"
                    f"keep = stamps.notna() & {c(m)}.notna()\n"
                    f"totals = {c(m)}[keep].groupby(stamps[keep].dt.strftime('%Y-%m')).sum()\n"
                    "answer = totals.idxmax()",
                    (),
                ),
                (
                    f"stamps = pd.to_datetime({c(d)}, errors='coerce', format='mixed')\n"
                    f"keep = (stamps.notna() & {c(m)}.notna()).to_numpy()\n"
                    "months = stamps[keep].dt.strftime('%Y-%m').to_numpy()\n"
                    f"vals = {c(m)}.to_numpy(dtype=float)[keep]\n"
                    "keys = np.unique(months)\n"
                    "answer = str(keys[int(np.argmax([vals[months == k].sum() for k in keys]))])",
                    NP,
                ),
            ),
            duck=f"SELECT strftime(TRY_CAST({qi(d)} AS DATE), '%Y-%m') AS mo FROM {{src}} "
            f"WHERE mo IS NOT NULL AND {qi(m)} IS NOT NULL GROUP BY mo ORDER BY SUM({qi(m)}) DESC LIMIT 1",
        )


@template("time_based_calculation")
def time_span_days(view, rng):
    for d in sample(view.dates, rng):
        t = pd.to_datetime(view.df[d], errors="coerce", format="mixed").dropna()
        if t.nunique() < 2:
            continue
        yield Task(
            "time_based_calculation",
            "time_span_days",
            f"How many days lie between the earliest and the latest {d}?",
            f"Parse {d} as dates and take max - min in whole days.",
            f"t = pd.to_datetime({c(d)}, errors='coerce', format='mixed').dropna()\n"
            "answer = int((t.max() - t.min()).days)",
            f"SELECT CAST(MAX(julianday({qi(d)})) - MIN(julianday({qi(d)})) AS INTEGER) FROM {{src}}"
            if iso_days(view.df[d])
            else None,
            params={"d": d},
            alt=(
                (
                    f"v = pd.to_datetime({c(d)}, errors='coerce', format='mixed').dropna().to_numpy()\n"
                    "answer = int((v.max() - v.min()) // np.timedelta64(1, 'D'))",
                    NP,
                ),
                (
                    f"stamps = pd.to_datetime({c(d)}, errors='coerce', format='mixed').dropna()\n"
                    "stamps = sorted(stamps.dt.to_pydatetime())\n"
                    "answer = (stamps[-1] - stamps[0]).days",
                    (),
                ),
            ),
        )


# -- feature engineering -----------------------------------------------------------------------


@template("feature_engineering")
def fe_ratio(view, rng):
    df = view.df
    for a, b in sample(itertools.permutations(view.measures, 2), rng):
        if (df[b].dropna() != 0).sum() < 5:
            continue
        yield Task(
            "feature_engineering",
            "fe_ratio",
            f"Create a new feature equal to {a} divided by {b}, leaving out rows where {b} is zero or missing. What "
            "is the mean of this feature?",
            f"Derived ratio column {a}/{b}, then its mean.",
            f"t = df[({c(b)} != 0) & {c(b)}.notna() & {c(a)}.notna()]\n"
            f"answer = round(float((t[{a!r}] / t[{b!r}]).mean()), 4)",
            # (SQLite divides integers as integers: the numerator is made real first)
            f"SELECT ROUND(AVG(CAST({qi(a)} AS REAL) / {qi(b)}), 4) FROM {{src}} "
            f"WHERE {qi(b)} <> 0 AND {qi(b)} IS NOT NULL AND {qi(a)} IS NOT NULL",
            params={"a": a, "b": b},
            duck=(
                f"SELECT ROUND(AVG({qi(a)} / {qi(b)}), 4) FROM {{src}} "
                f"WHERE {qi(b)} <> 0 AND {qi(b)} IS NOT NULL AND {qi(a)} IS NOT NULL"
            ),
        )


@template("feature_engineering")
def fe_zscore_max(view, rng):
    for m in sample(view.measures, rng):
        if view.df[m].dropna().std() == 0:
            continue
        yield Task(
            "feature_engineering",
            "fe_zscore_max",
            f"Standardize {m} into z-scores using its mean and sample standard deviation. What is the largest z-score?",
            f"z = ({m} - mean) / std; report max z.",
            f"s = {c(m)}\nanswer = round(float(((s - s.mean()) / s.std()).max()), 4)",
            params={"m": m},
            duck=(
                f"SELECT ROUND(MAX(({qi(m)} - (SELECT AVG({qi(m)}) FROM {{src}})) / "
                f"(SELECT stddev_samp({qi(m)}) FROM {{src}})), 4) FROM {{src}}"
            ),
        )


@template("feature_engineering")
def fe_quartile_bin(view, rng):
    for m in sample(view.measures, rng):
        s = view.df[m].dropna()
        try:
            bins = pd.qcut(s, 4, labels=False)
        except ValueError:
            continue
        if bins.nunique() != 4:
            continue
        yield Task(
            "feature_engineering",
            "fe_quartile_bin",
            f"Bin {m} into four equal-frequency (quartile) bins. How many records fall into the highest bin?",
            f"Quantile binning of {m} with pandas qcut, count of the top bin.",
            f"bins = pd.qcut({c(m)}.dropna(), 4, labels=False)\nanswer = int((bins == 3).sum())",
            params={"m": m},
            duck=f"SELECT COUNT(*) FROM {{src}} WHERE {qi(m)} > (SELECT quantile_cont({qi(m)}, 0.75) FROM {{src}})",
            alt=(
                (
                    f"vals = {c(m)}.dropna().to_numpy(dtype=float)\n"
                    "answer = int((vals > np.quantile(vals, 0.75)).sum())",
                    NP,
                ),
            ),
        )


@template("feature_engineering")
def fe_month(view, rng):
    for d in sample(view.dates, rng):
        months = pd.to_datetime(view.df[d], errors="coerce", format="mixed").dt.month.value_counts()
        if len(months) < 2 or not unique_top(months):
            continue
        yield Task(
            "feature_engineering",
            "fe_month",
            f"Derive a month-number feature from {d} (its calendar month as a number). Which month occurs most often?",
            f"Extract month from {d}; mode of the new feature.",
            f"months = pd.to_datetime({c(d)}, errors='coerce', format='mixed').dt.month\n"
            "answer = int(months.value_counts().idxmax())",
            f"SELECT CAST(strftime('%m', {qi(d)}) AS INTEGER) AS month FROM {{src}} WHERE {qi(d)} IS NOT NULL "
            "GROUP BY month ORDER BY COUNT(*) DESC LIMIT 1"
            if iso_days(view.df[d])
            else None,
            params={"d": d},
            alt=(
                (
                    f"from collections import Counter\n\n"
                    f"stamps = pd.to_datetime({c(d)}, errors='coerce', format='mixed').dropna()\n"
                    "answer = Counter(ts.month for ts in stamps).most_common(1)[0][0]",
                    (),
                ),
                (
                    f"months = pd.to_datetime({c(d)}, errors='coerce', format='mixed').dropna().dt.month.to_numpy()\n"
                    "answer = int(np.argmax(np.bincount(months, minlength=13)))",
                    NP,
                ),
            ),
        )


# -- comprehensive preprocessing ---------------------------------------------------------------


@template("comprehensive_data_preprocessing")
def prep_dedup_dropna(view, rng):
    df = view.df
    # a column whose blanks are partly text ('None', '-') has more missing values than dropna sees: not asked
    placeholders = missing_counts(df) - df.isna().sum()
    with_nulls = [n for n in df.columns if df[n].isna().any() and not placeholders[n]]
    # Columns that can be missing make the question meaningful; else prefer analysed columns over keys.
    chosen = [str(n) for n in (with_nulls or view.measures + view.groups + list(df.columns)) if not placeholders[n]]
    chosen = list(dict.fromkeys(chosen))[:2]
    if not chosen or len(df.drop_duplicates().dropna(subset=chosen)) == len(df):
        return  # cleaning that removes nothing leaves the row count the first look at the data printed
    yield Task(
        "comprehensive_data_preprocessing",
        "prep_dedup_dropna",
        f"After removing exact duplicate rows and then dropping rows with a missing value in {' or '.join(chosen)}, "
        "how many records remain?",
        "Deduplicate, then filter incomplete rows on the named columns; count the rest.",
        f"clean = df.drop_duplicates().dropna(subset={chosen!r})\nanswer = int(len(clean))",
        params={"cols": chosen},
        duck="SELECT COUNT(*) FROM (SELECT DISTINCT * FROM {src}) WHERE "
        + " AND ".join(f"{qi(n)} IS NOT NULL" for n in chosen),
    )


@template("comprehensive_data_preprocessing")
def prep_impute_scale(view, rng):
    df = view.df
    ordered = sorted(view.measures, key=lambda m: -int(df[m].isna().sum()))
    for m in ordered[:1] + sample(ordered[1:], rng, 1):
        s = df[m]
        if s.max() == s.min():
            continue
        yield Task(
            "comprehensive_data_preprocessing",
            "prep_impute_scale",
            f"Fill the missing values of {m} with its median, then min-max scale it to the range 0-1. What is the "
            "mean of the scaled column?",
            f"Median imputation followed by min-max normalisation of {m}.",
            f"s = {c(m)}.fillna({c(m)}.median())\nscaled = (s - s.min()) / (s.max() - s.min())\n"
            "answer = round(float(scaled.mean()), 4)",
            params={"m": m},
            duck=(
                f"WITH f AS (SELECT COALESCE({qi(m)}, (SELECT MEDIAN({qi(m)}) FROM {{src}})) AS v FROM {{src}}) "
                "SELECT ROUND((AVG(v) - MIN(v)) / (MAX(v) - MIN(v)), 4) FROM f"
            ),
            alt=(
                (
                    f"vals = {c(m)}.to_numpy(dtype=float)\n"
                    "vals = np.where(np.isnan(vals), np.nanmedian(vals), vals)\n"
                    "answer = round(float(((vals - vals.min()) / (vals.max() - vals.min())).mean()), 4)",
                    NP,
                ),
            ),
        )


@template("comprehensive_data_preprocessing")
def prep_onehot(view, rng):
    for g in sample(view.groups, rng):
        for v in view.group_values(g)[:1]:
            yield Task(
                "comprehensive_data_preprocessing",
                "prep_onehot",
                f"One-hot encode {g} (one indicator column per distinct non-missing value). How many indicator "
                f"columns are created, and how many records have a 1 in the column for {fmt(v)}?",
                f"Categorical encoding of {g}; answer as 'columns, ones'.",
                f"dummies = pd.get_dummies({c(g)})\nones = int(dummies[{v!r}].sum())\n"
                "answer = f'{dummies.shape[1]}, {ones}'",
                params={"g": g, "v": v},
                duck=f"SELECT COUNT(DISTINCT {qi(g)}), COUNT(*) FILTER (WHERE {qi(g)} = {ql(v)}) FROM {{src}}",
                alt=(
                    (
                        f"values = {c(g)}.dropna()\nones = int((values == {v!r}).sum())\n"
                        "answer = f'{values.nunique()}, {ones}'",
                        (),
                    ),
                ),
            )
