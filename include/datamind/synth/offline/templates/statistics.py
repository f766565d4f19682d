"""Statistical questions: statistical, correlation, causal, impact, anomaly and distribution analysis."""

from __future__ import annotations

import itertools

import pandas as pd

from datamind.data_source import qi, ql
from datamind.synth.offline.generators import (
    Task,
    an,
    c,
    fmt,
    sample,
    template,
    two_values,
    unique_top,
)

NP = ("import numpy as np",)


# -- statistical analysis ----------------------------------------------------------------------


@template("statistical_analysis")
def stat_median(view, rng):
    for m in sample(view.measures, rng):
        yield Task(
            "statistical_analysis",
            "stat_median",
            f"What is the median {m}?",
            f"50th percentile of {m}.",
            f"answer = round(float({c(m)}.median()), 4)",
            params={"m": m},
            duck=f"SELECT ROUND(quantile_cont({qi(m)}, 0.5), 4) FROM {{src}}",
        )


@template("statistical_analysis")
def stat_std(view, rng):
    for m in sample(view.measures, rng):
        yield Task(
            "statistical_analysis",
            "stat_std",
            f"What is the sample standard deviation of {m}?",
            f"Standard deviation of {m} with n-1 in the denominator.",
            f"answer = round(float({c(m)}.std()), 4)",
            params={"m": m},
            duck=f"SELECT ROUND(stddev_samp({qi(m)}), 4) FROM {{src}}",
        )


@template("statistical_analysis")
def stat_iqr(view, rng):
    for m in sample(view.measures, rng):
        yield Task(
            "statistical_analysis",
            "stat_iqr",
            f"What is the interquartile range (Q3 minus Q1, linear interpolation) of {m}?",
            f"Spread of the middle half of {m}.",
            f"answer = round(float({c(m)}.quantile(0.75) - {c(m)}.quantile(0.25)), 4)",
            params={"m": m},
            duck=f"SELECT ROUND(quantile_cont({qi(m)}, 0.75) - quantile_cont({qi(m)}, 0.25), 4) FROM {{src}}",
            alt=(
                (
                    f"vals = {c(m)}.dropna().to_numpy(dtype=float)\n"
                    "q1, q3 = np.percentile(vals, [25, 75])\n"
                    "answer = round(float(q3 - q1), 4)",
                    NP,
                ),
            ),
        )


# -- correlation -------------------------------------------------------------------------------


@template("correlation_analysis")
def corr_pearson(view, rng):
    df = view.df
    for x, y in sample(itertools.combinations(view.measures, 2), rng):
        t = df[[x, y]].dropna()
        if len(t) < 5 or t[x].std() == 0 or t[y].std() == 0:
            continue
        yield Task(
            "correlation_analysis",
            "corr_pearson",
            f"What is the Pearson correlation coefficient between {x} and {y}?",
            f"Linear correlation of {x} and {y} over rows where both are present.",
            f"t = df[[{x!r}, {y!r}]].dropna()\nanswer = round(float(t[{x!r}].corr(t[{y!r}])), 4)",
            params={"x": x, "y": y},
            duck=f"SELECT ROUND(corr({qi(x)}, {qi(y)}), 4) FROM {{src}} "
            f"WHERE {qi(x)} IS NOT NULL AND {qi(y)} IS NOT NULL",
        )


@template("correlation_analysis")
def corr_strongest(view, rng):
    df = view.df
    if len(view.measures) < 3:
        return
    for y in sample(view.measures, rng, 2):
        others = [m for m in view.measures if m != y]
        cors = pd.Series({m: df[[m, y]].dropna().corr().iloc[0, 1] for m in others}).abs().dropna()
        if not unique_top(cors):
            continue
        yield Task(
            "correlation_analysis",
            "corr_strongest",
            f"Among the numeric columns {', '.join(others)}, which has the strongest absolute Pearson correlation "
            f"with {y}?",
            f"Correlate each candidate with {y} (pairwise complete rows) and pick the largest |r|.",
            f"cands = {others!r}\n"
            f"cors = {{m: abs(df[[m, {y!r}]].dropna().corr().iloc[0, 1]) for m in cands}}\n"
            "answer = max(cands, key=lambda m: cors[m])",
            params={"y": y, "others": others},
            duck=" UNION ALL ".join(
                f"SELECT {ql(m)} AS name, ABS(corr({qi(m)}, {qi(y)})) AS r FROM {{src}}" for m in others
            ).join(("SELECT name FROM (", ") AS c ORDER BY r DESC LIMIT 1")),
            alt=(
                (
                    f"best, best_r = None, -1.0\n"
                    f"for m in {others!r}:\n"
                    f"    pair = df[[m, {y!r}]].dropna().to_numpy(dtype=float)\n"
                    "    r = abs(np.corrcoef(pair[:, 0], pair[:, 1])[0, 1])\n"
                    "    if r > best_r:\n"
                    "        best, best_r = m, r\n"
                    "answer = best",
                    NP,
                ),
            ),
        )


# -- causal analysis ---------------------------------------------------------------------------


@template("causal_analysis")
def causal_median_split(view, rng):
    df = view.df
    for x, y in sample(itertools.permutations(view.measures, 2), rng):
        t = df[[x, y]].dropna()
        hi = t[x] > t[x].median()
        if hi.sum() < 3 or (~hi).sum() < 3:
            continue
        yield Task(
            "causal_analysis",
            "causal_median_split",
            f"Treating records with {x} above its median as 'high {x}', how much higher or lower is their average "
            f"{y} than that of the remaining records?",
            f"Naive effect estimate: difference in mean {y} between the above-median and the other {x} records (rows "
            "with both values present).",
            f"t = df[[{x!r}, {y!r}]].dropna()\nhigh = t[{x!r}] > t[{x!r}].median()\n"
            f"answer = round(float(t.loc[high, {y!r}].mean() - t.loc[~high, {y!r}].mean()), 4)",
            params={"x": x, "y": y},
            duck=(
                f"WITH t AS (SELECT {qi(x)} AS x, {qi(y)} AS y FROM {{src}} WHERE {qi(x)} IS NOT NULL AND {qi(y)} IS "
                "NOT NULL), "
                "md AS (SELECT quantile_cont(x, 0.5) AS m FROM t) "
                "SELECT ROUND(AVG(y) FILTER (WHERE x > m) - AVG(y) FILTER (WHERE NOT x > m), 4) FROM t, md"
            ),
        )


@template("causal_analysis")
def causal_stratified(view, rng):
    df = view.df
    for (x, y), g in sample(itertools.product(itertools.permutations(view.measures, 2), view.groups), rng):
        if g in (x, y):
            continue
        body = (
            f"t = df[[{x!r}, {y!r}, {g!r}]].dropna()\n"
            "effects, weights = [], []\n"
            f"for _, part in t.groupby({g!r}):\n"
            f"    high = part[{x!r}] > part[{x!r}].median()\n"
            "    if high.sum() >= 2 and (~high).sum() >= 2:\n"
            f"        effects.append(part.loc[high, {y!r}].mean() - part.loc[~high, {y!r}].mean())\n"
            "        weights.append(len(part))\n"
            "answer = round(float(sum(e * w for e, w in zip(effects, weights)) / sum(weights)), 4)"
        )
        t = df[[x, y, g]].dropna()
        usable = sum(
            1 for _, p in t.groupby(g) if (p[x] > p[x].median()).sum() >= 2 and (p[x] <= p[x].median()).sum() >= 2
        )
        if usable < 2:
            continue
        yield Task(
            "causal_analysis",
            "causal_stratified",
            f"Controlling for {g}, what is the effect of high {x} on {y}? Within each {g} group, take the difference "
            f"in mean {y} between records above and not above the group's median {x}, then average these "
            "differences weighted by group size (skip groups with fewer than 2 records on either side).",
            f"Stratified (adjusted) difference in means, using {g} as the confounder.",
            body,
            params={"x": x, "y": y, "g": g},
            duck=(
                f"WITH t AS (SELECT {qi(x)} AS x, {qi(y)} AS y, {qi(g)} AS g FROM {{src}} WHERE {qi(x)} IS NOT NULL "
                f"AND {qi(y)} IS NOT NULL AND {qi(g)} IS NOT NULL), "
                "md AS (SELECT g, quantile_cont(x, 0.5) AS m, COUNT(*) AS n FROM t GROUP BY g), "
                "e AS (SELECT md.g, md.n, AVG(y) FILTER (WHERE x > m) - AVG(y) FILTER (WHERE NOT x > m) AS eff, "
                "COUNT(*) FILTER (WHERE x > m) AS hi, COUNT(*) FILTER (WHERE NOT x > m) AS lo "
                "FROM t JOIN md ON t.g = md.g GROUP BY md.g, md.n) "
                "SELECT ROUND(SUM(eff * n) / SUM(n), 4) FROM e WHERE hi >= 2 AND lo >= 2"
            ),
            alt=(
                (
                    f"t = df[[{x!r}, {y!r}, {g!r}]].dropna()\n"
                    "num = den = 0.0\n"
                    f"for key in t[{g!r}].unique():\n"
                    f"    part = t[t[{g!r}] == key]\n"
                    f"    xs, ys = part[{x!r}].to_numpy(dtype=float), part[{y!r}].to_numpy(dtype=float)\n"
                    "    high = xs > np.median(xs)\n"
                    "    if high.sum() >= 2 and (~high).sum() >= 2:\n"
                    "        num += (ys[high].mean() - ys[~high].mean()) * len(part)\n"
                    "        den += len(part)\n"
                    "answer = round(float(num / den), 4)",
                    NP,
                ),
            ),
        )


# -- impact ------------------------------------------------------------------------------------


@template("impact_analysis")
def impact_slope(view, rng):
    df = view.df
    for x, y in sample(itertools.permutations(view.measures, 2), rng):
        t = df[[x, y]].dropna()
        if len(t) < 5 or t[x].std() == 0:
            continue
        yield Task(
            "impact_analysis",
            "impact_slope",
            f"By how much does {y} change on average for each one-unit increase in {x}, according to a least-squares "
            "linear fit?",
            f"Slope of the ordinary least squares line of {y} on {x}.",
            f"t = df[[{x!r}, {y!r}]].dropna()\n"
            f"slope = np.polyfit(t[{x!r}].astype(float), t[{y!r}].astype(float), 1)[0]\n"
            "answer = round(float(slope), 4)",
            imports=("import numpy as np",),
            params={"x": x, "y": y},
            duck=f"SELECT ROUND(regr_slope({qi(y)}, {qi(x)}), 4) FROM {{src}} "
            f"WHERE {qi(x)} IS NOT NULL AND {qi(y)} IS NOT NULL",
            alt=(
                (
                    f"t = df[[{x!r}, {y!r}]].dropna().astype(float)\n"
                    f"dx = t[{x!r}] - t[{x!r}].mean()\n"
                    f"answer = round(float((dx * (t[{y!r}] - t[{y!r}].mean())).sum() / (dx ** 2).sum()), 4)",
                    (),
                ),
                (
                    f"from scipy import stats\n\nt = df[[{x!r}, {y!r}]].dropna()\n"
                    f"answer = round(float(stats.linregress(t[{x!r}].astype(float), t[{y!r}].astype(float)).slope), 4)",
                    (),
                ),
            ),
        )


@template("impact_analysis")
def impact_group_lift(view, rng):
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g:
            continue
        for v in view.group_values(g)[:1]:
            yield Task(
                "impact_analysis",
                "impact_group_lift",
                f"How much does belonging to {g} {fmt(v)} raise or lower the average {m} compared with the overall "
                f"average {m}?",
                f"Group mean minus overall mean of {m}.",
                f"answer = round(float(df.loc[{c(g)} == {v!r}, {m!r}].mean() - {c(m)}.mean()), 4)",
                f"SELECT ROUND((SELECT AVG({qi(m)}) FROM {{src}} WHERE {qi(g)} = {ql(v)}) - (SELECT AVG({qi(m)}) "
                f"FROM {{src}}), 4)",
                params={"m": m, "g": g, "v": v},
            )


# -- anomaly detection -------------------------------------------------------------------------


@template("anomaly_detection")
def anom_iqr(view, rng):
    for m in sample(view.measures, rng):
        yield Task(
            "anomaly_detection",
            "anom_iqr",
            f"How many {m} values lie more than 1.5 interquartile ranges below the first quartile or above the third "
            "quartile?",
            f"Tukey fences on {m}; count the outliers.",
            f"s = {c(m)}.dropna()\nq1, q3 = s.quantile(0.25), s.quantile(0.75)\niqr = q3 - q1\n"
            "answer = int(((s < q1 - 1.5 * iqr) | (s > q3 + 1.5 * iqr)).sum())",
            params={"m": m},
            duck=(
                f"WITH s AS (SELECT {qi(m)} AS v FROM {{src}} WHERE {qi(m)} IS NOT NULL), "
                "q AS (SELECT quantile_cont(v, 0.25) AS q1, quantile_cont(v, 0.75) AS q3 FROM s) "
                "SELECT COUNT(*) FROM s, q WHERE v < q1 - 1.5 * (q3 - q1) OR v > q3 + 1.5 * (q3 - q1)"
            ),
        )


@template("anomaly_detection")
def anom_z(view, rng):
    for m in sample(view.measures, rng):
        k = 3 if view.n_rows >= 100 else 2
        yield Task(
            "anomaly_detection",
            "anom_z",
            f"How many records have {an(m)} {m} more than {k} sample standard deviations away from the mean?",
            f"Z-score outliers of {m} at threshold {k}.",
            f"s = {c(m)}.dropna()\nz = (s - s.mean()) / s.std()\nanswer = int((z.abs() > {k}).sum())",
            params={"m": m, "k": k},
            duck=(
                f"WITH s AS (SELECT {qi(m)} AS v FROM {{src}} WHERE {qi(m)} IS NOT NULL), "
                "st AS (SELECT AVG(v) AS mu, stddev_samp(v) AS sd FROM s) "
                f"SELECT COUNT(*) FROM s, st WHERE ABS(v - mu) / sd > {k}"
            ),
            alt=(
                (
                    f"vals = {c(m)}.dropna().to_numpy(dtype=float)\n"
                    "z = (vals - vals.mean()) / vals.std(ddof=1)\n"
                    f"answer = int((np.abs(z) > {k}).sum())",
                    NP,
                ),
            ),
        )


# -- distribution ------------------------------------------------------------------------------


@template("distribution_analysis")
def dist_skew(view, rng):
    for m in sample(view.measures, rng):
        if view.df[m].dropna().std() == 0:
            continue
        yield Task(
            "distribution_analysis",
            "dist_skew",
            f"What is the skewness of {m}, and is its distribution right-skewed (above 0.5), left-skewed (below "
            "-0.5) or roughly symmetric?",
            f"Sample skewness of {m} and a label from the +/-0.5 rule of thumb.",
            f"sk = float({c(m)}.skew())\n"
            "label = 'right-skewed' if sk > 0.5 else ('left-skewed' if sk < -0.5 else 'roughly symmetric')\n"
            "answer = f'{round(sk, 4)}, {label}'",
            params={"m": m},
            duck=(
                f"WITH k AS (SELECT skewness({qi(m)}) AS sk FROM {{src}}) "
                "SELECT ROUND(sk, 4), CASE WHEN sk > 0.5 THEN 'right-skewed' WHEN sk < -0.5 THEN 'left-skewed' "
                "ELSE 'roughly symmetric' END FROM k"
            ),
            alt=(
                (
                    f"from scipy import stats\n\nsk = float(stats.skew({c(m)}.dropna().astype(float), bias=False))\n"
                    "label = 'right-skewed' if sk > 0.5 else ('left-skewed' if sk < -0.5 else 'roughly symmetric')\n"
                    "answer = f'{round(sk, 4)}, {label}'",
                    (),
                ),
            ),
        )


@template("distribution_analysis")
def dist_shapiro(view, rng):
    for m in sample(view.measures, rng):
        n = view.df[m].notna().sum()
        if not 3 <= n <= 5000 or view.df[m].dropna().std() == 0:
            continue
        yield Task(
            "distribution_analysis",
            "dist_shapiro",
            f"Does {m} follow a normal distribution according to a Shapiro-Wilk test at the 0.05 significance level? "
            "Report the p-value (4 significant digits) and the verdict.",
            f"Shapiro-Wilk on the non-missing {m} values.",
            f"p = float(stats.shapiro({c(m)}.dropna()).pvalue)\n"
            "answer = f\"{p:.4g}, {'normal' if p >= 0.05 else 'not normal'}\"",
            imports=("from scipy import stats",),
            params={"m": m},
            # Shapiro-Wilk has one implementation here: the alternatives reach the values by other engines
            alt=(
                (
                    f"vals = {c(m)}.to_numpy(dtype=float)\n"
                    "p = float(stats.shapiro(vals[~np.isnan(vals)]).pvalue)\n"
                    "answer = f\"{p:.4g}, {'normal' if p >= 0.05 else 'not normal'}\"",
                    ("import numpy as np", "from scipy import stats"),
                ),
                (
                    f"sql = {f'SELECT {qi(m)} FROM df WHERE {qi(m)} IS NOT NULL'!r}\n"
                    "vals = [r[0] for r in duckdb.sql(sql).fetchall()]\n"
                    "p = float(stats.shapiro(vals).pvalue)\n"
                    "answer = f\"{p:.4g}, {'normal' if p >= 0.05 else 'not normal'}\"",
                    ("import duckdb", "from scipy import stats"),
                ),
            ),
        )


@template("distribution_analysis")
def dist_mannwhitney(view, rng):
    for m, g in sample(itertools.product(view.measures, view.groups), rng):
        if m == g:
            continue
        for a, b in two_values(view, g, m, min_count=3)[:1]:
            yield Task(
                "distribution_analysis",
                "dist_mannwhitney",
                f"Do the {m} distributions of {g} {fmt(a)} and {g} {fmt(b)} differ significantly according to a "
                "two-sided Mann-Whitney U test at the 0.05 level? Report the p-value (4 significant digits) and the "
                "verdict.",
                f"Non-parametric comparison of two {g} groups on {m}.",
                f"x = df.loc[{c(g)} == {a!r}, {m!r}].dropna()\ny = df.loc[{c(g)} == {b!r}, {m!r}].dropna()\n"
                "p = float(stats.mannwhitneyu(x, y, alternative='two-sided').pvalue)\n"
                "answer = f\"{p:.4g}, {'different' if p < 0.05 else 'not different'}\"",
                imports=("from scipy import stats",),
                params={"m": m, "g": g, "a": a, "b": b},
                alt=(
                    (
                        f"vals = {c(m)}.to_numpy(dtype=float)\n"
                        f"groups = {c(g)}.to_numpy()\n"
                        f"x = vals[(groups == {a!r}) & ~np.isnan(vals)]\n"
                        f"y = vals[(groups == {b!r}) & ~np.isnan(vals)]\n"
                        "p = float(stats.mannwhitneyu(x, y, alternative='two-sided').pvalue)\n"
                        "answer = f\"{p:.4g}, {'different' if p < 0.05 else 'not different'}\"",
                        ("import numpy as np", "from scipy import stats"),
                    ),
                    (
                        f"sql = {f'SELECT {qi(m)} FROM df WHERE {qi(m)} IS NOT NULL AND {qi(g)} = ?'!r}\n"
                        f"x = [r[0] for r in duckdb.execute(sql, [{a!r}]).fetchall()]\n"
                        f"y = [r[0] for r in duckdb.execute(sql, [{b!r}]).fetchall()]\n"
                        "p = float(stats.mannwhitneyu(x, y, alternative='two-sided').pvalue)\n"
                        "answer = f\"{p:.4g}, {'different' if p < 0.05 else 'not different'}\"",
                        ("import duckdb", "from scipy import stats"),
                    ),
                ),
            )
