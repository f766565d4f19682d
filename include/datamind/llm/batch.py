"""Batch mode for the LLM stages: the OpenAI Batch API (``/v1/files`` + ``/v1/batches``), about half the price.

A shard in batch mode advances in passes, each an ordinary run of the stage's own shard function:

1. **A dry pass**: the stage runs on a :class:`~datamind.storage.ScratchRoot` (its writes are dropped) with
   the client's :class:`Collector` on.  Every answer the response cache holds is used as an online run
   would use it; every miss is collected with its request body and cache key and fails its item with
   :class:`~datamind.llm.errors.BatchPending`, which each stage already handles as one failed call.
2. **Nothing missed**: the real pass runs the stage on the real root, every answer from the cache, so it
   writes the rows an online run writes.  A miss there (the stage asked something no dry pass asked) is
   task-fatal and writes nothing; the retry starts with dry passes again.
3. **Something missed**: the misses go out as one batch, the same bodies as online calls.  Its id is
   stable in the shard and the requests, recorded under ``cache/llm_batches/`` before and after creating
   it and stored in the batch's metadata, so a task killed at any point finds its batch again and never
   pays for it twice.  The caller waits (a deferrable task waits on the triggerer, holding no worker
   slot), then :func:`absorb` writes each answer into the response cache, exactly where an online call
   would have.  A failed or expired request is recorded and asked again in a later batch, up to
   ``max_attempts`` batches, then its item fails with the reason.  Result lines are checked one by one: a
   line that matches no request (not JSON, no string ``custom_id``, an id the batch never sent) is kept in
   the submission record with its line number and reason, and the requests left without an answer fail
   and are asked again the same way.

Work whose next request needs the previous answer (a chain's next hop, a re-ask after a malformed reply)
takes one batch per step.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import posixpath
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datamind.assets import DIRS
from datamind.ids import stable_id
from datamind.llm.cache import ResponseCache
from datamind.llm.client import cache_record, completion_result
from datamind.llm.errors import BatchPending, EndpointUnavailable, LLMCallError
from datamind.storage import DataRoot, ScratchRoot

log = logging.getLogger(__name__)

ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
METADATA_KEY = "datamind_batch"
DONE = ("completed",)
ENDED = ("completed", "failed", "expired", "cancelled")
MAX_ATTEMPTS = 3  # batches a request may take before its item fails with the reason
# Result files are the endpoint's, of any length: the submission record keeps the first unusable lines (all
# are counted and logged), each with an excerpt
MAX_BAD_LINES_KEPT = 1000
BAD_LINE_EXCERPT = 300


# -- what is stored under cache/llm_batches/ -------------------------------------------------------------------
class BatchStore:
    """Submissions (``submitted/<shard>/<id>.json``), answers the response cache does not keep (``held/``: a reply cut
    at the token limit, handed to its caller once as an online call would be) and failed requests
    (``failed/``: the batches each failed in, and why)."""

    def __init__(self, root: DataRoot) -> None:
        self.root = root
        self.base = DIRS["llm_batches"]

    def _get(self, *parts: str) -> dict | None:
        try:
            return json.loads(self.root.read_bytes(posixpath.join(self.base, *parts)))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _put(self, doc: Mapping, *parts: str) -> None:
        self.root.write_text(posixpath.join(self.base, *parts), json.dumps(doc, sort_keys=True))

    @staticmethod
    def _scope_dir(scope: str) -> str:
        # one folder per shard: its real pass reads only its own submissions, at any corpus size
        return stable_id("llm-batch-scope", scope)

    def submitted_keys(self, scope: str) -> set[str]:
        """Every request the batches of ``scope`` (a shard) carried."""
        keys: set[str] = set()
        for path in self.root.glob(self.base, "submitted", self._scope_dir(scope), "*.json"):
            keys.update(json.loads(self.root.read_bytes(self.root.rel(path)))["requests"])
        return keys

    def submission(self, scope: str, batch_key: str) -> dict | None:
        return self._get("submitted", self._scope_dir(scope), f"{batch_key}.json")

    def record_submission(self, doc: Mapping) -> None:
        self._put(doc, "submitted", self._scope_dir(doc["scope"]), f"{doc['batch_key']}.json")

    def held(self, key: str) -> dict | None:
        return self._get("held", key[:2], f"{key}.json")

    def hold(self, key: str, record: Mapping) -> None:
        self._put(record, "held", key[:2], f"{key}.json")

    def failure(self, key: str) -> dict | None:
        return self._get("failed", key[:2], f"{key}.json")

    def record_failure(self, key: str, batch_id: str, reason_code: str, reason: str) -> None:
        """Idempotent per batch: absorbing the same batch twice counts it once."""
        doc = self.failure(key) or {"batches": []}
        if batch_id not in doc["batches"]:
            doc["batches"].append(batch_id)
        self._put({**doc, "reason_code": reason_code, "reason": reason}, "failed", key[:2], f"{key}.json")

    def attempts(self, key: str) -> int:
        doc = self.failure(key)
        return len(doc["batches"]) if doc else 0


# -- the client's side: collecting misses -------------------------------------------------------------------------
@dataclass
class Collector:
    """Set as ``LLMClient.collector`` for a pass.  ``strict``: the real pass, where a miss is task-fatal."""

    store: BatchStore
    max_attempts: int = MAX_ATTEMPTS
    strict: bool = False
    paid: frozenset[str] = frozenset()  # requests this shard's own batches answered (not cache hits to it)
    requests: dict[str, dict] = field(default_factory=dict)  # cache key -> body, template version, sample index
    given_up: dict[str, str] = field(default_factory=dict)  # cache key -> reason code

    def miss(self, key: str, body: dict, template_version: str, sample_index: int) -> dict:
        """The answer a batch left for this request outside the cache (a cut reply), or an exception."""
        held = self.store.held(key)
        if held is not None:
            return held
        failure = self.store.failure(key)
        if failure is not None and len(failure["batches"]) >= self.max_attempts:
            self.given_up[key] = failure["reason_code"]
            raise LLMCallError(
                f"batch mode: {failure['reason']} (in {len(failure['batches'])} batches)",
                reason_code=failure["reason_code"],
            )
        if self.strict:
            raise EndpointUnavailable(
                f"batch mode: request {key[:12]} was asked by no dry pass and answered by no batch "
                "(the stage is not deterministic given its answers); the retry collects it again"
            )
        self.requests[key] = {"body": body, "template_version": template_version, "sample_index": sample_index}
        raise BatchPending(f"request {key[:12]} waits for the shard's next batch")


# -- submitting, polling, absorbing -----------------------------------------------------------------------------
def batch_key(scope: str, keys, store: BatchStore) -> str:
    """Stable in the shard, its requests and how often they failed: a rerun finds the same batch, a retry of
    failed requests makes a new one."""
    keys = sorted(keys)
    return stable_id("llm-batch", scope, keys, [store.attempts(k) for k in keys], length=20)


def _jsonl(requests: Mapping[str, dict]) -> bytes:
    out = io.StringIO()
    for key in sorted(requests):
        line = {"custom_id": key, "method": "POST", "url": ENDPOINT, "body": requests[key]["body"]}
        out.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
    return out.getvalue().encode("utf-8")


async def find_or_submit(http, store: BatchStore, scope: str, requests: Mapping[str, dict]) -> dict:
    """The submission record of the batch for these requests: found (recorded, or by its metadata at the
    endpoint after a kill between creating and recording it) or created now."""
    bkey = batch_key(scope, requests, store)
    doc = store.submission(scope, bkey)
    if doc is not None and doc.get("batch_id"):
        return doc
    doc = {"batch_key": bkey, "scope": scope, "requests": dict(requests), "batch_id": None}
    store.record_submission(doc)  # before creating it: the requests' bodies for absorbing are never lost
    found = await _find_by_metadata(http, bkey)
    if found is None:
        upload = await http.files.create(file=(f"{bkey}.jsonl", _jsonl(requests)), purpose="batch")
        found = await http.batches.create(
            input_file_id=upload.id,
            endpoint=ENDPOINT,
            completion_window=COMPLETION_WINDOW,
            metadata={METADATA_KEY: bkey, "scope": scope[:500]},
        )
        log.info("batch %s submitted: %d requests (%s)", found.id, len(requests), scope)
    else:
        log.info("batch %s found again by its metadata (%s)", found.id, scope)
    doc = {**doc, "batch_id": found.id, "submitted_at": time.time()}
    store.record_submission(doc)
    return doc


async def _find_by_metadata(http, bkey: str):
    async for batch in http.batches.list(limit=100):
        if (batch.metadata or {}).get(METADATA_KEY) == bkey and batch.status not in ("failed", "cancelled"):
            return batch
    return None


async def status(http, batch_id: str) -> dict:
    b = await http.batches.retrieve(batch_id)
    counts = b.request_counts.model_dump() if b.request_counts is not None else {}
    return {"id": b.id, "status": b.status, "request_counts": counts}


async def wait(http, batch_id: str, *, poll_s: float = 30.0, max_poll_s: float = 600.0, timeout_s: float = 86400.0):
    """Poll until the batch ends, backing off from ``poll_s`` to ``max_poll_s`` (what the trigger does)."""
    deadline, delay = time.monotonic() + timeout_s, poll_s
    while True:
        s = await status(http, batch_id)
        if s["status"] in ENDED:
            return s
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch_id} still {s['status']} after {timeout_s:.0f} s")
        await asyncio.sleep(delay)
        delay = min(max_poll_s, delay * 1.5)


async def absorb(http, store: BatchStore, cache: ResponseCache, doc: Mapping, price=None) -> dict[str, Any]:
    """Write an ended batch's answers where online calls write them; record every other request's failure.

    The result files come from the endpoint and are checked line by line: one unusable line costs only
    itself.  A line that names one of the batch's requests but carries no usable answer fails that request,
    which is asked again in a later batch.  A line that names none (not JSON, not an object, no string
    ``custom_id``, an id the batch never sent, a second line for a request) cannot be matched to anything:
    it is kept in the submission record (``bad_lines``: file, line number, reason) and the requests it may
    have answered, missing from the output, fail and are asked again like any unanswered request."""
    batch = await http.batches.retrieve(doc["batch_id"])
    requests = doc["requests"]
    seen: set[str] = set()
    counts = {"answered": 0, "held": 0, "failed": 0, "expired": 0, "bad_lines": 0, "prompt_tokens": 0,
              "completion_tokens": 0}  # fmt: skip
    bad_lines: list[dict] = []
    for kind, file_id in (("output", batch.output_file_id), ("error", batch.error_file_id)):
        for number, text, line in await _lines(http, file_id):
            key, problem = _line_request(line, requests, seen)
            if problem is not None:
                counts["bad_lines"] += 1
                if len(bad_lines) < MAX_BAD_LINES_KEPT:
                    bad_lines.append({"file": kind, "file_id": file_id, "line": number, "reason": problem,
                                      "excerpt": text[:BAD_LINE_EXCERPT]})  # fmt: skip
                    log.warning("batch %s, %s file %s line %d: %s", batch.id, kind, file_id, number, problem)
                continue
            seen.add(key)
            code, why = _line_failure(line)
            if code is not None:
                store.record_failure(key, batch.id, code, f"{why} (batch {batch.id}, {kind} line {number})")
                counts["expired" if code == "llm_batch_expired" else "failed"] += 1
                continue
            req = requests[key]
            try:
                res = completion_result(line["response"].get("body"), req["body"]["model"], key)
            except Exception as exc:  # noqa: BLE001 - one unusable line costs only its request
                store.record_failure(key, batch.id, "llm_bad_response",
                                     f"unusable answer: {exc} (batch {batch.id}, {kind} line {number})")  # fmt: skip
                counts["failed"] += 1
                continue
            params = {k: v for k, v in req["body"].items() if k not in ("model", "messages")}
            record = cache_record(res, req["template_version"], req["sample_index"], params, req["body"]["messages"])
            if res.finish_reason == "length":  # never cached (as online); handed to its caller once
                store.hold(key, record)
                counts["held"] += 1
            else:
                cache.put(key, record)
                counts["answered"] += 1
            counts["prompt_tokens"] += res.prompt_tokens
            counts["completion_tokens"] += res.completion_tokens
    if counts["bad_lines"] > len(bad_lines):
        log.warning("batch %s: %d unusable result lines, the first %d kept in its submission record",
                    batch.id, counts["bad_lines"], len(bad_lines))  # fmt: skip
    for key in sorted(set(requests) - seen):
        if batch.status in DONE:  # the endpoint finished but left no usable line for it
            why = f"batch {batch.id} completed without a usable line for this request"
            if counts["bad_lines"]:
                why += f" ({counts['bad_lines']} unusable lines are kept in its submission record)"
            store.record_failure(key, batch.id, "llm_bad_response", why)
            counts["failed"] += 1
        else:  # a batch that expired or failed whole answers nothing
            store.record_failure(key, batch.id, "llm_batch_expired", f"batch {batch.id} ended {batch.status}")
            counts["expired"] += 1
    if price is not None:
        counts["cost_usd"] = price.cost(counts["prompt_tokens"], counts["completion_tokens"], batch=True)
    store.record_submission({**doc, "absorbed": counts, "status": batch.status, "bad_lines": bad_lines})
    return counts


def _line_request(line: Any, requests: Mapping[str, dict], seen: set[str]) -> tuple[str | None, str | None]:
    """(the request a result line answers, None) or (None, why it answers none of this batch's requests)."""
    if isinstance(line, _Unparsed):
        return None, f"not JSON: {line.error}"
    if not isinstance(line, dict):
        return None, f"a JSON {_json_type(line)}, not an object"
    key = line.get("custom_id")
    if key is None:
        return None, "no custom_id"
    if not isinstance(key, str):
        return None, f"custom_id is a JSON {_json_type(key)}, not a string"
    if key not in requests:
        return None, f"custom_id {key[:80]!r} is not a request of this batch"
    if key in seen:
        return None, f"a second line for request {key[:12]} (the first one counts)"
    return key, None


def _line_failure(line: dict) -> tuple[str | None, str]:
    """(reason code, why) when a request's line carries no answer; (None, "") when it has a 200 response."""
    response, error = line.get("response"), line.get("error")
    if error is not None and not isinstance(error, dict):
        return "llm_bad_response", f"the line's error is a JSON {_json_type(error)}, not an object"
    if response is not None and not isinstance(response, dict):
        return "llm_bad_response", f"the line's response is a JSON {_json_type(response)}, not an object"
    if error or (response or {}).get("status_code") != 200:
        why = str((error or {}).get("message") or _error_message(response or {}) or "no answer")[:500]
        code = "llm_batch_expired" if (error or {}).get("code") == "batch_expired" else "llm_request_rejected"
        return code, why
    return None, ""


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


@dataclass(frozen=True)
class _Unparsed:
    error: str


async def _lines(http, file_id: str | None) -> list[tuple[int, str, Any]]:
    """(1-based line number, its text, its JSON or ``_Unparsed``) of every non-blank line of a result file."""
    if not file_id:
        return []
    raw = await http.files.content(file_id)
    lines = []
    for number, text in enumerate(raw.text.splitlines(), 1):
        if not text.strip():
            continue
        try:
            lines.append((number, text, json.loads(text)))
        except (ValueError, RecursionError) as exc:  # invalid JSON, an int past Python's digit cap, deep nesting
            lines.append((number, text, _Unparsed(f"{type(exc).__name__}: {exc}"[:200])))
    return lines


def _error_message(response: Mapping) -> str:
    body = response.get("body") if isinstance(response, Mapping) else None
    err = body.get("error") if isinstance(body, Mapping) else None
    msg = err.get("message") if isinstance(err, Mapping) else None
    return f"HTTP {response.get('status_code')}: {msg}" if msg else ""


# -- the driver ---------------------------------------------------------------------------------------------------
ShardFn = Callable[[DataRoot, Any], dict]


@dataclass
class Step:
    """Where a batched shard stands: ``summary`` once it is written, else the batch to wait for."""

    summary: dict | None = None
    submission: dict | None = None
    absorbed: list[dict] = field(default_factory=list)  # the batches this step took in


def step(run_shard: ShardFn, root: DataRoot, client, scope: str, max_attempts: int = MAX_ATTEMPTS) -> Step:
    """Advance a shard as far as the cache allows: dry passes, taking in every batch that has ended, then the
    real pass when nothing is missing; else the (found or new) batch of what is missing, still running.
    Safe to call again at any time: after a kill, a retry or the trigger's event."""
    if client.cache is None:
        raise ValueError("batch mode needs the response cache: answers reach the stage through it")
    store, absorbed = BatchStore(root), []
    while True:
        client.collector = Collector(store, max_attempts)
        try:
            try:
                run_shard(ScratchRoot(root), client)
            except BatchPending:
                pass  # work that stops at its first missing answer (an evaluation): its misses are collected
            missing = dict(client.collector.requests)
        finally:
            client.collector = None
        if not missing:
            client.collector = Collector(store, max_attempts, strict=True, paid=frozenset(store.submitted_keys(scope)))
            try:
                return Step(summary=run_shard(root, client), absorbed=absorbed)
            finally:
                client.collector = None
        doc, state = _run(client, lambda http, m=missing: _submit_and_check(http, store, scope, m))
        if state not in ENDED:
            return Step(submission=doc, absorbed=absorbed)
        if doc.get("absorbed") is not None:  # taken in, and the same requests missing again: never loop
            raise RuntimeError(f"batch {doc['batch_id']} was taken in but its answers are still missing")
        absorbed.append(
            {"batch_id": doc["batch_id"], "requests": len(doc["requests"]), **absorb_ended(client, root, doc)}
        )


async def _submit_and_check(http, store: BatchStore, scope: str, missing: dict) -> tuple[dict, str]:
    doc = await find_or_submit(http, store, scope, missing)
    return doc, (await status(http, doc["batch_id"]))["status"]


def _run(client, call: Callable[[Any], Any]):
    """``call(http)`` on a fresh loop with the client's HTTP connection (closed after)."""

    async def go():
        try:
            return await call(client._http())
        finally:
            await client.aclose()

    return asyncio.run(go())


def absorb_ended(client, root: DataRoot, doc: Mapping) -> dict:
    """An ended batch's answers into the cache; the price, when the Connection has one for the model."""
    model = next(iter(doc["requests"].values()))["body"]["model"]
    price = client.config.price_for(model)
    return _run(client, lambda http: absorb(http, BatchStore(root), client.cache, doc, price))


def run_batched(
    run_shard: ShardFn,
    root: DataRoot,
    client,
    scope: str,
    *,
    poll_s: float = 30.0,
    max_attempts: int = MAX_ATTEMPTS,
    on_submit: Callable[[dict], None] | None = None,
) -> dict:
    """A shard in batch mode, waiting in this process (a script or a test; a DAG task defers instead)."""
    rounds: list[dict] = []
    while True:
        s = step(run_shard, root, client, scope, max_attempts)
        rounds += s.absorbed
        if s.summary is not None:
            return {**s.summary, "batches": rounds}
        if on_submit is not None:
            on_submit(s.submission)
        batch_id = s.submission["batch_id"]
        _run(client, lambda http, b=batch_id: wait(http, b, poll_s=poll_s, max_poll_s=max(poll_s, 60.0)))
