"""A little ordinary analysis that the zygote runs once, before it forks any cell.

pandas, numpy and the interpreter do work on first use that they then keep: submodules imported inside
functions, formatter and dtype tables, compiled regular expressions, source lines read for tracebacks.
Every cell is a fresh fork, so without this each trajectory paid all of it again in its first cells (a
read-and-print cell took 24-30 ms of CPU in a fresh interpreter and 9 ms the second time). A cell forked
after this inherits the filled caches.

Nothing here is visible to a cell: it runs in a function and keeps no object of its own, reads no data
file, sets no option and draws from no random generator (a cell's ``np.random`` state stays the zygote's).
"""

from __future__ import annotations

import io
import sqlite3
import traceback

_CSV = """id,city,amount,ratio,day,flag,note
1,Oslo,10,0.5,2024-01-02,yes,first
2,Lima,25,1.25,2024-02-11,no,
3,Oslo,7,0.1,2024-02-28,yes,third one
4,Pune,40,2.0,2024-03-05,no,fourth
5,Lima,13,,2024-03-19,yes,fifth
6,Pune,22,0.75,2024-04-01,no,sixth
"""


def exercise() -> None:
    """Use the calls analysis cells use most, on six rows. The zygote records a failure as a note and carries
    on: cells then pay the first use themselves, as they did before."""
    import numpy as np
    import pandas as pd

    out = io.StringIO()
    df = pd.read_csv(io.StringIO(_CSV))
    print(df.shape, df.dtypes.to_string(), df.head(3).to_string(), df.to_string(), repr(df), file=out)
    df.info(buf=out)
    print(df.describe(include="all").to_string(), df.isna().sum(), df.nunique(), df.columns.tolist(), file=out)
    amount = df["amount"]
    print(repr(amount), amount.mean(), amount.median(), amount.std(), amount.quantile(0.9), amount.skew(), file=out)
    print(round(float(df.loc[df["city"] == "Oslo", "amount"].mean() - amount.mean()), 4), file=out)
    city = df["city"]
    print(city.value_counts().to_string(), city.unique(), city.str.lower().str.contains("o"), file=out)
    grouped = df.groupby("city")["amount"].agg(["mean", "sum", "count"]).round(2).reset_index()
    print(grouped.to_string(), df.groupby(["city", "flag"]).size(), df.groupby("city").ratio.transform("max"), file=out)
    print(df.sort_values("amount", ascending=False).head(2), df.nlargest(2, "amount"), file=out)
    print(df.query("amount > 10"), df[df["amount"].between(5, 30)], file=out)
    day = pd.to_datetime(df["day"])
    print(day.dt.year, day.dt.month_name(), day.diff().dt.days, file=out)
    print(df.set_index(day)["amount"].resample("ME").sum(), file=out)
    print(df.pivot_table(index="city", columns="flag", values="amount", aggfunc="mean"), file=out)
    print(df[["amount", "ratio"]].corr().round(3), df.fillna(0).apply(lambda r: r["amount"] * 2, axis=1), file=out)
    print(df.merge(grouped, on="city").shape, pd.concat([df, df]).drop_duplicates().shape, file=out)
    print(np.percentile(amount.to_numpy(), [25, 75]), np.corrcoef(amount, df["id"])[0, 1], file=out)
    try:
        df["no_such_column"]
    except KeyError:
        traceback.format_exc()  # what a failing cell formats: the frames' source lines, read once here
    with sqlite3.connect(":memory:") as con:
        con.execute("CREATE TABLE t (city TEXT, amount INTEGER)")
        con.executemany("INSERT INTO t VALUES (?, ?)", zip(city, amount.astype(int).tolist(), strict=True))
        con.execute("SELECT city, AVG(amount) FROM t GROUP BY city ORDER BY 2 DESC").fetchall()
    con.close()
