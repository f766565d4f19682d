"""The LLM client for a task, configured from the Airflow Connection named in the DAG params."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from datamind.llm.config import DEFAULT_CONN_ID
from datamind_airflow import runtime

log = logging.getLogger(__name__)


def llm_config(conn_id: str):
    """The LLMConfig of Connection ``conn_id`` (else ``DATAMIND_LLM_*``).

    The Connection holds the base URL as host, the API key as password and
    ``{"models": {"synthesizer": ..., "expert": ..., "judge": ..., "agent": ...}}`` plus tuning in extra.
    """
    from datamind.llm import LLMConfig

    conn = runtime.connection_dict(conn_id)
    return LLMConfig.from_connection_dict(conn, conn_id=conn_id) if conn else LLMConfig.from_env(conn_id)


def _client(conn_id: str, models: dict[str, str] | None = None):
    """An LLMClient for the Connection ``conn_id``, ``models`` overriding its roles."""
    from datamind.llm import LLMClient, ResponseCache

    config = llm_config(conn_id)
    if models:
        config = config.with_overrides(models={**config.models, **models})
    # Responses are cached under the shared data root: a retry, rerun or backfill never pays twice.
    return LLMClient(config, cache=ResponseCache(runtime.data_root()))


@contextmanager
def _logged(client, title: str) -> Iterator[Any]:
    """Yield ``client`` (None passes through) and log its token usage when the task is done with it."""
    try:
        yield client
    finally:
        if client is not None:
            client.usage.log_summary(title, logger=log)


def client_for(params: dict[str, Any]):
    """An LLMClient when the stage's backend, or the judge's, is ``llm``, or a model rewrites the offline
    thoughts (Connection ``llm_conn_id``, default ``datamind_llm``), else None."""
    wanted = "llm" in (params.get("backend", "offline"), params.get("judge_backend")) or bool(
        params.get("rewrite_thoughts")
    )
    return _logged(_client(params.get("llm_conn_id") or DEFAULT_CONN_ID) if wanted else None, "LLM usage for this task")


def agent_client_for(p):
    """The agent under evaluation (``agent`` role), or None for the offline reference policy."""
    # a checkpoint is served by the evaluation stage itself (vLLM on a GPU worker, transformers serve on a CPU)
    client = None if p.offline or p.checkpoint else _client(p.agent_conn_id, {"agent": p.model} if p.model else None)
    return _logged(client, "Agent LLM usage")


def judge_client_for(p):
    """The model-as-judge (``judge`` role) when a judge Connection is named, else None (rule judges)."""
    return _logged(_client(p.judge_conn_id) if p.judge_conn_id else None, "Judge LLM usage")
