"""Serve a local checkpoint (a ``train_agent`` output, or any Hugging Face causal LM folder) behind the
OpenAI chat-completions protocol on loopback, so the evaluation drives it with the same client as any
endpoint.

Two engines: ``vllm`` (vLLM's own OpenAI server in a child process, for a worker with a GPU: the GPU pool)
and ``cpu`` (this process, requests served one at a time with the trainer's own generation code,
``train.policy.HFPolicy``: the chat template the model was trained with, the agent's stop strings).
``auto`` picks vLLM when it is installed and a CUDA device is visible, else the CPU server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
import time
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator


class CheckpointModel:
    """Loads the checkpoint once; ``complete`` is one chat completion (thread-safe: one at a time)."""

    def __init__(self, path: str, name: str = "checkpoint") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = name
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.model.eval()
        self._lock = threading.Lock()

    def complete(
        self, messages: list[dict], temperature: float, top_p: float, max_tokens: int, stop, seed: int | None = None
    ) -> tuple[str, str]:
        """(text, finish_reason) of one completion; the text ends at the first stop string, inclusive."""
        import torch

        from datamind.train.policy import HFPolicy

        stops = tuple([stop] if isinstance(stop, str) else stop or ())
        with self._lock:
            if seed is not None:
                torch.manual_seed(int(seed))
            policy = HFPolicy(self.model, self.tokenizer, temperature=temperature, top_p=top_p, stops=stops or ("\0",))
            (text,) = policy([messages], max_tokens)
        cut = [text.find(s) + len(s) for s in stops if s in text]
        finish = "stop" if cut else "length" if len(self.tokenizer(text)["input_ids"]) >= max_tokens else "stop"
        if cut:
            text = text[: min(cut)]
        return text, finish


def _handler(model: CheckpointModel):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # the task log is the evaluation's, not one line per request
            pass

        def _json(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [{"id": model.name, "object": "model"}]})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._json(404, {"error": {"message": "only /v1/chat/completions is served"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                messages = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
            except (ValueError, KeyError, TypeError) as exc:
                self._json(400, {"error": {"message": f"bad request: {exc}"}})
                return
            text, finish = model.complete(
                messages,
                float(body.get("temperature", 0.7)),
                float(body.get("top_p", 1.0)),
                int(body.get("max_tokens") or 512),
                body.get("stop"),
                body.get("seed"),
            )
            n_prompt = sum(len(m["content"].split()) for m in messages)
            self._json(
                200,
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model.name,
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                    ],
                    "usage": {
                        "prompt_tokens": n_prompt,
                        "completion_tokens": len(text.split()),
                        "total_tokens": n_prompt + len(text.split()),
                    },
                },
            )

    return Handler


@contextmanager
def serve_checkpoint(path: str, name: str = "checkpoint") -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:<port>/v1``) of the checkpoint served on loopback."""
    model = CheckpointModel(path, name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(model))
    thread = threading.Thread(target=server.serve_forever, name="checkpoint-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


ENGINES = ("auto", "cpu", "vllm")


def pick_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"serve engine must be one of {ENGINES}, got {engine!r}")
    if engine != "auto":
        return engine
    if importlib.util.find_spec("vllm") is None:
        return "cpu"
    import torch

    return "vllm" if torch.cuda.is_available() else "cpu"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve_with_vllm(path: str, name: str, ready_timeout_s: float = 900.0, extra_args: tuple = ()) -> Iterator[str]:
    """vLLM's OpenAI-compatible server for ``path`` in a child process on loopback; yields its base URL once
    it answers ``/v1/models``, and stops it (SIGTERM, then SIGKILL) when done."""
    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError("serve engine 'vllm' needs the vllm package on this worker (the GPU worker image)")
    port = _free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path]
    cmd += ["--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), *extra_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if proc.poll() is not None:
                tail = (proc.stderr.read() or "")[-2000:]
                raise RuntimeError(f"vllm server exited with {proc.returncode} before it was ready:\n{tail}")
            try:
                with urllib.request.urlopen(url + "/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm server not ready after {ready_timeout_s:g} s")
            time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def serve(path: str, name: str, engine: str = "auto") -> Iterator[str]:
    """The checkpoint behind an OpenAI-compatible URL, with the engine ``engine`` picks."""
    chosen = pick_engine(engine)
    cm = serve_with_vllm(path, name) if chosen == "vllm" else serve_checkpoint(path, name)
    with cm as url:
        yield url
