"""Fixtures for the evaluation tests: a real sandbox and a local OpenAI-protocol server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from fakes.openai_server import FakeOpenAIServer  # noqa: E402

from datamind.llm import LLMClient, LLMConfig, ResponseCache  # noqa: E402
from datamind.sandbox import Sandbox, SandboxLimits  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402


@pytest.fixture(scope="session")
def sandbox():
    with Sandbox(SandboxLimits(wall_s=20.0, cpu_s=20), mode="chunked") as sb:
        yield sb


@pytest.fixture
def root(tmp_path) -> DataRoot:
    return DataRoot(str(tmp_path / "data"))


@pytest.fixture(scope="session")
def llm_server():
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def server(llm_server):
    llm_server.reset()
    yield llm_server
    llm_server.reset()


@pytest.fixture
def agent_client(server, root) -> LLMClient:
    config = LLMConfig(
        base_url=server.base_url,
        api_key="sk-test-not-a-secret",
        models={"agent": "agent-under-test"},
        timeout_s=5.0,
        max_retries=1,
        backoff_base_s=0.005,
        backoff_max_s=0.02,
    )
    return LLMClient(config, cache=ResponseCache(root))
