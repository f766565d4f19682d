"""Fixtures for the LLM layer: a real OpenAI-protocol server on 127.0.0.1 and a guard against any other host."""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # makes tests/fakes importable as `fakes`

from fakes.openai_server import FakeOpenAIServer  # noqa: E402

from datamind.llm import LLMClient, LLMConfig, ResponseCache  # noqa: E402
from datamind.llm.client import aiohttp_available  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402

TEST_KEY = "sk-test-SECRET-0123456789"


def _is_loopback_host(host: object) -> bool:
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def network_guard(monkeypatch):
    """Fail any test that tries to reach a host other than loopback (a hosted LLM must never be called)."""
    violations: list[str] = []
    real_connect, real_connect_ex, real_getaddrinfo = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.getaddrinfo,
    )

    def check(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback_host(address[0]):
            violations.append(f"connect to {address!r}")
            raise ConnectionRefusedError(f"test network guard: connection to non-loopback {address!r} blocked")

    def connect(self, address):
        check(self, address)
        return real_connect(self, address)

    def connect_ex(self, address):
        check(self, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _is_loopback_host(host):
            violations.append(f"name lookup of {host!r}")
            raise socket.gaierror(f"test network guard: lookup of non-loopback host {host!r} blocked")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield violations
    assert not violations, f"test tried to leave the machine: {violations}"


@pytest.fixture(scope="session")
def _server_process_wide():
    with FakeOpenAIServer(api_key=TEST_KEY) as server:  # so every test also proves the key is sent
        yield server


@pytest.fixture
def server(_server_process_wide):
    """The shared server, reset (no script, no responder, no latency, counters zero) for each test."""
    _server_process_wide.reset()
    yield _server_process_wide
    _server_process_wide.reset()


@pytest.fixture
def api_key() -> str:
    return TEST_KEY


@pytest.fixture
def root(tmp_path) -> DataRoot:
    return DataRoot(str(tmp_path / "data"))


@pytest.fixture(params=["httpx", "aiohttp"])
def http_backend(request) -> str:
    """Every client test runs over both HTTP transports the openai client supports."""
    if request.param == "aiohttp" and not aiohttp_available():
        pytest.skip("aiohttp is not installed (openai[aiohttp] extra); the httpx2 run covers the client")
    return request.param


@pytest.fixture
def make_config(server, http_backend):
    def make(**overrides) -> LLMConfig:
        base = dict(
            base_url=server.base_url,
            api_key=TEST_KEY,
            models={"synthesizer": "synth-model", "expert": "expert-model", "judge": "judge-model"},
            timeout_s=2.0,
            max_concurrency=8,
            max_retries=3,
            backoff_base_s=0.005,
            backoff_max_s=0.05,
            breaker_threshold=20,
            breaker_cooldown_s=60.0,
            http_backend=http_backend,
        )
        base.update(overrides)
        return LLMConfig(**base)

    return make


@pytest.fixture
def make_client(make_config, root):
    def make(*, cache: bool = True, **overrides) -> LLMClient:
        return LLMClient(make_config(**overrides), cache=ResponseCache(root) if cache else None)

    return make
