"""The training loop: optional cold-start SFT, then joint SFT + DAPO with rollouts (paper section 4).

Reads the RL export (``exports/<version>/rl/train.parquet``), which carries both the prompts and the
expert continuations, so one file drives both phases. Writes under the data root::

    runs/train/<run_id>/manifest.json          config, dataset version, status, final metrics
    runs/train/<run_id>/metrics.parquet        one row per optimizer step (schemas.TRAIN_METRICS)
    runs/train/<run_id>/checkpoints/<tag>/     save_pretrained model + tokenizer; checkpoint.json last

Progress and the outcome go to stdout in the run protocol's lines (``datamind.train.protocol``), which is
what the launchers stream and parse. The two phases live in ``sft_phase`` and ``rl_phase``; what the run
writes (metrics, checkpoints, manifest) in ``run_log``; this module loads the model and samples and owns
the model-level steps both phases share (forward, update, batch order).

Scale note: this is a faithful single-node reference implementation (plain data parallelism with
gradient all-reduce, no sharding of weights or optimizer state). Models whose AdamW state does not fit
one device should be trained with LLaMA-Factory / verl from the same exports.
"""

from __future__ import annotations

import json
import logging
import math
import os
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import fsspec
import pyarrow.parquet as pq
import torch

from datamind.settings import Settings
from datamind.storage import DataRoot
from datamind.train.config import TrainConfig, derive_run_id
from datamind.train.exports import MANIFEST_FILE, RL_FILE
from datamind.train.losses import token_entropy, token_logprobs
from datamind.train.protocol import RunRecord, RunResult, TrainingError, result_line
from datamind.train.reward import Judge, MatchJudge
from datamind.train.rl_phase import RLPhase
from datamind.train.rollout import Executor, Rollout, RolloutPrompt
from datamind.train.run_log import RunLog
from datamind.train.sft_phase import sft_phase
from datamind.train.tokenization import Batch, encode, ensure_chat_template

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    sample_id: str
    prompt: list[dict]
    target: list[dict]
    question: str
    ground_truth: str
    category: str
    data_uri: str | None
    data_format: str | None = None

    def rollout_prompt(self) -> RolloutPrompt:
        return RolloutPrompt(
            self.sample_id, self.prompt, self.question, self.ground_truth, self.data_uri, self.data_format
        )


def load_samples(export_dir: str, root: DataRoot | None = None) -> tuple[list[Sample], dict]:
    """Samples and the export manifest from an export directory (local path or URL)."""
    export_dir = export_dir.rstrip("/")
    with fsspec.open(posixpath.join(export_dir, MANIFEST_FILE), "rt") as fh:
        manifest = json.load(fh)
    with fsspec.open(posixpath.join(export_dir, RL_FILE), "rb") as fh:
        rows = pq.read_table(fh).to_pylist()
    samples = []
    for r in rows:
        info = r["extra_info"]
        uri = info.get("data_uri")
        if uri and root is not None and "://" not in uri and not os.path.isabs(uri):
            uri = root.uri(uri)  # stored relative to the data root
        samples.append(
            Sample(
                sample_id=info["sample_id"],
                prompt=[{"role": m["role"], "content": m["content"]} for m in r["prompt"]],
                target=[{"role": m["role"], "content": m["content"]} for m in r["target"]],
                question=info["question"],
                ground_truth=r["reward_model"]["ground_truth"],
                category=info["category"],
                data_uri=uri,
                data_format=info.get("data_format"),
            )
        )
    return samples, manifest


# -- distributed helpers (torchrun sets the environment) ------------------------------------------
class _Dist:
    def __init__(self, device_pref: str) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if device_pref == "auto":
            device_pref = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device_pref)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def average_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        # Manual all-reduce instead of DDP: ranks run different numbers of micro-batches (groups are
        # filtered per rank), which would deadlock DDP's per-backward hooks.
        if self.world == 1:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            torch.distributed.all_reduce(p.grad)
            p.grad /= self.world

    def mean_metrics(self, values: dict[str, float | None]) -> dict[str, float | None]:
        if self.world == 1:
            return values
        keys = sorted(values)
        t = torch.tensor(
            [[0.0 if values[k] is None else float(values[k]), 0.0 if values[k] is None else 1.0] for k in keys],
            dtype=torch.float64,
            device=self.device,
        )
        torch.distributed.all_reduce(t)
        return {k: (float(t[i, 0] / t[i, 1]) if t[i, 1] > 0 else None) for i, k in enumerate(keys)}

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def close(self) -> None:
        if self.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


class Trainer:
    def __init__(
        self,
        cfg: TrainConfig,
        *,
        rollout: Rollout | None = None,
        executor: Executor | None = None,
        judge: Judge | None = None,
        emit: Callable[[str], None] | None = None,
    ) -> None:
        self.cfg = cfg.validate()
        self.rollout, self.executor, self.judge = rollout, executor, judge or MatchJudge()
        self.emit = emit or (lambda line: print(line, flush=True))

    # -- entry point --------------------------------------------------------------------------
    def run(self) -> RunResult:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a model path that is not local must fail, not download
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        cfg = self.cfg
        self.root = DataRoot(cfg.data_root or Settings.from_env().data_root)
        self.dist = _Dist(cfg.device)
        samples, export_manifest = load_samples(cfg.export_dir, self.root)
        if not samples:
            raise TrainingError(f"export {cfg.export_dir} has no samples")
        version = export_manifest["dataset_version"]
        record = RunRecord(
            root=self.root,
            run_id=cfg.run_id or derive_run_id(cfg, version),
            engine="builtin",
            dataset_version=version,
            export_dir=cfg.export_dir,
            config=cfg.to_dict(),
            world_size=self.dist.world,
            main=self.dist.main,
        )
        self.log = RunLog(self.root, record, self.dist, self.emit, cfg.log_every)
        self.log.manifest("running")
        try:
            self._load_model()
            torch.manual_seed(cfg.seed + self.dist.rank)
            expert = [encode(self.tokenizer, s.prompt + s.target, len(s.prompt), cfg.sft.cutoff_len) for s in samples]
            usable = [i for i, e in enumerate(expert) if sum(e.agent_mask[1:]) > 0]
            if not usable:
                raise TrainingError("no sample keeps any agent token within sft.cutoff_len")
            self.log.note(
                f"{len(samples)} samples from dataset {version}; "
                f"{len(samples) - len(usable)} dropped (no agent tokens within cutoff); device {self.dist.device}"
            )
            if cfg.phase == "sft" or cfg.cold_start:
                sft_phase(self, [expert[i] for i in usable])
                if cfg.phase == "sft+rl":
                    self.save("sft")
            if cfg.phase == "sft+rl":
                phase = RLPhase(self, self.rollout, self.executor, self.judge)
                phase.run([samples[i] for i in usable], [expert[i] for i in usable])
            self.save("final")
            result = self.log.result()
            self.log.manifest("succeeded", result=result)
            if self.dist.main:
                self.emit(result_line(result))
            return result
        except BaseException as exc:
            self.log.manifest("failed", error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.dist.close()

    def save(self, tag: str) -> str:
        return self.log.checkpoint(self.model, self.tokenizer, tag, self.cfg.base_model_path)

    # -- model ----------------------------------------------------------------------------------
    def _load_model(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        path = self.cfg.base_model_path
        if not os.path.isdir(path):
            raise TrainingError(f"base_model_path {path!r} is not a local directory (models are never downloaded)")
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        ensure_chat_template(tok)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        use_bf16 = self.dist.device.type == "cuda" and self.cfg.dtype != "float32"
        if self.cfg.dtype == "bfloat16" and not use_bf16:
            log.warning("bfloat16 requested without CUDA; training in float32")
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=torch.bfloat16 if use_bf16 else torch.float32
        )
        if self.cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.config.use_cache = False
        self.model = model.to(self.dist.device)
        self.model.train()
        self.tokenizer = tok
        self.params = [p for p in self.model.parameters() if p.requires_grad]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        b = batch.to(self.dist.device)
        out = self.model(input_ids=b.input_ids, attention_mask=b.attention_mask, use_cache=False)
        logp = token_logprobs(out.logits, b.input_ids)
        with torch.no_grad():
            ent = token_entropy(out.logits.detach())
        return logp, ent

    def optimizer(self, lr: float) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.params, lr=lr, weight_decay=self.cfg.weight_decay)

    def update(self, opt, sched) -> float:
        self.dist.average_grads(self.params)
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        return float(norm)

    def new_epoch_order(self) -> None:
        """Each phase draws its batches from its own seeded per-epoch permutations."""
        self._perms: dict[int, list[int]] = {}

    def batch_positions(self, step: int, batch_size: int, n: int) -> list[int]:
        """Sample indices of global batch ``step``: consecutive slices of seeded per-epoch permutations."""
        out = []
        for p in range(step * batch_size, (step + 1) * batch_size):
            epoch, j = divmod(p, n)
            if epoch not in self._perms:
                g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + epoch)
                self._perms[epoch] = torch.randperm(n, generator=g).tolist()
            out.append(self._perms[epoch][j])
        return out[self.dist.rank :: self.dist.world]

    @staticmethod
    def total_steps(n: int, batch_size: int, epochs: float, max_steps: int | None) -> int:
        total = max(1, math.ceil(epochs * n / batch_size))
        return min(total, max_steps) if max_steps else total


def _llamafactory(cfg: TrainConfig, emit) -> RunResult:
    from datamind.train.llamafactory import run_sft  # imported when used: it brings its own stack

    return run_sft(cfg, emit=emit)


def _verl(cfg: TrainConfig, emit) -> RunResult:
    from datamind.train.verl_engine import run_rl

    return run_rl(cfg, emit=emit)


# The engines besides the built-in trainer: config.Engine names them, and a new one is an entry here.
EXTERNAL_ENGINES: dict[str, Callable[..., RunResult]] = {"llamafactory": _llamafactory, "verl": _verl}


def train(cfg: TrainConfig, **kwargs) -> RunResult:
    if cfg.engine in EXTERNAL_ENGINES:
        return EXTERNAL_ENGINES[cfg.engine](cfg.validate(), kwargs.get("emit") or print)
    return Trainer(cfg, **kwargs).run()
