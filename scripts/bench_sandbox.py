"""Benchmark the code sandbox: per-cell overhead against a cold interpreter, and memory/time of
chunked re-execution against a live interpreter per trajectory.

    .venv/bin/python scripts/bench_sandbox.py [--cells 40] [--cold 10] [--rows 200000] [--turns 8] [--trajectories 4]

Prints medians and ratios. Peak RSS comes from the kernel (ru_maxrss) and includes the pages a cell
shares with the zygote; "held between turns" is the private memory (smaps_rollup Private_*) a live
interpreter keeps while the agent is thinking, which chunked mode does not keep at all.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from datamind.sandbox import Sandbox, SandboxLimits

TRAJECTORY = [  # a typical analysis trajectory, one chunk per turn
    "import pandas as pd\ndf = pd.read_csv('events.csv')\nprint(df.shape)",
    "print(df.dtypes.to_dict())",
    "df['revenue'] = df['price'] * df['qty']\nprint(df['revenue'].describe())",
    "by_cat = df.groupby('category')['revenue'].agg(['sum', 'mean', 'count'])\nprint(by_cat.head())",
    "df['day'] = pd.to_datetime(df['ts'], unit='s').dt.date\n"
    "daily = df.groupby('day')['revenue'].sum()\nprint(daily.tail())",
    "top = df.sort_values('revenue', ascending=False).head(20)\nprint(top[['category', 'revenue']])",
    "pivot = df.pivot_table(index='category', columns='region', values='qty', aggfunc='sum')\nprint(pivot)",
    "corr = df[['price', 'qty', 'revenue']].corr()\nprint(corr.round(3))",
    "share = by_cat['sum'] / by_cat['sum'].sum()\nprint(share.sort_values().tail(3))",
    "print(round(df['revenue'].sum(), 2))",
]


def cold_start_s(runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import pandas"], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cell_overhead_s(mode: str, cells: int, data: Path, isolation_mode: str = "auto") -> float:
    with Sandbox(SandboxLimits(isolation_mode=isolation_mode), mode=mode) as sb, sb.session([str(data)]) as s:
        s.run("import pandas as pd")
        for _ in range(3):
            s.run("import pandas as pd\nx = 1")  # warm-up, not kept in the median
        times = []
        for _ in range(cells):
            obs = s.run("import pandas as pd\nx = 1")
            assert obs.ok, obs.output
            times.append(obs.duration_s)
        s.history.clear()  # keep the chunked measurement a single-cell one
    return statistics.median(times)


def private_kb(pid: int) -> int:
    total = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1])
    return total


def trajectories(mode: str, data: Path, turns: int, count: int) -> dict:
    """`count` trajectories advanced round-robin, as concurrent rollouts interleave their turns."""
    chunks = TRAJECTORY[:turns]
    peak_rss, held, durations = [], [], []
    with Sandbox(SandboxLimits(), mode=mode) as sb:
        sessions = [sb.session([str(data)]) for _ in range(count)]
        started = time.perf_counter()
        for chunk in chunks:
            for s in sessions:
                obs = s.run(chunk)
                assert obs.ok, obs.output
                peak_rss.append(obs.peak_rss_kb)
                durations.append(obs.duration_s)
            held.append(sum(private_kb(s._kernel.pid) for s in sessions) if mode == "live" else 0)
        wall = time.perf_counter() - started
        for s in sessions:
            s.close()
    return {
        "peak_rss_mb": max(peak_rss) / 1024,
        "held_between_turns_mb": max(held) / 1024,
        "cell_median_s": statistics.median(durations),
        "last_turn_median_s": statistics.median(durations[-count:]),
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=40)
    ap.add_argument("--cold", type=int, default=10)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--turns", type=int, default=len(TRAJECTORY))
    ap.add_argument("--trajectories", type=int, default=4)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        rng = np.random.default_rng(0)
        n = args.rows
        data = Path(tmp) / "events.csv"
        pd.DataFrame(
            {
                "ts": rng.integers(1_600_000_000, 1_700_000_000, n),
                "category": rng.choice([f"c{i}" for i in range(30)], n),
                "region": rng.choice(["north", "south", "east", "west"], n),
                "price": rng.uniform(1, 100, n).round(2),
                "qty": rng.integers(1, 10, n),
            }
        ).to_csv(data, index=False)
        print(f"data file: {n} rows, {data.stat().st_size / 1e6:.1f} MB")

        cold = cold_start_s(args.cold)
        chunked = cell_overhead_s("chunked", args.cells, data)
        live = cell_overhead_s("live", args.cells, data)
        userns = cell_overhead_s("chunked", args.cells, data, isolation_mode="userns")
        print("\n== per-cell overhead (trivial cell, pandas loaded; median) ==")
        print(f"cold `python -c 'import pandas'`: {cold * 1000:8.1f} ms  (median of {args.cold})")
        print(f"sandbox chunked (fork per cell) : {chunked * 1000:8.1f} ms  -> {cold / chunked:5.1f}x below cold start")
        print(f"sandbox live (persistent kernel): {live * 1000:8.1f} ms  -> {cold / live:5.1f}x below cold start")
        print(
            f"chunked, user-namespace mode    : {userns * 1000:8.1f} ms  -> {cold / userns:5.1f}x below cold start"
            "  (non-root path: + per-cell pid namespace)"
        )

        print(f"\n== {args.trajectories} trajectories x {args.turns} turns, round-robin ==")
        for mode in ("chunked", "live"):
            r = trajectories(mode, data, args.turns, args.trajectories)
            print(
                f"{mode:8s} peak RSS per cell {r['peak_rss_mb']:7.1f} MB | private memory held between turns "
                f"(all trajectories) {r['held_between_turns_mb']:7.1f} MB | "
                f"cell median {r['cell_median_s'] * 1000:7.1f} ms | "
                f"last-turn median {r['last_turn_median_s'] * 1000:7.1f} ms | wall {r['wall_s']:6.2f} s"
            )


if __name__ == "__main__":
    main()
