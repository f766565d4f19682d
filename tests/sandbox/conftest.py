"""Real sandboxes (zygote processes) shared by the sandbox tests; each costs ~0.7 s to start."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest
from sandbox_helpers import FAKE_SECRET, TEST_LIMITS

from datamind.sandbox import Sandbox, SandboxLimits


@contextlib.contextmanager
def _secret_in_host_env():
    """A credential sits in the worker's environment while a sandbox starts; it must never reach a cell.
    Set only around the start so no other test in the session sees it."""
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = FAKE_SECRET
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("OPENAI_API_KEY", None)
        else:
            os.environ["OPENAI_API_KEY"] = old


@pytest.fixture(scope="session")
def sandbox():
    with _secret_in_host_env():
        sb = Sandbox(SandboxLimits(**TEST_LIMITS))
    with sb:
        yield sb


@pytest.fixture(scope="session")
def raw_sandbox():
    """Same sandbox with the AST guard off: proves the runtime layers contain what the guard would refuse."""
    with _secret_in_host_env():
        sb = Sandbox(SandboxLimits(**TEST_LIMITS, guard=False))
    with sb:
        yield sb


@pytest.fixture()
def csv_file(tmp_path: Path) -> Path:
    path = tmp_path / "sales.csv"
    path.write_text("region,amount\nnorth,10\nsouth,20\nnorth,5\neast,7\n")
    return path


@pytest.fixture()
def sqlite_file(tmp_path: Path) -> Path:
    path = tmp_path / "shop.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), total REAL);
        INSERT INTO customers VALUES (1, 'Ada', 'London'), (2, 'Lin', 'Paris'), (3, 'Bo', 'London');
        INSERT INTO orders VALUES (1, 1, 10.5), (2, 1, 4.5), (3, 2, 30.0), (4, 3, 1.0);
    """)
    con.commit()
    con.close()
    return path
