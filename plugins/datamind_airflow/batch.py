"""Batch mode in Airflow: a shard waits for its batch on the triggerer, holding no worker slot.

The process task (``stages.sharded_stage``) advances its shard with ``datamind.llm.batch.step``; while a batch
is running it defers with :class:`BatchTrigger`, which polls the endpoint with backoff and fires when the batch
has ended.  The task then resumes and steps again: the batch's answers go into the response cache and the
shard either writes its rows or submits its next batch (a chain's next hop) and defers again.  A task killed
anywhere in this steps the same way when retried: it finds its batch by its record and never submits it twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

MAX_POLL_S = 600.0


def run_or_defer(scope: str, run_shard, client, params: dict) -> dict:
    """Batch mode: step the work of ``scope`` (a shard, an evaluation); while its batch runs, defer to the
    triggerer.  The task resumes by running its function again (``lineage.LineageOperator.resume``), which
    lands here and steps on."""
    from airflow.sdk.exceptions import TaskDeferred

    from datamind.llm.batch import step
    from datamind.llm.config import DEFAULT_CONN_ID, RequestForm
    from datamind_airflow import runtime

    s = step(run_shard, runtime.data_root(), client, scope)
    for b in s.absorbed:
        runtime.log_summary(f"{scope}: batch {b['batch_id']} taken in", b)
    if s.summary is not None:
        return {**s.summary, "batches": len(s.absorbed)}
    doc = s.submission
    runtime.log_summary(f"{scope}: waiting for batch {doc['batch_id']}", {"requests": len(doc["requests"])})
    poll_s = float(params.get("batch_poll_s") or RequestForm().batch_poll_s)
    trigger = BatchTrigger(params.get("llm_conn_id") or DEFAULT_CONN_ID, doc["batch_id"], poll_s=poll_s)
    raise TaskDeferred(trigger=trigger, method_name="resume")


class BatchTrigger(BaseTrigger):
    """Fires when the batch ``batch_id`` at the endpoint of Connection ``conn_id`` has ended.  Only the
    Connection's id travels with the trigger: its key is read where the trigger runs, never stored."""

    def __init__(self, conn_id: str, batch_id: str, poll_s: float, max_poll_s: float = MAX_POLL_S) -> None:
        super().__init__()
        self.conn_id, self.batch_id, self.poll_s, self.max_poll_s = conn_id, batch_id, poll_s, max_poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__name__}",
            {"conn_id": self.conn_id, "batch_id": self.batch_id, "poll_s": self.poll_s, "max_poll_s": self.max_poll_s},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from datamind.llm import batch
        from datamind_airflow.llm import llm_config

        config = await asyncio.to_thread(llm_config, self.conn_id)
        import openai

        http = openai.AsyncOpenAI(base_url=config.base_url, api_key=config.api_key or "not-needed", max_retries=3)
        try:
            ended = await batch.wait(http, self.batch_id, poll_s=self.poll_s, max_poll_s=self.max_poll_s)
        finally:
            await http.close()
        self.log.info("batch %s ended %s: %s", self.batch_id, ended["status"], ended["request_counts"])
        yield TriggerEvent({"batch_id": self.batch_id, "status": ended["status"]})
