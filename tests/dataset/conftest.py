"""Reuse the rollout fixtures (real sandbox, real corpus, local OpenAI-compatible server)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout.conftest import sandbox  # noqa: E402,F401
