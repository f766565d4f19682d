"""A model behind the OpenAI chat-completions protocol on loopback, served by an existing serving package.

Every path that needs a model it does not reach over the network (the local demo model, a checkpoint under
evaluation, the CI test of the real-model path) starts one of these in a child process and talks to it with
the project's one LLM client, exactly as it would to a remote endpoint:

* ``llama.cpp``: ``llama-cpp-python``'s server over a GGUF file, from its own environment (``.venv-serve``,
  built once by ``make serve-env``; ``DATAMIND_SERVE_ENV`` points elsewhere). The fastest CPU engine here:
  quantized weights, prompt-prefix reuse between turns, grammars.
* ``transformers``: ``transformers serve`` over a Hugging Face checkpoint folder, from the pipeline's own
  environment: nothing to build, so it is what the tests and a worker without ``.venv-serve`` use.
* ``vllm``: vLLM's server over a checkpoint folder, for a worker with a GPU.

``auto`` picks by what the model is and what the worker has. CPU engines get an explicit thread count
(``DATAMIND_SERVE_THREADS``, default 1): a CPU server left to take every core collapses to a fraction of a
token per second as soon as the sandbox or another task wants one of them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from datamind.settings import REPO_ROOT

ENGINES = ("auto", "llama.cpp", "transformers", "vllm")
SERVE_ENV = REPO_ROOT / ".venv-serve"
DEFAULT_THREADS = 1
DEFAULT_CONTEXT = 8192
# llama.cpp keeps one sequence's evaluated prompt; the trajectories of a shard take turns on it, so each turn
# would evaluate its whole conversation again. A RAM store of evaluated states (longest prefix wins) lets every
# conversation go on from its own last turn. A state is its KV bytes (12 KB a token for Qwen2.5-Coder-0.5B, 28 KB
# for 1.5B; the library's logits copy is dropped and every byte counted: llama_server.py), so 2 GiB holds a
# shard's trajectories with room to spare (DATAMIND_SERVE_PROMPT_CACHE_MB; 0 turns it off). Measured with the
# 0.5B model, 3 conversations x 4 turns of ~400 tokens, 2 threads: 15,810 prompt tokens evaluated without the
# store, 8,272 with it; 268.6 s against 203.2 s; resident 3.4 GB against 3.7 GB (5.8 GB at the peak of a save).
DEFAULT_PROMPT_CACHE_MB = 2048
_LLAMA_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama_server.py")

log = logging.getLogger(__name__)


class ServeError(RuntimeError):
    """The server could not be started (missing engine, wrong model kind, died before it was ready)."""


@dataclass(frozen=True)
class ServeSpec:
    """What to serve and how. ``model``: a .gguf file (llama.cpp) or a checkpoint folder (transformers, vllm)."""

    model: str
    name: str = "local-model"  # the model id requests name and responses report (a plain file name)
    engine: str = "auto"
    threads: int = 0  # CPU threads; 0: DATAMIND_SERVE_THREADS or DEFAULT_THREADS
    context: int = DEFAULT_CONTEXT
    port: int = 0  # 0: a free port
    api_key: str = field(default="", repr=False)
    ready_timeout_s: float = 900.0

    def resolved_threads(self) -> int:
        return self.threads or int(os.environ.get("DATAMIND_SERVE_THREADS") or DEFAULT_THREADS)


def serve_env() -> str:
    return os.environ.get("DATAMIND_SERVE_ENV") or str(SERVE_ENV)


def llama_cpp_python() -> str | None:
    """The interpreter of the environment that has llama-cpp-python's server, or None."""
    py = os.path.join(serve_env(), "bin", "python")
    if os.access(py, os.X_OK) and os.path.isfile(os.path.join(serve_env(), ".installed")):
        return py
    return None


def _has_gpu() -> bool:
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pick_engine(spec: ServeSpec) -> str:
    """The engine ``spec.engine`` means for this model on this worker (ServeError when none fits)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", spec.name):
        raise ServeError(f"a served model's name is a plain file name (letters, digits, . _ -), got {spec.name!r}")
    if spec.engine not in ENGINES:
        raise ServeError(f"serve engine must be one of {list(ENGINES)}, got {spec.engine!r}")
    is_gguf = spec.model.lower().endswith(".gguf")
    if not is_gguf and not os.path.isfile(os.path.join(spec.model, "config.json")):
        raise ServeError(f"{spec.model!r} is neither a .gguf file nor a checkpoint folder with a config.json")
    engine = spec.engine
    if engine == "auto":
        engine = "llama.cpp" if is_gguf else ("vllm" if _has_gpu() else "transformers")
    if engine == "llama.cpp" and not is_gguf:
        raise ServeError(f"llama.cpp serves .gguf files; {spec.model!r} is a checkpoint folder")
    if engine in ("transformers", "vllm") and is_gguf:
        raise ServeError(
            f"{engine} serves checkpoint folders; import the GGUF first (python -m datamind.train.gguf_import)"
        )
    if engine == "llama.cpp" and llama_cpp_python() is None:
        raise ServeError(f"llama.cpp is not installed in {serve_env()}: run 'make serve-env' (a one-time build)")
    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ServeError("serve engine 'vllm' needs the vllm package on this worker (the GPU worker image)")
    return engine


def command(spec: ServeSpec, engine: str, port: int) -> tuple[list[str], dict[str, str]]:
    """(argv, environment additions) that start ``engine`` for ``spec`` on 127.0.0.1:``port``."""
    threads = str(spec.resolved_threads())
    # every numeric library the engines load reads one of these; none may take more than it was given
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if engine == "llama.cpp":
        argv = [llama_cpp_python() or "python", _LLAMA_SERVER, "--model", spec.model]
        argv += ["--model_alias", spec.name, "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--n_threads", threads, "--n_threads_batch", threads, "--n_ctx", str(spec.context)]
        cache_mb = int(os.environ.get("DATAMIND_SERVE_PROMPT_CACHE_MB") or DEFAULT_PROMPT_CACHE_MB)
        if cache_mb > 0:
            argv += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(cache_mb << 20)]
        if spec.api_key:
            argv += ["--api_key", spec.api_key]
        return argv, env
    if engine == "transformers":
        # it serves the model a request names, and names it in replies: the alias is a link in the server's
        # working folder (see start), so requests and recorded rows carry the alias, never a host path
        argv = [sys.executable, "-m", "transformers.cli.transformers", "serve", spec.name]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"]
        return argv, env
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", spec.model]
    argv += ["--served-model-name", spec.name, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--max-model-len", str(spec.context)]
    if spec.api_key:
        argv += ["--api-key", spec.api_key]
    return argv, {k: v for k, v in env.items() if not k.endswith("_THREADS")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(base: str, engine: str, api_key: str) -> bool:
    # transformers serve answers /health; llama.cpp and vLLM answer /v1/models once the model is loaded
    url = base + ("/health" if engine == "transformers" else "/v1/models")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


@dataclass
class RunningServer:
    """A started server: its base URL (``http://127.0.0.1:<port>/v1``), model id, engine and process."""

    base_url: str
    name: str
    engine: str
    proc: subprocess.Popen
    log_path: str
    workdir: str = ""  # removed on stop, with the log when it lies there (start's default)

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        elif self.workdir and self.log_path.startswith(self.workdir + os.sep):
            # it died on its own: its last words go to the caller's log before its folder does
            log.warning("the %s server had exited with %s; its log ends:\n%s", self.engine, self.proc.returncode,
                        self.log_tail())  # fmt: skip
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-n:]
        except OSError:
            return ""


def start(spec: ServeSpec, log_path: str | None = None) -> RunningServer:
    """Start the server and wait until it answers; ServeError (with the server's last words) otherwise."""
    engine = pick_engine(spec)
    port = spec.port or free_port()
    argv, env = command(spec, engine, port)
    workdir = tempfile.mkdtemp(prefix="datamind-serve-")
    log_path = log_path or os.path.join(workdir, "server.log")
    os.symlink(os.path.abspath(spec.model), os.path.join(workdir, spec.name))
    with open(log_path, "ab") as out:
        # its own session: stopping it stops every process it started (vLLM's engine core, uvicorn workers)
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                cwd=workdir, start_new_session=True, stdin=subprocess.DEVNULL)  # fmt: skip
    server = RunningServer(f"http://127.0.0.1:{port}/v1", spec.name, engine, proc, log_path, workdir)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + spec.ready_timeout_s
    while not _ready(base, engine, spec.api_key):
        if proc.poll() is not None:
            tail = server.log_tail()
            server.stop()
            raise ServeError(f"{engine} server exited with {proc.returncode} before it was ready:\n{tail}")
        if time.monotonic() > deadline:
            tail = server.log_tail()
            server.stop()
            raise ServeError(f"{engine} server not ready after {spec.ready_timeout_s:g} s:\n{tail}")
        time.sleep(0.25)
    return server


@contextmanager
def serve(spec: ServeSpec) -> Iterator[RunningServer]:
    """The model served for the duration of the block, stopped (its whole process group) after."""
    server = start(spec)
    try:
        yield server
    finally:
        server.stop()
