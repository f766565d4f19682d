"""The scale benchmark runs to its end at the smallest size, so it cannot rot between the runs that quote it.

It asserts what the table says about the work done (every stage measured, planners saw every input item,
shards processed real items), never how long anything took.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bench_scale_measures_every_stage_at_two_sizes_taking_turns(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_scale.py"), "--sizes", "30", "50", "--sample-shards", "1",
         "--template-files", "4", "--keep", str(tmp_path), "--max-shards", "3", "--repeats", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows: dict[int, dict] = {30: {}, 50: {}}
    for line in proc.stdout.splitlines():
        m = re.match(
            r"\s*(30|50) (\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+([\d.na]+)\s+(\d+)\s+(\d+)\s+(\d+)$",
            line,
        )
        if m:
            rows[int(m.group(1))][m.group(2)] = m.groups()[2:]
    stages = {"ingest", "profile", "synth", "rollout", "judge", "publish"}
    assert set(rows[30]) == set(rows[50]) == stages, proc.stdout
    assert int(rows[30]["ingest"][0]) == 30 and int(rows[50]["ingest"][0]) == 50  # every generated file listed
    for n, table in rows.items():
        # 4 template files cloned: later stages see about n items or more, each a real row of the pipeline
        assert int(table["profile"][0]) >= n and int(table["rollout"][0]) > int(table["synth"][0])
        for stage in ("ingest", "profile", "synth", "rollout", "judge"):
            assert 1 <= int(table[stage][3]) <= 3, f"{stage}: the plan mapped no shard, or more than Airflow allows"
            assert int(table[stage][4]) > 0, f"{stage}: no shard item was processed"
            assert float(table[stage][7]) > 0 and float(table[stage][8]) > 0  # both processes' peak RSS was read
    # a ratio per stage from the medians, with the range of the side-by-side runs' ratios around it
    ratios = re.findall(r"30->50: shard ratio ([\d.]+) \[([\d.]+)-([\d.]+)\]", proc.stdout)
    assert len(ratios) == len(stages), proc.stdout
    for ratio, low, high in ratios:
        assert float(low) <= float(ratio) <= float(high)
    # both sizes' folders lived side by side for the turns, each with its own sources
    for n in rows:
        sources = list(tmp_path.glob(f"bench-scale-{n}-*/src/*"))
        assert len(sources) == n and sum(p.suffix == ".xlsx" for p in sources) == n // 5
