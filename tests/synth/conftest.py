"""Fixtures for query synthesis: catalog rows built by the real ingest loader and profiler.

``synth_fixtures.catalog_rows`` turns any file on disk into catalog_tables rows exactly as the pipeline would
(``load_tables`` + ``profile.stage.profile_rows``); ``small_csv`` and ``small_sqlite`` are tables written
here with values chosen so expected answers can be worked out by hand.
"""

from __future__ import annotations

import ipaddress
import socket
import sqlite3
import sys
from pathlib import Path

import pytest

from datamind.storage import DataRoot

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # makes tests/fakes importable as `fakes`

from synth_fixtures import SMALL_CSV  # noqa: E402


@pytest.fixture
def root(tmp_path) -> DataRoot:
    return DataRoot(str(tmp_path / "data"))


@pytest.fixture
def small_csv(tmp_path) -> Path:
    path = tmp_path / "files" / "sales.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SMALL_CSV)
    return path


@pytest.fixture
def small_sqlite(tmp_path) -> Path:
    """shops(shop_id, shop_name) <- sales(sale_id, shop_id FK, amount, qty)."""
    path = tmp_path / "files" / "shop.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE shops (shop_id INTEGER PRIMARY KEY, shop_name VARCHAR(40));
        CREATE TABLE sales (sale_id INTEGER PRIMARY KEY, shop_id INTEGER, amount REAL, qty INTEGER,
                            FOREIGN KEY (shop_id) REFERENCES shops (shop_id));
        INSERT INTO shops VALUES (1, 'Alpha'), (2, 'Beta'), (3, 'Gamma');
        """
    )
    amounts = [
        (1, 10.0, 1),
        (1, 20.0, 2),
        (1, 30.0, 3),
        (2, 5.0, 4),
        (2, 7.0, 5),
        (3, 100.0, 6),
        (3, 1.0, 7),
        (1, 40.0, 8),
        (2, 9.0, 9),
        (3, 50.0, 10),
    ]
    con.executemany("INSERT INTO sales (shop_id, amount, qty) VALUES (?, ?, ?)", amounts)
    con.commit()
    con.close()
    return path


def _is_loopback(host: object) -> bool:
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def loopback_only(monkeypatch):
    """Fail the test if anything tries to reach a host other than loopback (no hosted LLM, ever)."""
    real_connect = socket.socket.connect

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            raise AssertionError(f"test tried to connect to {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture(scope="session")
def fake_llm_server():
    from fakes.openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def llm_server(fake_llm_server, loopback_only):
    fake_llm_server.reset()
    yield fake_llm_server
    fake_llm_server.reset()
