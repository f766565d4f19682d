"""The LLM client for a task, configured from the Airflow Connection named in the DAG params."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from datamind_airflow import runtime

log = logging.getLogger(__name__)


@contextmanager
def client_for(params: dict[str, Any]) -> Iterator[Any]:
    """Yield an LLMClient for ``backend == "llm"``, else None; logs token usage when done.

    The Connection (default ``datamind_llm``) holds the base URL as host, the API key as password
    and ``{"models": {"synthesizer": ..., "expert": ..., "judge": ...}}`` plus tuning in extra.
    Without that Connection, ``DATAMIND_LLM_*`` environment variables are used.
    """
    if params.get("backend", "offline") != "llm":
        yield None
        return
    from datamind.llm import LLMClient, LLMConfig, ResponseCache

    conn_id = params.get("llm_conn_id") or "datamind_llm"
    conn = runtime.connection_dict(conn_id)
    config = LLMConfig.from_connection_dict(conn, conn_id=conn_id) if conn else LLMConfig.from_env(conn_id)
    # Responses are cached under the shared data root: a retry, rerun or backfill never pays twice.
    client = LLMClient(config, cache=ResponseCache(runtime.data_root()))
    try:
        yield client
    finally:
        client.usage.log_summary("LLM usage for this task", logger=log)


def _client(conn_id: str, models: dict[str, str] | None = None):
    from datamind.llm import LLMClient, LLMConfig, ResponseCache

    conn = runtime.connection_dict(conn_id)
    config = LLMConfig.from_connection_dict(conn, conn_id=conn_id) if conn else LLMConfig.from_env(conn_id)
    if models:
        config = config.with_overrides(models={**config.models, **models})
    return LLMClient(config, cache=ResponseCache(runtime.data_root()))


@contextmanager
def agent_client_for(p) -> Iterator[Any]:
    """The agent under evaluation (``agent`` role), or None for the offline reference policy."""
    if p.offline:
        yield None
        return
    client = _client(p.agent_conn_id, {"agent": p.model} if p.model else None)
    try:
        yield client
    finally:
        client.usage.log_summary("Agent LLM usage", logger=log)


@contextmanager
def judge_client_for(p) -> Iterator[Any]:
    """The model-as-judge (``judge`` role) when a judge Connection is named, else None (rule judges)."""
    if not p.judge_conn_id:
        yield None
        return
    client = _client(p.judge_conn_id)
    try:
        yield client
    finally:
        client.usage.log_summary("Judge LLM usage", logger=log)
