"""The publishing bench runs to its end at small sizes, so it cannot rot between the runs that quote it. It
asserts what the table says about the work done, never how long it took or how much memory it held."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bench_publish_publishes_each_size_and_reports_every_phase():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_publish.py"), "--rows", "200", "450", "--template-files", "4"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", re.M)
    rows = {int(m.group(1)): [float(x) for x in m.groups()[1:]] for m in line.finditer(proc.stdout)}
    assert set(rows) == {200, 450}, proc.stdout
    for n, (samples, seconds, _, peak, *phases) in rows.items():
        assert 0 < samples <= n and seconds > 0  # the clones were published (a filter may drop some)
        assert all(p > 0 for p in phases) and peak == max(phases)  # every phase was reached and measured
    assert re.search(r"peak RSS added per row from 200 to 450 rows: -?\d+ bytes", proc.stdout)
