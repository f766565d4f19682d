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

import logging
from datetime import timedelta

import pendulum
from airflow.sdk import dag, get_current_context

from datamind.train.config import LaunchParams
from datamind_airflow import DAG_DEFAULTS, announces, deployment, runtime, wakes_on
from datamind_airflow.forms import form_params
from datamind_airflow.lineage import task

log = logging.getLogger(__name__)

CHECKPOINTS = announces("train_agent")


@dag(
    schedule=wakes_on("train_agent"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    doc_md=deployment.doc("train_agent", __doc__),
    tags=["datamind", "training"],
    params=deployment.stage_form("train_agent", form_params(LaunchParams, defaults=LaunchParams.from_env())),
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
        from datamind.train.launchers import make_launcher, run, settings_from_connection

        context = get_current_context()
        launch = LaunchParams.from_form(deployment.run_params())
        cfg = launch.train_config(exported["export_dir"], runtime.settings().data_root)
        kind, conn_id = launch.launcher, launch.launcher_conn_id
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
