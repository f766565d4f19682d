"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol, for tests and benchmarks.

It stands in for the hosted LLM (which cannot be reached here); the real ``openai`` client talks to it over
TCP.  Written on stdlib asyncio (HTTP/1.1 with keep-alive) and run on its own thread and event loop, so it
serves sync tests, async tests and the benchmark alike.

Scripting, in order of precedence for each ``POST /v1/chat/completions``:
  1. ``server.script(Fault..., None, ...)`` queues one outcome per incoming request (``None`` = answer normally);
  2. ``responder(body) -> str | Fault`` decides by request content (e.g. by prompt text);
  3. otherwise the reply is ``default_reply``.

The Batch API too (``/v1/files``, ``/v1/batches``): an uploaded JSONL of chat-completions requests is answered
line by line as above once ``batch_delay_s`` has passed since the batch was created (polling sees
``validating``, ``in_progress``, then ``completed`` with output and error files); ``batch_outcome(line)`` may
return ``"failed"`` (a 400 line in the error file) or ``"expired"`` for a line, ``expire_batches`` ends
every batch ``expired`` unanswered, and ``batch_rewrite(output_line)`` may return the text to write instead
of an output line (a malformed result line; ``None`` keeps it).

Usage fields are deterministic so tests can compute expected tokens by hand:
prompt_tokens = whitespace-separated words over all message contents, completion_tokens = words in the reply.

Run standalone (used by ``scripts/bench_llm.py`` so the server gets its own process and core):
    python tests/fakes/openai_server.py --latency 0.2 [--port 0]     # prints "PORT <n>" then serves until killed
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour for one request."""

    kind: str  # rate_limit | status | hang | malformed | empty_choices | garbage | disconnect | cut
    status: int = 200
    retry_after: float | None = None
    seconds: float = 0.0
    text: str = ""  # cut: the reply that gets cut in half

    @classmethod
    def rate_limit(cls, retry_after: float | None = 0.01) -> Fault:
        return cls("rate_limit", status=429, retry_after=retry_after)

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        return cls("status", status=status)

    @classmethod
    def http_status(cls, status: int) -> Fault:
        return cls("status", status=status)

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Fault:
        """Accept the request and say nothing for ``seconds`` (longer than the client's timeout)."""
        return cls("hang", seconds=seconds)

    @classmethod
    def malformed(cls) -> Fault:
        return cls("malformed")

    @classmethod
    def empty_choices(cls) -> Fault:
        return cls("empty_choices")

    @classmethod
    def garbage(cls) -> Fault:
        """A 200 whose body is not JSON at all (a proxy's HTML page)."""
        return cls("garbage")

    @classmethod
    def disconnect(cls) -> Fault:
        """Read the request, then close the connection without a byte of response."""
        return cls("disconnect")

    @classmethod
    def cut(cls, text: str) -> Fault:
        """The reply stops halfway with ``finish_reason: length``, as when a server runs out of tokens."""
        return cls("cut", text=text)


Responder = Callable[[dict], "str | Fault"]


def count_words(text: str | None) -> int:
    return len(text.split()) if text else 0


class FakeOpenAIServer:
    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        responder: Responder | None = None,
        default_reply: str = "<answer>ok</answer>",
        host: str = "127.0.0.1",
        port: int = 0,
        record_bodies: bool = True,
        api_key: str | None = None,
        prefix_cache: bool = False,
    ) -> None:
        self.latency_s = latency_s
        # like a provider's prompt caching: a prompt's longest word prefix shared with an earlier prompt is
        # reported as usage.prompt_tokens_details.cached_tokens
        self.prefix_cache = prefix_cache
        self._prompts: list[list[str]] = []
        self.responder = responder
        self.default_reply = default_reply
        self.host = host
        self._port = port
        self.record_bodies = record_bodies
        self.api_key = api_key  # when set, requests without "Authorization: Bearer <api_key>" get a 401
        self.bodies: list[dict] = []  # every chat-completions request body, in arrival order
        self.faults_served: list[str] = []
        self._script: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._count = 0
        self._max_in_flight = 0
        self._in_flight = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._handlers: set[asyncio.Task] = set()
        # Batch API state
        self.batch_delay_s = 0.0
        self.batch_outcome: Callable[[dict], str | None] | None = None
        self.expire_batches = False
        self.batch_rewrite: Callable[[dict], str | None] | None = None
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.batch_bodies: list[dict] = []  # every request body that arrived inside a batch

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="fake-openai", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake OpenAI server did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self._port}/v1"

    # -- scripting and observation --------------------------------------------------------------
    def script(self, *outcomes: Fault | None) -> None:
        """Queue one outcome per future request, in order (``None`` answers normally)."""
        with self._lock:
            self._script.extend(outcomes)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.bodies.clear()
            self.faults_served.clear()
            self._count = 0
            self._max_in_flight = 0
            self.files.clear()
            self.batches.clear()
            self.batch_bodies.clear()
            self._prompts.clear()
        self.prefix_cache = False
        self.responder = None
        self.latency_s = 0.0
        self.batch_delay_s = 0.0
        self.batch_outcome = None
        self.expire_batches = False
        self.batch_rewrite = None

    @property
    def request_count(self) -> int:
        """Chat-completion requests received (faulted ones included)."""
        with self._lock:
            return self._count

    @property
    def max_in_flight(self) -> int:
        with self._lock:
            return self._max_in_flight

    # -- serving ---------------------------------------------------------------------------------
    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._on_connection, self.host, self._port, backlog=1024)
        )
        self._port = self._server.sockets[0].getsockname()[1]
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                method, path, headers, body = request
                if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
                    await _respond(writer, 401, {"error": {"message": "invalid api key", "type": "auth"}})
                    continue
                if path.split("?")[0].rstrip("/").split("/v1", 1)[-1].startswith(("/files", "/batches")):
                    await self._batch_api(method, path, headers, body, writer)
                    continue
                keep_alive = await self._dispatch(method, path, body, reader, writer)
                if not keep_alive or headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _dispatch(
        self, method: str, path: str, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if method == "GET" and path.rstrip("/").endswith("/models"):
            await _respond(writer, 200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
            return True
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            await _respond(writer, 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}})
            return True
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            await _respond(writer, 400, {"error": {"message": "request body is not JSON", "type": "invalid_request"}})
            return True
        with self._lock:
            self._count += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            if self.record_bodies:
                self.bodies.append(body)
            scripted = self._script.popleft() if self._script else None
        try:
            return await self._answer(body, scripted, reader, writer)
        finally:
            with self._lock:
                self._in_flight -= 1

    async def _answer(
        self, body: dict, scripted: Fault | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        outcome: str | Fault = scripted if scripted is not None else self._reply_for(body)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if isinstance(outcome, Fault):
            with self._lock:
                self.faults_served.append(outcome.kind)
            return await _serve_fault(outcome, reader, writer)
        reply = completion_body(body, outcome)
        if self.prefix_cache:
            words = " ".join(str(m.get("content") or "") for m in body.get("messages", [])).split()
            with self._lock:
                cached = max((_shared_prefix(words, earlier) for earlier in self._prompts), default=0)
                self._prompts.append(words)
            reply["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
        await _respond(writer, 200, reply)
        return True

    # -- the Batch API ---------------------------------------------------------------------------------
    async def _batch_api(self, method: str, path: str, headers: dict, raw: bytes, writer) -> None:
        route, _, query = path.partition("?")
        parts = route.rstrip("/").split("/v1", 1)[-1].strip("/").split("/")
        args = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        with self._lock:
            if method == "POST" and parts == ["files"]:
                fields = _multipart(headers.get("content-type", ""), raw)
                fid = f"file-{len(self.files) + 1:04d}"
                data = fields["file"][1]
                self.files[fid] = {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                   "filename": fields["file"][0], "purpose": fields["purpose"][1].decode(),
                                   "status": "processed", "data": data}  # fmt: skip
                status, payload = 200, {k: v for k, v in self.files[fid].items() if k != "data"}
            elif method == "GET" and len(parts) == 3 and parts[0] == "files" and parts[2] == "content":
                f = self.files.get(parts[1])
                if f is None:
                    status, payload = 404, {"error": {"message": "no such file", "type": "not_found"}}
                else:
                    status, payload = 200, f["data"]
            elif method == "POST" and parts == ["batches"]:
                req = json.loads(raw)
                if req.get("input_file_id") not in self.files:
                    status, payload = 400, {"error": {"message": "unknown input file", "type": "invalid_request"}}
                else:
                    bid = f"batch_{len(self.batches) + 1:04d}"
                    self.batches[bid] = {
                        "id": bid, "object": "batch", "endpoint": req["endpoint"], "errors": None,
                        "input_file_id": req["input_file_id"], "completion_window": req["completion_window"],
                        "status": "validating", "output_file_id": None, "error_file_id": None,
                        "created_at": int(time.time()), "metadata": req.get("metadata") or {},
                        "request_counts": {"total": 0, "completed": 0, "failed": 0}, "_t0": time.monotonic(),
                    }  # fmt: skip
                    status, payload = 200, self._batch_view(bid)
            elif method == "GET" and parts == ["batches"]:
                ids = sorted(self.batches, reverse=True)
                if "after" in args and args["after"] in ids:
                    ids = ids[ids.index(args["after"]) + 1 :]
                page = ids[: int(args.get("limit", 20))]
                status, payload = 200, {"object": "list", "data": [self._batch_view(b) for b in page],
                                        "first_id": page[0] if page else None, "last_id": page[-1] if page else None,
                                        "has_more": len(ids) > len(page)}  # fmt: skip
            elif method == "GET" and len(parts) == 2 and parts[0] == "batches" and parts[1] in self.batches:
                status, payload = 200, self._batch_view(parts[1])
            elif method == "POST" and len(parts) == 3 and parts[2] == "cancel" and parts[1] in self.batches:
                self.batches[parts[1]]["status"] = "cancelled"
                status, payload = 200, self._batch_view(parts[1])
            else:
                status, payload = 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}}
        if isinstance(payload, bytes):
            await _respond_raw(writer, status, payload, {})
        else:
            await _respond(writer, status, payload)

    def _batch_view(self, bid: str) -> dict:
        b = self.batches[bid]
        if b["status"] in ("validating", "in_progress"):
            if time.monotonic() - b["_t0"] >= self.batch_delay_s:
                self._finish_batch(b)
            else:
                b["status"] = "in_progress" if b["status"] == "validating" else b["status"]
        return {k: v for k, v in b.items() if not k.startswith("_")}

    def _finish_batch(self, b: dict) -> None:
        lines = [json.loads(x) for x in self.files[b["input_file_id"]]["data"].decode().splitlines() if x.strip()]
        out, err = [], []
        for i, line in enumerate(lines):
            self.batch_bodies.append(line["body"])
            fate = "expired" if self.expire_batches else (self.batch_outcome(line) if self.batch_outcome else None)
            rid = f"batch_req_{b['id']}_{i}"
            if fate == "expired":
                expired = {"code": "batch_expired", "message": "not answered within the window"}
                err.append({"id": rid, "custom_id": line["custom_id"], "response": None, "error": expired})
            elif fate == "failed":
                err.append({"id": rid, "custom_id": line["custom_id"], "error": None, "response": {
                    "status_code": 400, "request_id": rid,
                    "body": {"error": {"message": "scripted failure", "type": "invalid_request_error"}}}})  # fmt: skip
            else:
                reply = self._reply_for(line["body"])
                text = reply if isinstance(reply, str) else self.default_reply
                out.append({"id": rid, "custom_id": line["custom_id"], "error": None, "response": {
                    "status_code": 200, "request_id": rid, "body": completion_body(line["body"], text)}})  # fmt: skip
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                fid = f"file-{len(self.files) + 1:04d}"
                data = "".join(self._result_text(r, name) + "\n" for r in rows).encode()
                self.files[fid] = {"id": fid, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                                   "filename": f"{b['id']}_{name}.jsonl", "purpose": "batch_output",
                                   "status": "processed", "data": data}  # fmt: skip
                b[name] = fid
        if self.expire_batches:
            b["status"] = "expired"
        else:
            b["status"] = "completed"
        b["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}

    def _result_text(self, row: dict, file: str) -> str:
        rewritten = self.batch_rewrite(row) if self.batch_rewrite and file == "output_file_id" else None
        return json.dumps(row) if rewritten is None else rewritten

    def _reply_for(self, body: dict) -> str | Fault:
        if self.responder is None:
            return self.default_reply
        return self.responder(body)


def _shared_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def completion_body(request: dict, text: str) -> dict[str, Any]:
    """A chat completion as a server returns it; like a real one it cuts the reply at ``max_tokens`` (words
    here) and then says so with ``finish_reason: length``."""
    prompt_tokens = sum(count_words(m.get("content")) for m in request.get("messages", []))
    finish = "stop"
    limit = request.get("max_tokens")
    if isinstance(limit, int) and count_words(text) > limit:
        text, finish = " ".join((text or "").split()[:limit]), "length"
    completion_tokens = count_words(text)
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake-model"),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish, "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


async def _serve_fault(fault: Fault, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    if fault.kind == "rate_limit":
        headers = {"retry-after": f"{fault.retry_after}"} if fault.retry_after is not None else {}
        await _respond(writer, 429, {"error": {"message": "rate limited", "type": "rate_limit"}}, headers)
        return True
    if fault.kind == "status":
        await _respond(writer, fault.status, {"error": {"message": f"scripted {fault.status}", "type": "server"}})
        return True
    if fault.kind == "hang":
        # Say nothing until the time is up or the client gives up and closes the connection (a real server
        # notices the disconnect too; this keeps hung handlers from piling up across tests).
        try:
            await asyncio.wait_for(reader.read(1), fault.seconds)
        except TimeoutError:
            pass
        return False
    if fault.kind == "malformed":
        await _respond_raw(writer, 200, b'{"id": "chatcmpl-x", "choices": [{"message": {"content": "tru', {})
        return True
    if fault.kind == "garbage":
        await _respond_raw(writer, 200, b"<html><body>502 Bad Gateway</body></html>", {"content-type": "text/html"})
        return True
    if fault.kind == "disconnect":
        return False
    if fault.kind == "cut":
        words = fault.text.split()
        body = completion_body({"messages": []}, " ".join(words[: max(1, len(words) // 2)]))
        body["choices"][0]["finish_reason"] = "length"
        await _respond(writer, 200, body)
        return True
    if fault.kind == "empty_choices":
        await _respond(
            writer, 200, {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
        )
        return True
    raise ValueError(f"unknown fault {fault.kind!r}")


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """name -> (filename, bytes) of a multipart/form-data body (what files.create uploads)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    msg = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    return {
        part.get_param("name", header="content-disposition"): (part.get_filename(), part.get_payload(decode=True))
        for part in msg.iter_parts()
    }


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0") or 0)
    body = await reader.readexactly(length) if length else b""
    return method, path, headers, body


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests"}


async def _respond(writer: asyncio.StreamWriter, status: int, payload: dict, headers: dict | None = None) -> None:
    await _respond_raw(writer, status, json.dumps(payload).encode(), headers or {})


async def _respond_raw(writer: asyncio.StreamWriter, status: int, data: bytes, headers: dict) -> None:
    reason = _REASONS.get(status, "Server Error" if status >= 500 else "Status")
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(data)}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
    await writer.drain()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds added to every response")
    args = ap.parse_args()
    server = FakeOpenAIServer(latency_s=args.latency, port=args.port, record_bodies=False).start()
    print(f"PORT {server.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
