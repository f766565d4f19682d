"""Fixtures of the end-to-end tests: a real Airflow started for the test (see e2e_helpers.py)."""

from __future__ import annotations

import pytest
from e2e_helpers import standalone_airflow


@pytest.fixture
def standalone(tmp_path):
    with standalone_airflow(tmp_path) as running:
        yield running
