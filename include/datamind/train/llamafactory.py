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

from datamind.settings import REPO_ROOT
from datamind.train.config import TrainConfig
from datamind.train.engines import ONE_PROCESS, Cluster, Engine, engine_env, run_external
from datamind.train.exports import DATASET_INFO_FILE, SFT_DATASET_NAME

TRAIN_ENV = REPO_ROOT / ".venv-train"


def sft_config(
    cfg: TrainConfig, export_dir: str, output_dir: str, *, template: str = "default", cluster: Cluster = ONE_PROCESS
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
    config_path: str, cluster: Cluster = ONE_PROCESS, env_dir: str | os.PathLike | None = None
) -> tuple[list[str], dict]:
    """(argv, environment additions) that start LLaMA-Factory SFT on this node of ``cluster``."""
    cli = os.path.join(engine_env(env_dir, "DATAMIND_TRAIN_ENV", TRAIN_ENV), "bin", "llamafactory-cli")
    argv = [cli, "train", config_path]
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


def conversation_lengths(sft_jsonl: str, tokenizer) -> list[int]:
    """Tokens of each conversation of an export's SFT file under ``tokenizer``'s chat template (an interpreter
    turn counted as a user turn: LLaMA-Factory's templates wrap an observation in a few more tokens at most)."""
    from datamind.train.tokenization import ensure_chat_template, render

    ensure_chat_template(tokenizer)
    out = []
    with open(sft_jsonl, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                turns = json.loads(line)["messages"]
                msgs = [{**m, "role": "user" if m["role"] == "tool" else m["role"]} for m in turns]
                out.append(len(tokenizer(render(tokenizer, msgs))["input_ids"]))
    return out


def fit_cutoff(lengths: list[int], multiple: int = 64) -> int:
    """The smallest multiple of ``multiple`` that holds the longest conversation: LLaMA-Factory keeps a longer
    one's first turns and drops the rest, its answer included, so a cutoff below a release's trajectories
    teaches a student to start an analysis and never finish one (measured: at 768 tokens none of 191 demo
    samples kept its answer, and the tuned 0.5B student re-ran its first look until it ran out of turns)."""
    return -(-max(lengths, default=multiple) // multiple) * multiple


def run_sft(cfg: TrainConfig, emit=print):
    """The SFT phase through LLaMA-Factory, recorded like a run of the built-in trainer (``engines``)."""

    def prepare(work: str, export_local: str, out: str, cluster: Cluster) -> tuple[list[str], dict[str, str]]:
        conf = sft_config(cfg, export_local, out, template=cfg.template, cluster=cluster)
        return command(write_config(os.path.join(work, "sft.yaml"), conf), cluster)

    steps = iter(range(1, 1 << 62))

    def progress(line: str) -> dict | None:
        m = _LOSS.search(line)
        return {"phase": "sft", "step": next(steps), "loss": float(m.group(1))} if m else None

    return run_external(cfg, Engine("llamafactory", prepare, progress, metrics_file="trainer_state.json"), emit)
