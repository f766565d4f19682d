"""SFT+RL through verl: its Hydra config, tool config, input rows and launch commands, from a dataset export.

verl runs the RL phase at scale (FSDP actors, vLLM or SGLang rollouts, Ray across nodes); the project
supplies what makes it the paper's recipe (``datamind.train.verl_plugins``, loaded by verl in its own
environment): the multi-turn ``<code>``/``<interpreter>`` format, code execution in the project sandbox,
and the reward of eq. 8 with the project's judge. The config sets the paper's table 2 values from
``TrainConfig.rl``: GRPO-style group advantages over ``group_size`` rollouts, DAPO's decoupled clip
(``clip_low``/``clip_high``) and token-level loss, no KL term; eq. 5's filter (prompts whose rollouts are
all correct or all wrong by the judge's ``acc`` leave the RL term) is applied by the project's trainer.

The joint objective of eq. 7 runs inside verl too (``datamind.train.verl_joint``, imported into every verl
process): each row carries its expert continuation, an agent loop puts its replay into the batch next to
the prompt's rollouts, and a trainer built on verl's synchronous one gives the actor ``gamma(t) * L_SFT +
(1 - gamma(t)) * L_DAPO`` with gamma from ``datamind.train.schedule`` (the config's ``datamind`` section).

verl needs its own transformers range, so it runs from its own environment (``requirements-verl.txt``,
``make verl-env`` -> ``.venv-verl``); nothing here imports it.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from datamind.settings import REPO_ROOT
from datamind.train.config import TrainConfig
from datamind.train.engines import ONE_PROCESS, Cluster, Engine, engine_env, run_external
from datamind.train.exports import RL_FILE

VERL_ENV = REPO_ROOT / ".venv-verl"
PLUGINS = Path(__file__).with_name("verl_plugins.py")
INCLUDE_DIR = Path(__file__).resolve().parents[2]  # so verl's processes import the project's package
CONFIG_NAME = "datamind_rl"
TOOL_CLASS = "datamind.train.verl_plugins.SandboxCodeTool"
JOINT_MODULE = "datamind.train.verl_joint"  # imported by verl in each of its processes (VERL_USE_EXTERNAL_MODULES)
TOOL_NAME = "run_code"  # verl_plugins.TOOL_NAME (that module imports verl, so it is not imported here)
FORMAT_NAME = "datamind_react"  # verl_plugins.FORMAT_NAME
AGENT_LOOP = "datamind_tool_agent"  # verl_joint.AGENT_LOOP: verl's tool agent loop plus the expert replay
TRAINER_MODE = "datamind_sync"  # verl_joint.TRAINER_MODE: verl's synchronous trainer with the joint loss
EXPERT_KEY = "expert"  # verl_joint.EXPERT_KEY


def tools_config(exec_timeout_s: float) -> dict:
    """verl's tool config: the sandboxed ``run_code`` tool (its schema is the plugin's own)."""
    return {"tools": [{"class_name": TOOL_CLASS, "config": {"type": "native", "wall_s": exec_timeout_s}}]}


def prepare_rows(export_dir: str, out_path: str, with_expert: bool = True) -> int:
    """The export's RL rows as verl's agent loop reads them: each row names the agent loop, hands the
    sandbox tool its data file (``extra_info.tools_kwargs``) and, for the joint loss, carries its expert
    continuation (``extra_info.expert``: the export's ``target`` turns). Returns the row count."""
    table = pq.read_table(posixpath.join(export_dir.rstrip("/"), RL_FILE))
    extra = table.column("extra_info").to_pylist()
    targets = table.column("target").to_pylist()
    for e, target in zip(extra, targets, strict=True):
        e["tools_kwargs"] = {
            TOOL_NAME: {"create_kwargs": {"data_uri": e.get("data_uri") or "", "data_format": e.get("data_format")}}
        }
        e["need_tools_kwargs"] = True
        if with_expert:
            e[EXPERT_KEY] = [{"role": m["role"], "content": m["content"]} for m in target]
    table = table.drop_columns(["extra_info"]).append_column("extra_info", pa.array(extra))
    table = table.append_column("agent_name", pa.array([AGENT_LOOP] * table.num_rows, pa.string()))
    pq.write_table(table, out_path)
    return table.num_rows


def expert_replay(cfg: TrainConfig) -> bool:
    """Whether the rows carry expert continuations for eq. 7's SFT term (not when gamma is 0 throughout)."""
    return cfg.rl.gamma_peak > 0


def rl_config(
    cfg: TrainConfig,
    train_file: str,
    tool_config_path: str,
    output_dir: str,
    *,
    cluster: Cluster = ONE_PROCESS,
    rollout_engine: str = "vllm",
) -> dict:
    """The Hydra config (as a dict) ``python -m verl.trainer.main_ppo`` reads; it extends verl's ``ppo_trainer``."""
    rl, reward = cfg.rl, cfg.reward
    cfg.validate()  # the config's own checks (batch divisibility and the rest), before anything is written
    gpus = max(1, cluster.gpus_per_node)
    total = rl.max_steps
    return {
        "hydra": {"searchpath": ["pkg://verl.trainer.config"]},
        "defaults": ["ppo_trainer", "_self_"],
        "data": {
            "train_files": train_file,
            "val_files": train_file,
            "prompt_key": "prompt",
            "max_prompt_length": rl.max_prompt_length,
            "max_response_length": rl.max_response_length,
            "train_batch_size": rl.batch_size,
            "return_raw_chat": True,
            "filter_overlong_prompts": True,
            "truncation": "error",
            "seed": cfg.seed,
        },
        "actor_rollout_ref": {
            "model": {"path": cfg.base_model_path, "enable_gradient_checkpointing": cfg.gradient_checkpointing},
            "actor": {
                "optim": {"lr": rl.learning_rate, "lr_warmup_steps": rl.warmup_steps, "weight_decay": cfg.weight_decay},
                "ppo_mini_batch_size": rl.mini_batch_size,
                "ppo_micro_batch_size_per_gpu": rl.micro_batch_size,
                "clip_ratio_low": rl.clip_low,
                "clip_ratio_high": rl.clip_high,
                "loss_agg_mode": "token-mean",  # DAPO: every token of the batch weighs the same
                "use_kl_loss": False,
                "entropy_coeff": 0,
                "grad_clip": cfg.max_grad_norm,
                # The Hugging Face model too, so the run's final checkpoint loads like any other.
                "checkpoint": {"save_contents": ["model", "optimizer", "extra", "hf_model"]},
            },
            "rollout": {
                "name": rollout_engine,
                "mode": "async",
                "n": rl.group_size,
                "temperature": rl.temperature,
                "top_p": rl.top_p,
                "prompt_length": rl.max_prompt_length,
                "response_length": rl.max_response_length,
                "tensor_model_parallel_size": 1,
                "log_prob_micro_batch_size_per_gpu": rl.micro_batch_size,
                "multi_turn": {
                    "enable": True,
                    "max_assistant_turns": rl.max_turns,
                    "tool_config_path": tool_config_path,
                    "format": FORMAT_NAME,
                    "max_tool_response_length": 4096,
                },
                "agent": {"default_agent_loop": AGENT_LOOP},
            },
        },
        "critic": {"enable": False},
        "algorithm": {
            "adv_estimator": "grpo",
            "use_kl_in_reward": False,
            # Eq. 5 is applied by the project's trainer as a mask on the DAPO term (verl_joint.rl_weights): verl's
            # own group filter evicts a prompt whole, its expert replay too, which the paper still trains on.
            "filter_groups": {"enable": False},
        },
        "reward": {
            "custom_reward_function": {
                "path": str(PLUGINS),
                "name": "compute_score",
                "reward_kwargs": {
                    "tokenizer_path": cfg.base_model_path,
                    "l_min": reward.l_min,
                    "l_max": reward.l_max,
                    "format_penalty": reward.format_penalty,
                    "length_basis": reward.length_basis,
                },
            },
        },
        # Eq. 7's mixing weight, read by verl_joint's trainer at every step.
        "datamind": {
            "expert_replay": expert_replay(cfg),
            "gamma_schedule": rl.gamma_schedule,
            "gamma_peak": rl.gamma_peak,
            "gamma_valley": rl.gamma_valley,
        },
        "ray_kwargs": {"ray_init": {"runtime_env": {"env_vars": _plugin_env()}}},
        "trainer": {
            "v1": {"trainer_mode": TRAINER_MODE},
            "project_name": "datamind",
            "experiment_name": cfg.run_id or "rl",
            "nnodes": cluster.nnodes,
            "n_gpus_per_node": gpus,
            "total_epochs": max(1, int(round(rl.epochs))),
            "total_training_steps": total,
            "save_freq": cfg.save_every or 1_000_000_000,  # (verl saves only when > 0; the last step always then)
            "test_freq": -1,
            "val_before_train": False,
            "logger": ["console"],
            "default_local_dir": output_dir,
            "seed": cfg.seed,
        },
    }


def write_configs(work_dir: str, cfg: TrainConfig, train_file: str, output_dir: str, cluster: Cluster) -> str:
    """Writes the tool config and the Hydra config into ``work_dir``; returns the config directory."""
    import yaml

    tools = os.path.join(work_dir, "tools.yaml")
    with open(tools, "w", encoding="utf-8") as fh:
        yaml.safe_dump(tools_config(cfg.rl.exec_timeout_s), fh, sort_keys=False)
    conf = rl_config(cfg, train_file, tools, output_dir, cluster=cluster)
    with open(os.path.join(work_dir, f"{CONFIG_NAME}.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(conf, fh, sort_keys=False)
    return work_dir


def command(config_dir: str, env_dir: str | os.PathLike | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment additions) that start verl's trainer on the Ray head node.

    On several nodes, ``node_argv`` wraps it in the Ray cluster's start and stop."""
    argv = [
        os.path.join(engine_env(env_dir, "DATAMIND_VERL_ENV", VERL_ENV), "bin", "python"),
        "-m",
        "verl.trainer.main_ppo",
        "--config-path",
        os.path.abspath(config_dir),
        "--config-name",
        CONFIG_NAME,
    ]
    return argv, {**_plugin_env(), "HF_HUB_OFFLINE": "1"}


def _plugin_env() -> dict[str, str]:
    """What makes verl's processes (the trainer and its Ray workers) import the project's plugins."""
    pythonpath = os.pathsep.join(p for p in (str(INCLUDE_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": pythonpath, "VERL_USE_EXTERNAL_MODULES": JOINT_MODULE}


def node_argv(verl_argv: list[str], cluster: Cluster, env_dir: str | os.PathLike | None = None, port: int = 6379):
    """What this node runs. One node: verl's trainer (it starts a local Ray itself). Several nodes: every
    node joins one Ray cluster, as verl expects -- the head (rank 0) starts it, runs the trainer, which places
    its workers across the nodes, and stops it after; the others join and serve until the head stops."""
    if cluster.nnodes <= 1:
        return verl_argv
    ray = os.path.join(engine_env(env_dir, "DATAMIND_VERL_ENV", VERL_ENV), "bin", "ray")
    gpus = f"--num-gpus={cluster.gpus_per_node}"
    if cluster.node_rank > 0:
        return [ray, "start", f"--address={cluster.master_addr}:{port}", gpus, "--block"]
    script = f'"{ray}" start --head --port={port} {gpus} || exit 1; "$@"; rc=$?; "{ray}" stop; exit $rc'
    return ["sh", "-c", script, "verl-head", *verl_argv]


def describe(cfg: TrainConfig, cluster: Cluster) -> str:
    """One line for logs: what the generated run will do."""
    rl = cfg.rl
    return json.dumps(
        {
            "engine": "verl",
            "nodes": cluster.nnodes,
            "gpus_per_node": cluster.gpus_per_node,
            "group_size": rl.group_size,
            "clip": [rl.clip_low, rl.clip_high],
            "batch": rl.batch_size,
            "gamma": [rl.gamma_schedule, rl.gamma_peak, rl.gamma_valley],
        },
        sort_keys=True,
    )


_STEP = re.compile(r"^step:(\d+) - (.*)$")
# verl's console metrics worth a progress line, under the names the built-in trainer's lines use.
_METRICS = {
    "actor/pg_loss": "dapo_loss",
    "actor/sft_loss": "sft_loss",
    "actor/sft_gamma": "gamma",
    "critic/score/mean": "reward_mean",
    "critic/score/std": "reward_std",
    "actor/entropy": "entropy",
    "actor/pg_clipfrac": "clip_frac",
    "actor/grad_norm": "grad_norm",
    "actor/lr": "lr",
}


def progress(line: str) -> dict | None:
    """A progress record from verl's console logger line (``step:N - key:value - ...``)."""
    m = _STEP.match(line.strip())
    if not m:
        return None
    out: dict = {"phase": "sft+rl", "step": int(m.group(1))}
    for part in m.group(2).split(" - "):
        key, _, value = part.partition(":")
        if key in _METRICS:
            try:
                out[_METRICS[key]] = float(value)
            except ValueError:
                pass
    return out


def final_model(output_dir: str) -> str:
    """The Hugging Face model of verl's last checkpoint (``global_step_<N>/actor/huggingface``)."""
    steps = (
        [d for d in os.listdir(output_dir) if re.fullmatch(r"global_step_\d+", d)] if os.path.isdir(output_dir) else []
    )
    if not steps:
        raise FileNotFoundError(f"verl left no checkpoint under {output_dir}")
    last = max(steps, key=lambda d: int(d.rsplit("_", 1)[1]))
    return os.path.join(output_dir, last, "actor", "huggingface")


def run_rl(cfg: TrainConfig, emit=print):
    """The RL phase through verl on this node (``node_argv``: on several nodes every node runs this, with
    ``NNODES`` / ``NODE_RANK`` / ``MASTER_ADDR`` set by the launcher), recorded like a run of the built-in
    trainer (``engines``)."""

    def prepare(work: str, export_local: str, out: str, cluster: Cluster) -> tuple[list[str], dict[str, str]]:
        rows = os.path.join(work, "train.parquet")
        prepare_rows(export_local, rows, with_expert=expert_replay(cfg))
        emit(f"[datamind.train] verl: {describe(cfg, cluster)}")
        if cfg.cold_start:
            emit(
                "[datamind.train] verl runs no cold-start SFT: base_model_path is trained by RL as it is "
                "(point it at an SFT run's checkpoint)"
            )
        argv, env = command(write_configs(work, cfg, rows, out, cluster))
        return node_argv(argv, cluster), env

    return run_external(cfg, Engine("verl", prepare, progress, final_model), emit)
