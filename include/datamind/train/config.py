"""Training configuration: the paper's Table 2 as typed defaults, every field overridable.

Overrides come as a nested mapping (``{"rl": {"learning_rate": 2e-6}}``) or dotted keys
(``{"rl.learning_rate": 2e-6}``); an unknown key is an error, never silently ignored, so a typo in
a DAG trigger form cannot quietly train with the default.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args, get_type_hints

from datamind.ids import stable_id
from datamind.stage_params import StageParams, check_ranges, param

Phase = Literal["sft", "sft+rl"]
PHASES: tuple[str, ...] = get_args(Phase)
Engine = Literal["builtin", "llamafactory", "verl"]
ENGINES: tuple[str, ...] = get_args(Engine)


@dataclass(frozen=True)
class SFTConfig:
    """Cold-start supervised phase (Table 2, "SFT")."""

    learning_rate: float = 1e-5
    lr_scheduler: Literal["cosine", "constant"] = "cosine"
    warmup_ratio: float = 0.1
    batch_size: int = 16  # sequences per optimizer step (global, across ranks)
    micro_batch_size: int = 2  # sequences per forward pass; the rest is gradient accumulation
    epochs: float = 3.0
    cutoff_len: int = 8192  # tokens; longer conversations are cut (agent tokens past it are lost)
    max_steps: int | None = None  # hard cap on optimizer steps (smoke runs, tests)


@dataclass(frozen=True)
class RLConfig:
    """Joint SFT + DAPO phase (Table 2, "SFT+RL")."""

    learning_rate: float = 1e-6
    warmup_steps: int = 20  # constant schedule after a linear warmup
    batch_size: int = 16  # prompts per rollout step
    mini_batch_size: int = 2  # prompts per optimizer update (batch_size / mini_batch_size updates per step)
    micro_batch_size: int = 4  # sequences per forward pass
    epochs: float = 1.0
    max_prompt_length: int = 2048
    max_response_length: int = 8192  # agent + interpreter tokens after the prompt, whole trajectory
    max_turn_tokens: int = 1024  # new tokens per assistant turn
    max_turns: int = 10
    clip_low: float = 0.2
    clip_high: float = 0.28
    temperature: float = 0.7
    top_p: float = 1.0
    group_size: int = 4
    gamma_schedule: Literal["cosine", "constant"] = "cosine"
    gamma_peak: float = 0.9
    gamma_valley: float = 0.05
    max_steps: int | None = None
    exec_timeout_s: float = 30.0  # wall time per executed cell
    # Cells executing at once across the prompts of a rollout step (generation goes on meanwhile).
    exec_workers: int = 8


@dataclass(frozen=True)
class RewardConfig:
    l_min: int = 256
    l_max: int = 1024
    format_penalty: float = -0.1
    # "answer": tokens inside <answer> (the paper's wording); "response": every agent token.
    length_basis: Literal["answer", "response"] = "answer"


DEFAULT_REWARD = RewardConfig()  # frozen: one shared instance is every caller's default


@dataclass(frozen=True)
class TrainConfig:
    base_model_path: str = ""
    export_dir: str = ""  # directory (or URL) holding rl/train.parquet from datamind.train.exports
    phase: Phase = "sft+rl"
    cold_start: bool = True  # run the SFT phase before SFT+RL (ignored for phase="sft")
    run_id: str = ""  # empty: derived from the config, so a rerun of the same config overwrites its run
    data_root: str = ""  # empty: DATAMIND_DATA_ROOT / Settings default
    seed: int = 0
    sft: SFTConfig = field(default_factory=SFTConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    log_every: int = 1
    save_every: int = 0  # optimizer steps between intermediate checkpoints; 0 = end of each phase only
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on cuda, fp32 elsewhere
    gradient_checkpointing: bool = False
    # builtin: the project's trainer (SFT and SFT+RL; the CPU path of tests and the demo). llamafactory: the SFT
    # phase through LLaMA-Factory in its own environment (DATAMIND_TRAIN_ENV, default .venv-train).
    # verl: the joint SFT + DAPO phase through verl (the project's tool, format, reward and eq. 7 loss;
    # .venv-verl, DATAMIND_VERL_ENV), from a base model that already went through cold-start SFT.
    engine: Engine = "builtin"
    template: str = "default"  # LLaMA-Factory's chat template for the base model (qwen, llama3, ...)

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None = None) -> TrainConfig:
        return _build(cls, _nest(data or {}), "")

    def with_overrides(self, overrides: dict[str, Any] | None) -> TrainConfig:
        merged = _deep_merge(self.to_dict(), _nest(overrides or {}))
        return TrainConfig.from_dict(merged)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2)

    def validate(self) -> TrainConfig:
        problems = []
        if not self.base_model_path:
            problems.append("base_model_path is required")
        if not self.export_dir:
            problems.append("export_dir is required")
        if self.phase not in PHASES:
            problems.append(f"phase must be one of {PHASES}, got {self.phase!r}")
        if self.engine not in ENGINES:
            problems.append(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.engine == "llamafactory" and self.phase != "sft":
            problems.append(
                "engine llamafactory runs the SFT phase only (phase='sft'); SFT+RL runs on the builtin engine"
            )
        if self.engine == "verl" and self.phase != "sft+rl":
            problems.append("engine verl runs the RL phase (phase='sft+rl'); SFT runs on builtin or llamafactory")
        if self.rl.group_size < 2:
            problems.append("rl.group_size must be >= 2 (advantages are normalised within a group)")
        if self.rl.exec_workers < 1:
            problems.append("rl.exec_workers must be >= 1")
        if self.rl.batch_size % self.rl.mini_batch_size:
            problems.append("rl.batch_size must be a multiple of rl.mini_batch_size")
        if self.sft.batch_size % self.sft.micro_batch_size:
            problems.append("sft.batch_size must be a multiple of sft.micro_batch_size")
        if not 0 <= self.rl.gamma_valley <= self.rl.gamma_peak <= 1:
            problems.append("need 0 <= rl.gamma_valley <= rl.gamma_peak <= 1")
        if not (0 <= self.rl.clip_low < 1 and self.rl.clip_high >= 0):
            problems.append("clip ratios must satisfy 0 <= clip_low < 1 and clip_high >= 0")
        if not 0 < self.reward.l_min < self.reward.l_max:
            problems.append("need 0 < reward.l_min < reward.l_max")
        if problems:
            raise ValueError("invalid training config: " + "; ".join(problems))
        return self


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {key!r} conflicts with a scalar value for {p!r}")
        if isinstance(value, dict):
            value = _nest(value)
            if isinstance(node.get(parts[-1]), dict):
                value = _deep_merge(node[parts[-1]], value)
        node[parts[-1]] = value
    return out


def _deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _build(cls, data: dict[str, Any], prefix: str):
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown training config key(s): {', '.join(prefix + u for u in unknown)}")
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        typ, value = hints[f.name], data[f.name]
        if dataclasses.is_dataclass(typ):
            if not isinstance(value, dict):
                raise ValueError(f"{prefix}{f.name} must be a mapping")
            kwargs[f.name] = _build(typ, value, f"{prefix}{f.name}.")
        else:
            kwargs[f.name] = _coerce(typ, value, prefix + f.name)
    return cls(**kwargs)


def _coerce(typ, value, name: str):
    args = get_args(typ)
    if value is None:
        if type(None) in args:
            return None
        raise ValueError(f"{name} may not be null")
    if args and all(isinstance(a, str) for a in args):  # Literal
        if value not in args:
            raise ValueError(f"{name} must be one of {args}, got {value!r}")
        return value
    base = next((a for a in args if a is not type(None)), typ) if args else typ
    try:
        if base is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                return value.lower() in ("true", "1")
            return bool(value)
        if base is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if base is float:
            return float(value)
        if base is str:
            return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} expects {getattr(base, '__name__', base)}, got {value!r}") from None
    return value


def derive_run_id(cfg: TrainConfig, dataset_version: str) -> str:
    """Same config + same data -> same run id, so a retried launch reuses its run directory."""
    d = cfg.to_dict()
    for k in ("run_id", "data_root", "device"):
        d.pop(k)
    if d["engine"] == "builtin":  # runs from before engines existed keep their ids
        del d["engine"], d["template"]
    return "train-" + stable_id(d, dataset_version, length=12)


LAUNCHERS = ("local", "kubernetes", "ssh")


@dataclass(frozen=True)
class LaunchParams(StageParams):
    """train_agent's form: which model, phase and engine, the Table 2 overrides, and where the run goes. The
    deployment's defaults (``from_env``) are what the form shows; the run builds its ``TrainConfig`` from them."""

    base_model_path: str | None = param(
        None,
        "Base model path",
        description="Local directory of a Hugging Face causal LM (as seen by the trainer); never downloaded.",
    )
    phase: str = param(
        TrainConfig.phase,
        "Phase",
        enum=PHASES,
        description="sft: supervised only. sft+rl: cold-start SFT, then SFT + DAPO.",
    )
    engine: str = param(
        TrainConfig.engine,
        "Engine",
        enum=ENGINES,
        description="builtin: the project's trainer (SFT and SFT+RL). llamafactory: SFT through LLaMA-Factory "
        "(phase sft). verl: SFT + DAPO through verl from an SFT checkpoint as base model (phase sft+rl). "
        "Each engine runs in its own environment on the GPU worker.",
    )
    template: str = param(
        TrainConfig.template,
        "Chat template (LLaMA-Factory)",
        description="LLaMA-Factory's template for the base model, e.g. qwen for Qwen2.5.",
    )
    overrides: dict = param(
        None,
        "Config overrides",
        factory=dict,
        description='Nested or dotted keys over Table 2 defaults, e.g. {"rl.group_size": 8}.',
    )
    launcher: str = param(
        "local",
        "Launcher",
        enum=LAUNCHERS,
        description="Where training runs: this GPU worker, a Kubernetes pod, or a host over SSH.",
    )
    launcher_conn_id: str | None = param(
        None,
        "Launcher Connection",
        description="Airflow Connection with the launcher's credentials (kubernetes, ssh); "
        "leave empty for the local launcher.",
    )

    def __post_init__(self) -> None:
        check_ranges(self)

    @classmethod
    def from_env(cls) -> LaunchParams:
        """The deployment's defaults: ``DATAMIND_BASE_MODEL_PATH`` and ``DATAMIND_TRAIN_OVERRIDES`` (a JSON object;
        the local cluster sets a few CPU steps on a tiny model)."""
        import os

        return cls(
            base_model_path=os.environ.get("DATAMIND_BASE_MODEL_PATH") or None,
            overrides=json.loads(os.environ.get("DATAMIND_TRAIN_OVERRIDES") or "{}"),
        )

    def train_config(self, export_dir: str, data_root: str) -> TrainConfig:
        """The run's config: Table 2 defaults, the overrides, then this form's fields."""
        return (
            TrainConfig()
            .with_overrides(dict(self.overrides or {}))
            .with_overrides(
                {
                    "base_model_path": self.base_model_path or "",
                    "phase": self.phase,
                    "engine": self.engine,
                    "template": self.template,
                    "export_dir": export_dir,
                    "data_root": data_root,
                }
            )
        )
