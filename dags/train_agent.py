"""
### Train the data-analytic agent on the final dataset (DATAMIND section 4)

Runs whenever the `dataset` Asset changes, or by hand with the form below.

1. **export** – writes the dataset's training exports under `exports/<dataset_version>/`
   (LLaMA-Factory sharegpt JSONL + `dataset_info.json`; verl RL Parquet with the expert continuation).
   The version is a content hash: an unchanged dataset reuses its export, byte for byte.
2. **train** – launches `python -m datamind.train train` through the chosen launcher, streams its
   progress lines into this task's log, fails with the trainer's last output when it exits non-zero,
   and emits `datamind://checkpoints` with the checkpoint location and final metrics.

Phases: `sft` = supervised fine-tuning on agent tokens only; `sft+rl` = a cold-start SFT phase, then the
joint objective gamma·SFT + (1−gamma)·DAPO with gamma annealed 0.9 → 0.05 and G = 4 rollouts per prompt.
Defaults are the paper's Table 2; change any of them with **overrides**, e.g.
`{"rl": {"learning_rate": 2e-6}, "sft.max_steps": 100}`.

Launchers: `local` (torchrun on the GPU worker), `kubernetes` (one GPU pod; needs the `kubernetes`
client on the worker and, in the Connection's extra, `image` plus `namespace` / `kube_config_path` /
`in_cluster`), `ssh` (a GPU host with the project installed; extra: `key_file`, `workdir`, `python`).
Launcher options such as `gpus`, `nproc_per_node` or `memory` may also sit in the Connection's extra.

The training task runs in pool **gpu** on queue **gpu**: create the pool (`airflow pools set gpu <n> "GPU slots"`)
and run a worker that serves that queue. Outputs: `runs/train/<run_id>/` (manifest, `metrics.parquet`,
`checkpoints/`). The run id is derived from config + dataset version, so a retry reuses its run directory.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from datamind.train.config import ENGINES, PHASES
from datamind_airflow import DAG_DEFAULTS, announces, runtime, wakes_on

log = logging.getLogger(__name__)

CHECKPOINTS = announces("train_agent")


@dag(
    schedule=wakes_on("train_agent"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=__doc__,
    tags=["datamind", "training"],
    params={
        "base_model_path": Param(
            os.environ.get("DATAMIND_BASE_MODEL_PATH") or None,
            type=["null", "string"],
            title="Base model path",
            description="Local directory of a Hugging Face causal LM (as seen by the trainer); never downloaded.",
        ),
        "phase": Param(
            "sft+rl",
            type="string",
            enum=list(PHASES),
            title="Phase",
            description="sft: supervised only. sft+rl: cold-start SFT, then SFT + DAPO.",
        ),
        "engine": Param(
            "builtin",
            type="string",
            enum=list(ENGINES),
            title="Engine",
            description="builtin: the project's trainer (SFT and SFT+RL). llamafactory: SFT through LLaMA-Factory "
            "(phase sft). verl: SFT + DAPO through verl from an SFT checkpoint as base model (phase sft+rl). "
            "Each engine runs in its own environment on the GPU worker.",
        ),
        "template": Param(
            "default",
            type="string",
            title="Chat template (LLaMA-Factory)",
            description="LLaMA-Factory's template for the base model, e.g. qwen for Qwen2.5.",
        ),
        "overrides": Param(
            # a deployment may set its own defaults (the local cluster: a few CPU steps on a tiny model)
            json.loads(os.environ.get("DATAMIND_TRAIN_OVERRIDES") or "{}"),
            type="object",
            title="Config overrides",
            description='Nested or dotted keys over Table 2 defaults, e.g. {"rl.group_size": 8}.',
        ),
        "launcher": Param(
            "local",
            type="string",
            enum=["local", "kubernetes", "ssh"],
            title="Launcher",
            description="Where training runs: this GPU worker, a Kubernetes pod, or a host over SSH.",
        ),
        # null allowed: the form sends an emptied optional text field as null, which a plain "string" refuses
        "launcher_conn_id": Param(
            None,
            type=["null", "string"],
            title="Launcher Connection",
            description="Airflow Connection with the launcher's credentials (kubernetes, ssh); "
            "leave empty for the local launcher.",
        ),
    },
    **DAG_DEFAULTS,
)
def train_agent():
    @task
    def export() -> dict:
        """Training exports of the current dataset (reused when this dataset version was exported)."""
        from datamind.train.exports import export as build

        result = build(runtime.data_root(), run_id=runtime.run_id()).to_dict()
        runtime.log_summary(
            "Export", {k: result[k] for k in ("version", "export_dir", "n_rows", "n_rejected", "reused")}
        )
        return result

    @task(pool="gpu", queue="gpu", outlets=[CHECKPOINTS], retries=1, execution_timeout=timedelta(days=3))
    def train(exported: dict) -> dict:
        """Launch the trainer, stream its log, return the checkpoint location and final metrics."""
        from datamind.train.config import TrainConfig
        from datamind.train.launchers import make_launcher, run, settings_from_connection

        context = get_current_context()
        params = context["params"]
        cfg = (
            TrainConfig()
            .with_overrides(dict(params["overrides"] or {}))
            .with_overrides(
                {
                    "base_model_path": params["base_model_path"] or "",
                    "phase": params["phase"],
                    "engine": params["engine"],
                    "template": params["template"],
                    "export_dir": exported["export_dir"],
                    "data_root": runtime.settings().data_root,
                }
            )
        )
        kind, conn_id = params["launcher"], params["launcher_conn_id"]
        conn = runtime.connection_dict(conn_id) if conn_id else None
        if conn_id and conn is None:
            raise ValueError(f"launcher Connection {conn_id!r} is not defined")
        launcher = make_launcher(kind, conn, **settings_from_connection(kind, conn))
        log.info("Launching %s run on %r for dataset %s", cfg.phase, launcher, exported["version"])
        result = run(launcher, cfg, on_line=log.info).to_dict()
        context["outlet_events"][CHECKPOINTS].extra = {
            "run_id": result["run_id"],
            "checkpoint_uri": result["checkpoint_uri"],
            "dataset_version": result["dataset_version"],
            "final_metrics": result["final_metrics"],
        }
        runtime.log_summary("Training", {k: result[k] for k in ("run_id", "checkpoint_uri", "metrics_uri")})
        return result

    train(export())


train_agent()
