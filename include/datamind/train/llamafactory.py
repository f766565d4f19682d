"""SFT through LLaMA-Factory: its YAML config and launch command, generated from a dataset export.

The export (``datamind.train.exports``) already holds LLaMA-Factory's sharegpt layout and its
``dataset_info.json``; this module turns a ``TrainConfig`` (the paper's table 2 values) into the config
``llamafactory-cli train`` reads, and the command (and environment) that runs it on one GPU worker or on
several nodes through LLaMA-Factory's own torchrun launcher (``FORCE_TORCHRUN``, ``NNODES``, ``NODE_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``).

LLaMA-Factory needs an older transformers and datasets than the project's core environment, so it runs
from its own environment (``requirements-train.txt``, ``make train-env`` -> ``.venv-train``); nothing here
imports it.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone

import fsspec

from datamind.assets import DIRS
from datamind.settings import REPO_ROOT, Settings
from datamind.storage import DataRoot
from datamind.train.config import TrainConfig, derive_run_id
from datamind.train.exports import DATASET_INFO_FILE, MANIFEST_FILE, SFT_DATASET_NAME

TRAIN_ENV = REPO_ROOT / ".venv-train"


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
    def from_env(cls, device: str = "auto") -> "Cluster":
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


def _visible_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def sft_config(
    cfg: TrainConfig, export_dir: str, output_dir: str, *, template: str = "default", cluster: Cluster = Cluster()
) -> dict:
    """The YAML config (as a dict) for ``llamafactory-cli train``: full fine-tuning on the export's SFT file.

    The global batch (``sft.batch_size`` sequences per optimizer step) is kept whatever the number of
    devices: per-device micro batches times gradient accumulation times world size."""
    s = cfg.sft
    per_step = s.micro_batch_size * cluster.world_size
    if s.batch_size % per_step:
        raise ValueError(f"sft.batch_size {s.batch_size} is not a multiple of micro_batch_size x devices ({per_step})")
    gpu = cluster.gpus_per_node > 0
    out = {
        "model_name_or_path": cfg.base_model_path,
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full",
        "dataset": SFT_DATASET_NAME,
        "dataset_dir": posixpath.join(export_dir, posixpath.dirname(DATASET_INFO_FILE)),
        "template": template,
        "cutoff_len": s.cutoff_len,
        "output_dir": output_dir,
        "overwrite_output_dir": True,
        "per_device_train_batch_size": s.micro_batch_size,
        "gradient_accumulation_steps": s.batch_size // per_step,
        "learning_rate": s.learning_rate,
        "lr_scheduler_type": "cosine" if s.lr_scheduler == "cosine" else "constant_with_warmup",
        "warmup_ratio": s.warmup_ratio,
        "num_train_epochs": s.epochs,
        "max_grad_norm": cfg.max_grad_norm,
        "weight_decay": cfg.weight_decay,
        "seed": cfg.seed,
        "logging_steps": max(1, cfg.log_every),
        "save_strategy": "steps" if cfg.save_every else "no",
        "report_to": "none",
        "plot_loss": False,
        "bf16": gpu and cfg.dtype != "float32",
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "preprocessing_num_workers": 1 if not gpu else 8,
        "dataloader_num_workers": 0,
        "ddp_timeout": 180000000,
    }
    if cfg.save_every:
        out["save_steps"] = cfg.save_every
    if s.max_steps:
        out["max_steps"] = s.max_steps
    if not gpu:
        out["use_cpu"] = True
    return out


def command(
    config_path: str, cluster: Cluster = Cluster(), env_dir: str | os.PathLike = TRAIN_ENV
) -> tuple[list[str], dict]:
    """(argv, environment additions) that start LLaMA-Factory SFT on this node of ``cluster``."""
    env_dir = env_dir or os.environ.get("DATAMIND_TRAIN_ENV") or TRAIN_ENV
    argv = [os.path.join(str(env_dir), "bin", "llamafactory-cli"), "train", config_path]
    env: dict[str, str] = {}
    if cluster.world_size > 1:
        env.update(
            FORCE_TORCHRUN="1",
            NNODES=str(cluster.nnodes),
            NODE_RANK=str(cluster.node_rank),
            NPROC_PER_NODE=str(cluster.gpus_per_node),
            MASTER_ADDR=cluster.master_addr,
            MASTER_PORT=str(cluster.master_port),
        )
    return argv, env


def write_config(path: str, config: dict) -> str:
    """The YAML file ``llamafactory-cli train`` reads. Written by a YAML emitter, not as JSON: YAML 1.1 reads
    JSON's ``1e-05`` as a string, and the optimizer would get a string learning rate."""
    import yaml

    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(config, fh, sort_keys=True)
    return path


_LOSS = re.compile(r"'loss': '?([0-9.eE+-]+)'?.*?'epoch': '?([0-9.eE+-]+)")


def run_sft(cfg: TrainConfig, emit=print):
    """The SFT phase through LLaMA-Factory, recorded like a run of the built-in trainer: its manifest under
    ``runs/train/<run_id>/``, the checkpoint under ``checkpoints/final``, progress and result lines on stdout
    (so every launcher reads it the same way)."""
    from datamind.train.trainer import PROGRESS_PREFIX, RESULT_PREFIX, RunResult, TrainingError

    root = DataRoot(cfg.data_root or Settings.from_env().data_root)
    with fsspec.open(posixpath.join(cfg.export_dir.rstrip("/"), MANIFEST_FILE), "rt") as fh:
        version = json.load(fh)["dataset_version"]
    run_id = cfg.run_id or derive_run_id(cfg, version)
    run_dir = posixpath.join(DIRS["runs"], "train", run_id)
    cluster = Cluster.from_env(cfg.device)
    started = datetime.now(timezone.utc).isoformat()

    def manifest(status: str, **extra) -> None:
        if cluster.node_rank == 0:
            doc = {
                "run_id": run_id,
                "status": status,
                "engine": "llamafactory",
                "dataset_version": version,
                "export_dir": cfg.export_dir,
                "config": cfg.to_dict(),
                "started_at": started,
                "updated_at": datetime.now(timezone.utc).isoformat(),
                "world_size": cluster.world_size,
                **extra,
            }
            root.write_text(posixpath.join(run_dir, "manifest.json"), json.dumps(doc, indent=2, sort_keys=True))

    manifest("running")
    with tempfile.TemporaryDirectory(prefix="datamind-llamafactory-") as work:
        out = os.path.join(work, "output")
        export_local = root.local_dir(cfg.export_dir)
        conf = sft_config(cfg, export_local, out, template=cfg.template, cluster=cluster)
        argv, env = command(write_config(os.path.join(work, "sft.yaml"), conf), cluster)
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
            env={**os.environ, **env, "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        tail: list[str] = []
        step = 0
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = (tail + [line])[-40:]
            emit(line)
            if m := _LOSS.search(line):
                step += 1
                emit(PROGRESS_PREFIX + json.dumps({"phase": "sft", "step": step, "loss": float(m.group(1))}))
        if proc.wait() != 0:
            manifest("failed", error="\n".join(tail)[-2000:])
            raise TrainingError(f"LLaMA-Factory exited with code {proc.returncode}: " + "\n".join(tail[-10:]))
        final = posixpath.join(run_dir, "checkpoints", "final")
        if cluster.node_rank == 0:
            root.remove(final)
            for name in sorted(os.listdir(out)):
                if os.path.isfile(os.path.join(out, name)):
                    root.put_file(os.path.join(out, name), posixpath.join(final, name))
    result = RunResult(
        run_id=run_id,
        checkpoint_uri=root.uri(final),
        manifest_uri=root.uri(run_dir, "manifest.json"),
        metrics_uri=root.uri(final, "trainer_state.json"),
        dataset_version=version,
        final_metrics={"steps": step},
    )
    manifest("succeeded", result=result.to_dict())
    if cluster.node_rank == 0:
        emit(RESULT_PREFIX + json.dumps(result.to_dict(), sort_keys=True))
    return result
