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


def test_bench_scale_measures_every_stage_at_n_50(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_scale.py"), "--sizes", "50", "--sample-shards", "1",
         "--template-files", "4", "--keep", str(tmp_path), "--max-shards", "3"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*50 (\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+([\d.na]+)\s+(\d+)\s+(\d+)$", line)
        if m:
            rows[m.group(1)] = m.groups()[1:]
    assert set(rows) == {"ingest", "profile", "synth", "rollout", "judge", "publish"}, proc.stdout
    assert int(rows["ingest"][0]) == 50  # the planner listed every generated file
    # 4 template files cloned 13 times: later stages see about 50 items or more, each a real row of the pipeline
    assert int(rows["profile"][0]) >= 50 and int(rows["rollout"][0]) > int(rows["synth"][0])
    for stage in ("ingest", "profile", "synth", "rollout", "judge"):
        assert 1 <= int(rows[stage][3]) <= 3, f"{stage}: the plan mapped no shard, or more than Airflow allows"
        assert int(rows[stage][4]) > 0, f"{stage}: no shard item was processed"
        assert float(rows[stage][6]) > 0 and float(rows[stage][7]) > 0  # both processes' peak RSS was read
    # the sample's writes were undone and the clones filled in: nothing of the sample is left half-done
    sources = list((tmp_path).glob("bench-scale-50-*/src/*"))
    assert len(sources) == 50 and sum(p.suffix == ".xlsx" for p in sources) == 10
