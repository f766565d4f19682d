"""What can go wrong with an LLM call, split by who must act.

- :class:`EndpointUnavailable` - the endpoint is dead or refuses us (circuit open, bad key, unknown model):
  no item can succeed, so the task should fail fast; :func:`datamind.llm.run_all` re-raises it at once.
- :class:`LLMCallError` - this one request failed (retries exhausted, request rejected as too long, ...):
  record the item as a rejection and carry on.
- :class:`ParseFailure` - the model answered, but not in the required shape, even after re-asking:
  record the item as a rejection with the raw text and the reason.
Messages never contain the API key.
"""

from __future__ import annotations

from typing import Any

from datamind.schemas import rejection

RAW_LIMIT = 20_000  # characters of raw model output kept in a rejection row


class LLMError(Exception):
    reason_code = "llm_error"


class EndpointUnavailable(LLMError):
    reason_code = "llm_endpoint_unavailable"


class LLMCallError(LLMError):
    reason_code = "llm_call_failed"

    def __init__(self, message: str, *, status_code: int | None = None, reason_code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        if reason_code:
            self.reason_code = reason_code


class BatchPending(LLMCallError):
    """Batch mode: the answer is not in the cache yet; the request joins the shard's next batch.  A per-item
    failure on purpose, so every stage handles it as it handles any one failed call (and the pass that met it
    is a dry run whose writes are dropped: ``datamind.llm.batch``)."""

    reason_code = "llm_batch_pending"


class ParseFailure(LLMError):
    """The model's output could not be parsed after ``attempts`` tries; ``raw`` is the last reply."""

    reason_code = "llm_parse_failed"

    def __init__(
        self,
        raw: str | None,
        reason: str,
        *,
        attempts: int = 1,
        model: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cost_usd: float | None = None,
        raw_attempts: list[str] | None = None,
    ) -> None:
        super().__init__(f"unparseable LLM output after {attempts} attempt(s): {reason}")
        self.raw = raw
        self.reason = reason
        self.attempts = attempts
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.cost_usd = cost_usd
        self.raw_attempts = raw_attempts or ([] if raw is None else [raw])


def rejection_row(
    exc: LLMError,
    *,
    item_id: str,
    stage: str,
    run_id: str | None = None,
    file_id: str | None = None,
    query_id: str | None = None,
) -> dict[str, Any]:
    """A row for the ``rejections`` table (schemas.REJECTIONS) describing a per-item LLM failure."""
    raw = exc.raw if isinstance(exc, ParseFailure) else None
    reason = exc.reason if isinstance(exc, ParseFailure) else str(exc)
    return rejection(
        stage, item_id, exc.reason_code, reason, file_id=file_id, query_id=query_id, raw=raw, run_id=run_id
    )
