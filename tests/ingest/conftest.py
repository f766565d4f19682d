"""Fixtures for the ingestion tests (file builders live in ingest_builders.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datamind.settings import Limits
from datamind.storage import DataRoot


@pytest.fixture
def limits() -> Limits:
    return Limits()


@pytest.fixture
def root(tmp_path: Path) -> DataRoot:
    return DataRoot(str(tmp_path / "dataroot"))
