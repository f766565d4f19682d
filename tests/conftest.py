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
    # The suite starts hundreds of sandboxes that run a few cells each: importing scipy.stats, polars and
    # duckdb into every zygote up front (~1.5 s of CPU) buys them nothing. test_warm_imports.py tests it.
    os.environ["DATAMIND_SANDBOX_WARM_AT_START"] = ""
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


# Modules that take 40 s or more, longest first (pytest's slowest durations, stop 39): a parallel run (make test:
# one worker per core, a module per worker) starts them first, so that no worker is left running one of them
# alone at the end while the others have finished.
LONG_MODULES = (
    "e2e/test_cluster.py",
    "e2e/test_backfill_day_browser.py",
    "e2e/test_review_browser.py",
    "e2e/test_ui_browser.py",
    "rollout/test_real_model.py",
    "dataset/test_dataset_quality.py",
    "e2e/test_scheduler.py",
    "synth/test_synth_corpus.py",
    "test_bench_scale.py",
    "train/test_llamafactory.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {rel: i for i, rel in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.relative_to(REPO / "tests").as_posix(), len(rank)))  # stable


def pytest_sessionfinish(session, exitstatus):
    import shutil

    shutil.rmtree(_SESSION_DIR, ignore_errors=True)
