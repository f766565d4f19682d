"""Running an external training engine (LLaMA-Factory, verl) as a run of the project.

Every engine run is recorded like a run of the built-in trainer, so launchers, the DAG and the evaluation
read it the same way: a manifest under ``runs/train/<run_id>/`` (running -> succeeded | failed, with the
engine's last words when it fails), the final checkpoint under ``checkpoints/final``, progress lines and
one result line on stdout. An engine supplies three things: how to start it (argv and environment, given
a scratch directory, the export as local files, an output directory and the node's place in the cluster),
how to read a progress line from its log, and where its final model lands in the output directory.
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import fsspec

from datamind.settings import Settings
from datamind.storage import DataRoot
from datamind.train.config import TrainConfig, derive_run_id
from datamind.train.exports import MANIFEST_FILE
from datamind.train.protocol import (
    MANIFEST_NAME,
    RunRecord,
    RunResult,
    TrainingError,
    progress_line,
    result_line,
    run_dir,
)


@dataclass(frozen=True)
class Cluster:
    """Where the run goes: ``nnodes`` machines of ``gpus_per_node`` devices (0: CPU, one process)."""

    nnodes: int = 1
    gpus_per_node: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def world_size(self) -> int:
        return max(1, self.nnodes * self.gpus_per_node)

    @classmethod
    def from_env(cls, device: str = "auto") -> Cluster:
        """This node's place, as a multi-node launcher (a Kubernetes job, SSH hosts) sets it in the environment:
        ``NNODES``, ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``NPROC_PER_NODE`` (at most the GPUs this
        node has; none, or ``device="cpu"``, trains on the CPU in one process)."""
        env = os.environ
        visible = 0 if device == "cpu" or env.get("CUDA_VISIBLE_DEVICES") == "" else _visible_gpus()
        wanted = int(env.get("NPROC_PER_NODE") or visible)
        return cls(
            nnodes=int(env.get("NNODES", "1")),
            gpus_per_node=min(wanted, visible),
            node_rank=int(env.get("NODE_RANK", "0")),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", "29500")),
        )


ONE_PROCESS = Cluster()  # the default placement: frozen, so one shared instance serves every call


def engine_env(env_dir: str | os.PathLike | None, variable: str, default: os.PathLike) -> str:
    """An engine's environment: the one asked for, else the deployment's (``variable``, e.g. the GPU image's
    /opt/venv-*), else the checkout's own (``make train-env`` / ``make verl-env``)."""
    return str(env_dir or os.environ.get(variable) or default)


def _visible_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


@dataclass(frozen=True)
class Engine:
    name: str
    # (scratch dir, export dir as local files, output dir, cluster) -> (argv, environment additions)
    prepare: Callable[[str, str, str, Cluster], tuple[list[str], dict[str, str]]]
    # a log line -> progress fields ({"phase", "step", ...}) or None
    progress: Callable[[str], dict | None]
    # output dir -> the directory holding the final Hugging Face model
    final_model: Callable[[str], str] = lambda out: out
    metrics_file: str | None = None  # the engine's own metrics file among the final model's files


def run_external(cfg: TrainConfig, engine: Engine, emit=print):
    """Run ``engine`` for ``cfg`` on this node and record it (see the module docstring)."""
    root = DataRoot(cfg.data_root or Settings.from_env().data_root)
    with fsspec.open(posixpath.join(cfg.export_dir.rstrip("/"), MANIFEST_FILE), "rt") as fh:
        version = json.load(fh)["dataset_version"]
    run_id = cfg.run_id or derive_run_id(cfg, version)
    cluster = Cluster.from_env(cfg.device)
    record = RunRecord(
        root=root,
        run_id=run_id,
        engine=engine.name,
        dataset_version=version,
        export_dir=cfg.export_dir,
        config=cfg.to_dict(),
        world_size=cluster.world_size,
        main=cluster.node_rank == 0,
    )
    record.write("running")
    last: dict = {}
    with tempfile.TemporaryDirectory(prefix=f"datamind-{engine.name}-") as work:
        out = os.path.join(work, "output")
        argv, env = engine.prepare(work, root.local_dir(cfg.export_dir), out, cluster)
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
            env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
        )  # fmt: skip
        tail: list[str] = []
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = (tail + [line])[-40:]
            emit(line)
            if (fields := engine.progress(line)) is not None:
                last = fields
                emit(progress_line(fields))
        if proc.wait() != 0:
            record.write("failed", error="\n".join(tail))
            raise TrainingError(f"{engine.name} exited with code {proc.returncode}: " + "\n".join(tail[-10:]))
        final = posixpath.join(run_dir(run_id), "checkpoints", "final")
        if cluster.node_rank == 0:
            model = engine.final_model(out)
            root.remove(final)
            for name in sorted(os.listdir(model)):
                if os.path.isfile(os.path.join(model, name)):
                    root.put_file(os.path.join(model, name), posixpath.join(final, name))
    manifest_uri = record.uri(MANIFEST_NAME)
    result = RunResult(
        run_id=run_id,
        checkpoint_uri=root.uri(final),
        manifest_uri=manifest_uri,
        metrics_uri=root.uri(final, engine.metrics_file) if engine.metrics_file else manifest_uri,
        dataset_version=version,
        final_metrics={k: v for k, v in last.items() if k != "phase"},
    )
    record.write("succeeded", result=result)
    if record.main:
        emit(result_line(result))
    return result
