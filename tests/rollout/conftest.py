"""Fixtures for the rollout/judge/publish tests: a real sandbox, a small real corpus, a local OpenAI server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))  # `fakes` (OpenAI server) and `rollout.corpus` importable from any test dir

from fakes.openai_server import FakeOpenAIServer  # noqa: E402
from rollout.corpus import build_corpus  # noqa: E402

from datamind.llm import LLMClient, LLMConfig, ResponseCache  # noqa: E402
from datamind.sandbox import Sandbox, SandboxLimits  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402


@pytest.fixture(scope="session")
def sandbox():
    """One real sandbox (zygote process) for the session; each trajectory opens its own session in it."""
    with Sandbox(SandboxLimits(wall_s=20.0, cpu_s=20), mode="chunked") as sb:
        yield sb


@pytest.fixture
def root(tmp_path) -> DataRoot:
    return DataRoot(str(tmp_path / "data"))


@pytest.fixture
def corpus(root, tmp_path) -> DataRoot:
    build_corpus(root, str(tmp_path))
    return root


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
def llm_client(server, root) -> LLMClient:
    config = LLMConfig(
        base_url=server.base_url,
        api_key="sk-test-not-a-secret",
        models={"synthesizer": "synth-model", "expert": "expert-model", "judge": "judge-model"},
        timeout_s=5.0,
        max_retries=1,
        backoff_base_s=0.005,
        backoff_max_s=0.02,
    )
    return LLMClient(config, cache=ResponseCache(root))
