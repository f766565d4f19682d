"""The one way this project talks to an LLM: any OpenAI-compatible chat-completions endpoint.

``LLMClient.chat`` answers from the response cache when it can, otherwise sends the request through the
adaptive concurrency limiter, retries timeouts / connection errors / 5xx / unusable bodies with jittered
exponential backoff, honours ``retry-after`` on 429, and trips the circuit breaker when the endpoint is
dead.  ``chat_parsed`` adds bounded re-asking when the reply is not in the required shape.  Identical
requests in flight at the same time are sent once.  The ``openai`` client's own retries are off so that
every attempt is counted here.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import httpx2
import openai

from datamind.llm.cache import ResponseCache, cache_key
from datamind.llm.config import GRAMMAR_FIELDS, LLMConfig
from datamind.llm.errors import EndpointUnavailable, LLMCallError, ParseFailure
from datamind.llm.resilience import AdaptiveLimiter, CircuitBreaker, backoff_delay
from datamind.llm.usage import UsageMeter

log = logging.getLogger("datamind.llm")

T = TypeVar("T")
Message = Mapping[str, str]

# Sent as "Authorization: Bearer <key>", as chat.completions.create does.  Sampling parameters go into the
# request body as given, so server-specific ones (vLLM's top_k, min_p, repetition_penalty) work too.
_REQUEST_OPTIONS: dict[str, Any] = {"security": {"bearer_auth": True}}
_FORBIDDEN_PARAMS = {"n": "one completion per call (use sample_index for several samples)", "stream": "no streaming"}
_ROLES = {"system", "user", "assistant"}
_MAX_RETRY_AFTER_S = 60.0


@dataclass(frozen=True)
class ChatResult:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    latency_s: float  # of the original call when cached
    finish_reason: str | None = None
    cost_usd: float | None = None  # of the original call; None when no price is configured
    cache_key: str = ""
    # prompt tokens the endpoint did not evaluate again (its own prefix cache), where it says so
    # (``usage.prompt_tokens_details.cached_tokens``: OpenAI, vLLM, and the local llama.cpp launcher)
    endpoint_cached_tokens: int = 0


@dataclass(frozen=True)
class ParsedResult(Generic[T]):
    value: T
    text: str  # the reply that parsed
    model: str
    attempts: int
    prompt_tokens: int  # summed over all attempts
    completion_tokens: int
    cost_usd: float | None
    cached: bool  # every attempt came from the cache
    results: tuple[ChatResult, ...]


class _BadResponse(Exception):
    """The endpoint answered 200 with something that is not a usable completion."""


class LLMClient:
    def __init__(
        self,
        config: LLMConfig,
        *,
        cache: ResponseCache | None = None,
        meter: UsageMeter | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.cache = cache
        self.usage = meter or UsageMeter()
        self.limiter = AdaptiveLimiter(config.max_concurrency, config.min_concurrency)
        self.breaker = CircuitBreaker(
            config.breaker_threshold, config.breaker_cooldown_s, endpoint=config.base_url, conn_id=config.conn_id
        )
        self._rng = rng or random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._openai: openai.AsyncOpenAI | None = None
        self._pending: dict[str, asyncio.Future] = {}
        # Batch mode (datamind.llm.batch): a cache miss is handed to the collector instead of the endpoint.
        self.collector: Any | None = None

    def __repr__(self) -> str:
        return f"LLMClient(base_url={self.config.base_url!r}, cache={'on' if self.cache else 'off'})"

    # -- lifecycle ---------------------------------------------------------------------------
    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections opened on the running loop (the client stays usable)."""
        if self._openai is not None and self._loop is asyncio.get_running_loop():
            await self._openai.close()
        self._openai = None
        self._loop = None

    def _http(self) -> openai.AsyncOpenAI:
        # HTTP connections belong to one event loop; each run_all() has its own, so rebuild per loop.
        loop = asyncio.get_running_loop()
        if self._openai is None or self._loop is not loop:
            cfg = self.config
            self._openai = openai.AsyncOpenAI(
                base_url=cfg.base_url,
                api_key=cfg.api_key or "not-needed",
                max_retries=0,
                timeout=cfg.timeout_s,
                http_client=_http_transport(cfg.http_backend),
            )
            self._loop = loop
            self._pending = {}
        return self._openai

    # -- public calls ------------------------------------------------------------------------
    async def chat(
        self,
        role: str,
        messages: Sequence[Message],
        *,
        template_version: str,
        params: Mapping[str, Any] | None = None,
        sample_index: int = 0,
        use_cache: bool = True,
        grammar: str | None = None,
        _parse_attempt: int = 0,
    ) -> ChatResult:
        """One completion for ``messages`` with the model configured for ``role``.

        ``sample_index`` tells apart several samples of the same prompt (N trajectories per query): each
        index is cached separately, so a rerun replays every sample instead of collapsing them into one.
        ``grammar`` (GBNF) constrains the reply where the endpoint takes one (``LLMConfig.grammar``), and is
        dropped where it does not: the caller parses the reply either way.
        Raises :class:`EndpointUnavailable` (task-fatal) or :class:`LLMCallError` (this item only).
        """
        model = self.config.model_for(role)
        msgs = _check_messages(messages)
        merged = {**self.config.params_for(role), **(params or {})}
        field = GRAMMAR_FIELDS[self.config.grammar]
        if grammar and field:
            merged[field] = grammar
        _check_params(merged)
        key = cache_key(
            model=model,
            messages=msgs,
            params={**merged, **({"_parse_attempt": _parse_attempt} if _parse_attempt else {})},
            template_version=template_version,
            sample_index=sample_index,
        )
        if not use_cache:
            return await self._fresh(model, msgs, merged, key, template_version, store=False)
        if self.cache is not None:
            # A local lookup (~20 us) is cheaper inline than a thread hop; remote stores must not block the loop.
            if self.cache.root.is_local:
                record = self.cache.get(key)
            else:
                record = await asyncio.to_thread(self.cache.get, key)
            if record is not None:
                return self._from_cache(record, key)
        if self.collector is not None:  # a held answer, else BatchPending (or the failure once retries are spent)
            return self._from_cache(self.collector.miss(key, request_body(model, msgs, merged), template_version,
                                                        sample_index), key)  # fmt: skip
        self._http()  # bind per-loop state before touching _pending
        pending = self._pending.get(key)
        if pending is not None:  # the same request is already in flight: wait for it, pay once
            res = await asyncio.shield(pending)
            self.usage.record_call(model, res.prompt_tokens, res.completion_tokens, cached=True, cost_usd=res.cost_usd)
            return replace(res, cached=True)
        fut = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            res = await self._fresh(model, msgs, merged, key, template_version, store=True, sample_index=sample_index)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters re-raise it, nobody else has to
            raise
        else:
            fut.set_result(res)
            return res
        finally:
            self._pending.pop(key, None)

    async def chat_parsed(
        self,
        role: str,
        messages: Sequence[Message],
        parser: Callable[[str], T],
        *,
        template_version: str,
        params: Mapping[str, Any] | None = None,
        sample_index: int = 0,
        max_parse_retries: int = 2,
        feedback: bool = True,
        grammar: str | None = None,
    ) -> ParsedResult[T]:
        """``chat`` + ``parser(text)``; a ``ValueError`` from the parser (e.g. ``TagParseError``) means
        malformed output and the model is asked again, at most ``max_parse_retries`` more times.  With
        ``feedback`` the retry shows the model its bad reply and the reason.  Raises :class:`ParseFailure`
        carrying the last raw reply and reason when every attempt fails.  Any other exception from the
        parser is a bug and propagates.
        """
        convo = list(messages)
        results: list[ChatResult] = []
        reason = ""
        for attempt in range(max_parse_retries + 1):
            res = await self.chat(
                role,
                convo,
                template_version=template_version,
                params=params,
                sample_index=sample_index,
                grammar=grammar,
                _parse_attempt=attempt,
            )
            results.append(res)
            try:
                value = parser(res.text)
            except ValueError as exc:
                reason = str(exc) or type(exc).__name__
                if res.finish_reason == "length":
                    reason += " (the reply was cut off at the token limit)"
                self.usage.count("parse_retry" if attempt < max_parse_retries else "parse_failure")
                if feedback:
                    convo = [
                        *messages,
                        {"role": "assistant", "content": res.text},
                        {"role": "user", "content": _retry_note(reason)},
                    ]
                continue
            return ParsedResult(
                value=value,
                text=res.text,
                model=res.model,
                attempts=attempt + 1,
                prompt_tokens=sum(r.prompt_tokens for r in results),
                completion_tokens=sum(r.completion_tokens for r in results),
                cost_usd=_sum_cost(results),
                cached=all(r.cached for r in results),
                results=tuple(results),
            )
        raise ParseFailure(
            results[-1].text,
            reason,
            attempts=len(results),
            model=results[-1].model,
            prompt_tokens=sum(r.prompt_tokens for r in results),
            completion_tokens=sum(r.completion_tokens for r in results),
            cost_usd=_sum_cost(results),
            raw_attempts=[r.text for r in results],
        )

    # -- internals ---------------------------------------------------------------------------
    def _from_cache(self, record: Mapping[str, Any], key: str) -> ChatResult:
        # An answer a batch of this very shard paid for counts as this run's call, as an online answer does.
        paid = self.collector is not None and key in self.collector.paid
        pt, ct = int(record.get("prompt_tokens") or 0), int(record.get("completion_tokens") or 0)
        res = ChatResult(
            text=record["text"],
            model=record["model"],
            prompt_tokens=pt,
            completion_tokens=ct,
            cached=not paid,
            latency_s=float(record.get("latency_s") or 0.0),
            finish_reason=record.get("finish_reason"),
            cost_usd=self._cost(record["model"], pt, ct, batch=paid),
            cache_key=key,
        )
        self.usage.record_call(res.model, pt, ct, cached=not paid, cost_usd=res.cost_usd)
        return res

    def _cost(self, model: str, prompt_tokens: int, completion_tokens: int, batch: bool = False) -> float | None:
        price = self.config.price_for(model)
        return None if price is None else price.cost(int(prompt_tokens), int(completion_tokens), batch=batch)

    async def _fresh(
        self,
        model: str,
        msgs: list[dict[str, str]],
        params: dict[str, Any],
        key: str,
        template_version: str,
        *,
        store: bool,
        sample_index: int = 0,
    ) -> ChatResult:
        res = await self._request_with_retries(model, msgs, params, key)
        log.debug("LLM call %s model=%s prompt_tokens=%d completion_tokens=%d latency=%.3fs",
                  key[:12], model, res.prompt_tokens, res.completion_tokens, res.latency_s)  # fmt: skip
        self.usage.record_call(
            model,
            res.prompt_tokens,
            res.completion_tokens,
            cached=False,
            cost_usd=res.cost_usd,
            endpoint_cached=res.endpoint_cached_tokens,
            latency_s=res.latency_s,
        )
        # A reply cut at max_tokens is not a result: never cached, so a rerun (maybe with a larger budget,
        # or a model that finishes this time) asks again instead of replaying the cut text forever.
        if store and self.cache is not None and res.finish_reason != "length":
            record = cache_record(res, template_version, sample_index, params, msgs)
            try:
                await asyncio.to_thread(self.cache.put, key, record)
            except OSError as exc:  # the answer is still good; only a later rerun would pay again
                self.usage.count("cache_write_failed")
                log.warning("could not write LLM cache entry %s: %s", key[:12], exc)
        return res

    async def _request_with_retries(
        self, model: str, msgs: list[dict[str, str]], params: dict[str, Any], key: str
    ) -> ChatResult:
        cfg = self.config
        failures = throttles = 0
        while True:
            self.breaker.check()
            epoch = await self.limiter.acquire()
            t0 = time.perf_counter()
            try:
                self.breaker.check()  # it may have opened while we queued
                res = await self._request_once(model, msgs, params, key, t0)
            except openai.RateLimitError as exc:
                self.limiter.release()
                self.limiter.on_throttle(epoch)
                throttles += 1
                self.usage.count("throttled")
                if throttles > cfg.max_throttle_retries:
                    raise LLMCallError(
                        f"still rate limited (HTTP 429) after {throttles} attempts at {cfg.base_url}",
                        status_code=429,
                        reason_code="llm_rate_limited",
                    ) from None
                await asyncio.sleep(self._throttle_delay(exc, throttles - 1))
                continue
            except (EndpointUnavailable, LLMCallError):
                self.limiter.release()
                raise
            except _RETRYABLE as exc:
                self.limiter.release()
                problem = _describe_failure(exc, cfg.timeout_s)
                self.breaker.record_failure(problem)
                failures += 1
                self.usage.count("retry")
                if self.breaker.is_open:
                    raise EndpointUnavailable(self.breaker.message()) from None
                if failures > cfg.max_retries:
                    raise LLMCallError(
                        f"gave up after {failures} attempts at {cfg.base_url}: {problem}",
                        status_code=getattr(exc, "status_code", None),
                        reason_code="llm_retries_exhausted",
                    ) from None
                delay = backoff_delay(failures - 1, cfg.backoff_base_s, cfg.backoff_max_s, self._rng)
                log.warning("LLM request failed (%s); retry %d/%d in %.2fs", problem, failures, cfg.max_retries, delay)
                await asyncio.sleep(delay)
                continue
            except BaseException:
                self.limiter.release()
                raise
            self.limiter.release()
            self.limiter.on_success()
            self.breaker.record_success()
            return res

    async def _request_once(
        self, model: str, msgs: list[dict[str, str]], params: dict[str, Any], key: str, t0: float
    ) -> ChatResult:
        body = request_body(model, msgs, params)
        try:
            # The client's timeout bounds each socket read; this bounds the whole exchange (a server that
            # trickles bytes forever must not hold a slot forever).
            async with asyncio.timeout(self.config.timeout_s):
                # client.post is the openai client's route for raw requests: the same transport, auth and
                # error classes (status -> RateLimitError, InternalServerError, ...) as
                # chat.completions.create, without its recursive TypedDict transform of the body and the
                # response model construction: together ~0.7 ms of CPU per call, which at 32 requests in
                # flight on 2 shared cores is ~10% of the ideal rate (scripts/bench_llm.py).
                http = await self._http().post(
                    "/chat/completions", body=body, cast_to=httpx2.Response, options=_REQUEST_OPTIONS
                )
                payload = http.json()
        except openai.APIStatusError as exc:
            _raise_for_status(exc, model, self.config)
            raise
        latency = time.perf_counter() - t0
        res = completion_result(payload, model, key, latency)  # _BadResponse before anything is counted
        if not isinstance(payload.get("usage"), dict):
            self.usage.count("usage_missing")
        return replace(res, cost_usd=self._cost(model, res.prompt_tokens, res.completion_tokens))

    def _throttle_delay(self, exc: openai.RateLimitError, n: int) -> float:
        cfg = self.config
        headers = exc.response.headers if exc.response is not None else {}
        wait = None
        for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):  # an HTTP date counts as absent
            try:
                wait = float(headers[name]) * scale
                break
            except (KeyError, TypeError, ValueError):
                continue
        if wait is None or wait < 0:
            return backoff_delay(n, cfg.backoff_base_s, cfg.backoff_max_s, self._rng)
        # Trust the server's hint (it knows when capacity frees up), within reason; a little jitter so the
        # whole throttled burst does not come back in the same millisecond.
        return min(_MAX_RETRY_AFTER_S, wait) * (1 + 0.2 * self._rng.random())


def request_body(model: str, msgs: list[dict[str, str]], params: Mapping[str, Any]) -> dict[str, Any]:
    """The chat-completions body of one call, online or as one line of a batch."""
    return {"model": model, "messages": msgs, **{k: v for k, v in params.items() if v is not None}}


def cache_record(
    res: ChatResult, template_version: str, sample_index: int, params: Mapping[str, Any], msgs: list[dict[str, str]]
) -> dict[str, Any]:
    """What the response cache keeps of an answer, however it was fetched."""
    return {
        "model": res.model,
        "text": res.text,
        "finish_reason": res.finish_reason,
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens,
        "latency_s": round(res.latency_s, 4),
        "template_version": template_version,
        "sample_index": sample_index,
        "params": dict(params),
        "messages": msgs,
        "created_at": datetime.now(UTC).isoformat(),
    }


def completion_result(payload: Any, model: str, key: str, latency_s: float = 0.0) -> ChatResult:
    """A ChatResult from a chat-completions response body (``_BadResponse`` when it is not one)."""
    text, finish_reason, usage = _read_completion(payload)
    usage = usage or {}
    prompt_tokens = _as_int(usage.get("prompt_tokens"))
    return ChatResult(
        text=text,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=_as_int(usage.get("completion_tokens")),
        cached=False,
        latency_s=latency_s,
        finish_reason=finish_reason,
        cache_key=key,
        endpoint_cached_tokens=min(prompt_tokens, endpoint_cached_tokens(usage)),
    )


_RETRYABLE = (
    openai.APITimeoutError,
    openai.APIConnectionError,
    openai.InternalServerError,
    openai.APIResponseValidationError,
    openai.APIStatusError,  # only the 5xx/408/409 that _raise_for_status lets through
    TimeoutError,
    json.JSONDecodeError,
    _BadResponse,
)


def aiohttp_available() -> bool:
    return importlib.util.find_spec("aiohttp") is not None


def _http_transport(backend: str) -> httpx2.AsyncClient | None:
    """The HTTP client under the openai client; None keeps the SDK's default (HTTPX2)."""
    if backend == "aiohttp" or (backend == "auto" and aiohttp_available()):
        return openai.DefaultAioHttpClient()  # raises a clear RuntimeError when forced but not installed
    return None


def _read_completion(payload: Any) -> tuple[str, str | None, Mapping[str, Any] | None]:
    """(text, finish_reason, usage) from a chat-completions body; _BadResponse when it is not one."""
    if not isinstance(payload, dict):
        raise _BadResponse(f"the endpoint returned a JSON {type(payload).__name__}, not a completion object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _BadResponse("the endpoint returned no choices")
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _BadResponse("the endpoint returned a choice without a message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _BadResponse(f"message content is a {type(content).__name__}, not text")
    usage = payload.get("usage")
    return content or "", choice.get("finish_reason"), usage if isinstance(usage, dict) else None


def endpoint_cached_tokens(usage: Mapping[str, Any]) -> int:
    """Prompt tokens the endpoint answered from its own prefix cache, 0 where it does not say."""
    details = usage.get("prompt_tokens_details")
    return _as_int(details.get("cached_tokens")) if isinstance(details, dict) else 0


def _as_int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def _raise_for_status(exc: openai.APIStatusError, model: str, cfg: LLMConfig) -> None:
    """Turn non-retryable HTTP statuses into our errors; retryable ones return and are re-raised."""
    status = exc.status_code
    if status >= 500 or status in (408, 409, 429):
        return
    where = f"{cfg.base_url} (connection {cfg.conn_id!r})"
    if status in (401, 403):
        raise EndpointUnavailable(
            f"LLM endpoint {where} refused our credentials (HTTP {status}): check the connection's API key"
        ) from None
    if status == 404:
        raise EndpointUnavailable(
            f"LLM endpoint {where} answered 404 for model {model!r}: check the base URL and the model names"
        ) from None
    raise LLMCallError(
        f"request rejected by the LLM endpoint (HTTP {status}): {_short(exc.message)}",
        status_code=status,
        reason_code="llm_request_rejected",
    ) from None


def _describe_failure(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, (openai.APITimeoutError, TimeoutError)):
        return f"no answer within {timeout_s:g}s (timeout)"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        kind = type(cause).__name__ if cause else "APIConnectionError"
        return f"connection failed ({kind}: {_short(str(cause or exc))})"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {_short(exc.message)}"
    if isinstance(exc, (json.JSONDecodeError, openai.APIResponseValidationError)):
        return f"malformed response body ({_short(str(exc))})"
    return _short(str(exc)) or type(exc).__name__


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    if isinstance(messages, (str, bytes)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in _ROLES:
            raise ValueError(f"message {i}: role must be one of {sorted(_ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"message {i}: content must be a string, got {type(content).__name__}")
        out.append({"role": role, "content": content})
    return out


def _check_params(params: Mapping[str, Any]) -> None:
    for name, why in _FORBIDDEN_PARAMS.items():
        if params.get(name) not in (None, False, 1):
            raise ValueError(f"sampling parameter {name!r} is not supported: {why}")
    for name in ("model", "messages"):
        if name in params:
            raise ValueError(f"{name!r} cannot be passed in params")


def _sum_cost(results: Sequence[ChatResult]) -> float | None:
    costs = [r.cost_usd for r in results if r.cost_usd is not None]
    return sum(costs) if costs else None


def _retry_note(reason: str) -> str:
    return (
        f"That reply could not be used: {reason}. "
        "Reply again, following the required output format exactly, with every tag opened and closed."
    )
