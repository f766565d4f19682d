"""Constants and host-side probes shared by the sandbox tests (a uniquely named module: several test
folders have a conftest.py, so `from conftest import ...` would be ambiguous)."""

from __future__ import annotations

import os
from pathlib import Path

# Tight caps so hostile cells end quickly; 1 GiB still leaves ~700 MB above the preloaded pandas.
TEST_LIMITS = dict(
    wall_s=4.0,
    cpu_s=2,
    memory_mb=1024,
    max_output_bytes=200_000,
    head_chars=500,
    tail_chars=500,
    sql_timeout_s=1.0,
    max_procs=32,
    warm_at_start=(),  # a second of imports per sandbox that these tests do not use (test_warm_imports does)
)
FAKE_SECRET = "sk-sandbox-test-secret-0123456789"


def processes_of_uid(uid: int) -> list[int]:
    """Host-side scan of /proc: every live process running as `uid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) == uid:
                state = next((ln for ln in status.splitlines() if ln.startswith("State:")), "")
                if "Z" not in state.split()[1:2]:
                    found.append(int(entry))
    return found
