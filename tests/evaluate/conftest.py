"""Fixtures for the evaluation tests: the rollout tests' real sandbox, data root and local OpenAI-protocol
server, plus a client for the agent under test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

import rollout.conftest as shared  # noqa: E402

# the same fixtures the rollout tests use, registered here under their own names
sandbox, root, llm_server, server = shared.sandbox, shared.root, shared.llm_server, shared.server

from datamind.llm import LLMClient, LLMConfig, ResponseCache  # noqa: E402


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
