"""Session-wide test environment.

Airflow reads its configuration at import, so the environment is set here, before any test module
imports it: the project's own config/airflow.env, but with AIRFLOW_HOME and the data root in a
throwaway directory so tests never touch a developer's airflow_home/ or data/.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="datamind-tests-"))


def _load_airflow_env() -> None:
    for line in (REPO / "config" / "airflow.env").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        os.environ[key] = value.replace("${REPO}", str(REPO))
    home = _SESSION_DIR / "airflow_home"
    home.mkdir(parents=True, exist_ok=True)
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home}/airflow.db"
    os.environ["AIRFLOW__API_AUTH__JWT_SECRET"] = "t" * 64
    os.environ["DATAMIND_DATA_ROOT"] = str(_SESSION_DIR / "data")
    # Nothing in the suite may reach Kaggle or an LLM on the internet, nor send lineage where a shell's
    # bin/env.sh pointed it (the cluster test sets its own file transport).
    for var in (
        "KAGGLE_USERNAME",
        "KAGGLE_KEY",
        "KAGGLE_API_TOKEN",
        "OPENAI_API_KEY",
        "AIRFLOW__OPENLINEAGE__TRANSPORT",
    ):
        os.environ.pop(var, None)


_load_airflow_env()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared corpus not present at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated Airflow metadata DB for the session (needed by dag.test())."""
    from airflow.utils import db

    db.initdb()
    return Path(os.environ["AIRFLOW_HOME"])


def pytest_sessionfinish(session, exitstatus):
    import shutil

    shutil.rmtree(_SESSION_DIR, ignore_errors=True)
