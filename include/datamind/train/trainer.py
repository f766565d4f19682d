"""The training loop: optional cold-start SFT, then joint SFT + DAPO with rollouts (paper section 4).

Reads the RL export (``exports/<version>/rl/train.parquet``), which carries both the prompts and the
expert continuations, so one file drives both phases. Writes under the data root::

    runs/train/<run_id>/manifest.json          config, dataset version, status, final metrics
    runs/train/<run_id>/metrics.parquet        one row per optimizer step (schemas.TRAIN_METRICS)
    runs/train/<run_id>/checkpoints/<tag>/     save_pretrained model + tokenizer; checkpoint.json last

Progress goes to stdout as ``DATAMIND_PROGRESS {json}`` lines and the outcome as one
``DATAMIND_RESULT {json}`` line, which is what the launchers stream and parse.

Scale note: this is a faithful single-node reference implementation (plain data parallelism with
gradient all-reduce, no sharding of weights or optimizer state). Models whose AdamW state does not fit
one device should be trained with LLaMA-Factory / verl from the same exports.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import posixpath
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

import fsspec
import pyarrow.parquet as pq
import torch

from datamind.assets import DIRS
from datamind.schemas import TRAIN_METRICS
from datamind.settings import Settings
from datamind.shards import table_to_parquet_bytes
from datamind.storage import DataRoot
from datamind.train.config import TrainConfig, derive_run_id
from datamind.train.exports import MANIFEST_FILE, RL_FILE
from datamind.train.losses import (
    dapo_loss,
    dynamic_sampling_mask,
    group_advantages,
    rl_eligible,
    sft_loss,
    token_entropy,
    token_logprobs,
)
from datamind.train.reward import Judge, MatchJudge, score
from datamind.train.rollout import AgentLoopRollout, Executor, Rollout, RolloutPrompt, SubprocessPythonExecutor
from datamind.train.schedule import gamma_at
from datamind.train.tokenization import Batch, Encoded, collate, encode, ensure_chat_template, render

log = logging.getLogger(__name__)

PROGRESS_PREFIX = "DATAMIND_PROGRESS "
RESULT_PREFIX = "DATAMIND_RESULT "


class TrainingError(RuntimeError):
    pass


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


@dataclass
class RunResult:
    run_id: str
    checkpoint_uri: str
    manifest_uri: str
    metrics_uri: str
    dataset_version: str
    final_metrics: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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


def _chunks(items: Sequence, size: int) -> list[list]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


@dataclass
class _Group:
    sample: int
    rewards: list[float]
    void: list[bool]
    encoded: list[Encoded]
    answers: list[int]
    formats: list[int]


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
        self.metrics: list[dict] = []
        self.global_step = 0

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
        self.dataset_version = export_manifest["dataset_version"]
        self.run_id = cfg.run_id or derive_run_id(cfg, self.dataset_version)
        self.run_dir = posixpath.join(DIRS["runs"], "train", self.run_id)
        self.started_at = datetime.now(timezone.utc)
        self._write_manifest("running")
        try:
            self._load_model()
            torch.manual_seed(cfg.seed + self.dist.rank)
            expert = [encode(self.tokenizer, s.prompt + s.target, len(s.prompt), cfg.sft.cutoff_len) for s in samples]
            usable = [i for i, e in enumerate(expert) if sum(e.agent_mask[1:]) > 0]
            if not usable:
                raise TrainingError("no sample keeps any agent token within sft.cutoff_len")
            self._note(
                f"{len(samples)} samples from dataset {self.dataset_version}; "
                f"{len(samples) - len(usable)} dropped (no agent tokens within cutoff); device {self.dist.device}"
            )
            if cfg.phase == "sft" or cfg.cold_start:
                self._sft_phase([expert[i] for i in usable])
                if cfg.phase == "sft+rl":
                    self._save("sft")
            if cfg.phase == "sft+rl":
                self._rl_phase([samples[i] for i in usable], [expert[i] for i in usable])
            self._save("final")
            final = {k: v for k, v in (self.metrics[-1] if self.metrics else {}).items() if k != "logged_at"}
            result = RunResult(
                run_id=self.run_id,
                checkpoint_uri=self.root.uri(self.run_dir, "checkpoints", "final"),
                manifest_uri=self.root.uri(self.run_dir, "manifest.json"),
                metrics_uri=self.root.uri(self.run_dir, "metrics.parquet"),
                dataset_version=self.dataset_version,
                final_metrics=final,
            )
            self._write_manifest("succeeded", result=result)
            if self.dist.main:
                self.emit(RESULT_PREFIX + json.dumps(result.to_dict(), sort_keys=True, default=str))
            return result
        except BaseException as exc:
            self._write_manifest("failed", error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.dist.close()

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

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def _forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        b = batch.to(self.dist.device)
        out = self.model(input_ids=b.input_ids, attention_mask=b.attention_mask, use_cache=False)
        logp = token_logprobs(out.logits, b.input_ids)
        with torch.no_grad():
            ent = token_entropy(out.logits.detach())
        return logp, ent

    def _optim(self, lr: float) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.params, lr=lr, weight_decay=self.cfg.weight_decay)

    def _update(self, opt, sched) -> float:
        self.dist.average_grads(self.params)
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        return float(norm)

    def _batch_positions(self, step: int, batch_size: int, n: int) -> list[int]:
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
    def _total_steps(n: int, batch_size: int, epochs: float, max_steps: int | None) -> int:
        total = max(1, math.ceil(epochs * n / batch_size))
        return min(total, max_steps) if max_steps else total

    # -- phase 1: SFT -------------------------------------------------------------------------
    def _sft_phase(self, data: list[Encoded]) -> None:
        from transformers import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

        c = self.cfg.sft
        total = self._total_steps(len(data), c.batch_size, c.epochs, c.max_steps)
        opt = self._optim(c.learning_rate)
        warmup = math.ceil(c.warmup_ratio * total)
        sched = (
            get_cosine_schedule_with_warmup(opt, warmup, total)
            if c.lr_scheduler == "cosine"
            else get_constant_schedule_with_warmup(opt, warmup)
        )
        self._perms: dict[int, list[int]] = {}
        pad = self.tokenizer.pad_token_id
        self._note(f"phase sft: {total} steps of {c.batch_size} sequences, lr {c.learning_rate:g}")
        for step in range(total):
            t0 = time.perf_counter()
            items = [data[i] for i in self._batch_positions(step, c.batch_size, len(data))]
            n_tok = sum(sum(e.agent_mask[1:]) for e in items)
            loss_v = ent_v = 0.0
            for micro in _chunks(items, c.micro_batch_size):
                batch = collate(micro, pad)
                logp, ent = self._forward(batch)
                mask = batch.agent_mask.to(self.dist.device)
                loss = sft_loss(logp, mask, normalizer=n_tok)
                loss.backward()
                loss_v += loss.item()
                ent_v += float((ent * mask).sum()) / max(n_tok, 1)
            lr = sched.get_last_lr()[0]
            norm = self._update(opt, sched)
            self._log(
                "sft",
                step,
                (step + 1) * c.batch_size / len(data),
                t0,
                loss=loss_v,
                sft_loss=loss_v,
                entropy=ent_v,
                lr=lr,
                grad_norm=norm,
                n_tokens=n_tok,
            )
            if self.cfg.save_every and (step + 1) % self.cfg.save_every == 0 and step + 1 < total:
                self._save(f"sft-step-{step + 1}")

    # -- phase 2: SFT + DAPO ----------------------------------------------------------------------
    def _rl_phase(self, samples: list[Sample], expert: list[Encoded]) -> None:
        from transformers import get_constant_schedule_with_warmup

        from datamind.train.policy import HFPolicy

        c = self.cfg.rl
        keep = [i for i, s in enumerate(samples) if self._prompt_tokens(s) <= c.max_prompt_length]
        if not keep:
            raise TrainingError(f"every prompt is longer than rl.max_prompt_length={c.max_prompt_length}")
        if len(keep) < len(samples):
            self._note(f"{len(samples) - len(keep)} prompts longer than {c.max_prompt_length} tokens skipped in RL")
        samples, expert = [samples[i] for i in keep], [expert[i] for i in keep]
        total = self._total_steps(len(samples), c.batch_size, c.epochs, c.max_steps)
        opt = self._optim(c.learning_rate)
        sched = get_constant_schedule_with_warmup(opt, c.warmup_steps)
        self._perms = {}
        policy = HFPolicy(self.model, self.tokenizer, temperature=c.temperature, top_p=c.top_p)
        rollout = self.rollout or AgentLoopRollout(
            self._count_tokens,
            c.max_turns,
            c.max_turn_tokens,
            c.max_response_length,
            c.exec_timeout_s,
            exec_workers=c.exec_workers,
        )
        executor = self.executor or self._default_executor()
        n_updates = c.batch_size // c.mini_batch_size
        self._note(
            f"phase sft+rl: {total} steps of {c.batch_size} prompts x G={c.group_size}, "
            f"{n_updates} updates/step, lr {c.learning_rate:g}"
        )
        try:
            for step in range(total):
                t0 = time.perf_counter()
                gamma = gamma_at(step, total, c.gamma_schedule, c.gamma_peak, c.gamma_valley)
                idx = self._batch_positions(step, c.batch_size, len(samples))
                groups = self._rollout_groups(idx, samples, rollout, policy, executor)
                self._rl_step(step, total, t0, gamma, groups, expert, opt, sched, n_updates, len(samples))
                if self.cfg.save_every and (step + 1) % self.cfg.save_every == 0 and step + 1 < total:
                    self._save(f"rl-step-{step + 1}")
        finally:
            if executor is not self.executor and hasattr(executor, "close"):
                executor.close()  # the sandbox this trainer started (a caller's executor stays the caller's)

    def _default_executor(self) -> Executor:
        c = self.cfg.rl
        if c.executor == "subprocess":
            msg = (
                "rl.executor='subprocess': rollout code runs in plain python subprocesses WITHOUT the "
                "sandbox (no network, filesystem or privilege isolation); use only on trusted workers"
            )
            log.warning(msg)
            self._note(f"WARNING: {msg}")
            return SubprocessPythonExecutor()
        from datamind.sandbox import SandboxLimits
        from datamind.train.sandbox_exec import SandboxExecutor

        # Deployment limits from DATAMIND_SANDBOX_*; the per-cell wall time is the training config's.
        return SandboxExecutor(dataclasses.replace(SandboxLimits.from_env(), wall_s=c.exec_timeout_s))

    def _prompt_tokens(self, s: Sample) -> int:
        return self._count_tokens(render(self.tokenizer, s.prompt, add_generation_prompt=True))

    def _rollout_groups(
        self, idx: list[int], samples: list[Sample], rollout: Rollout, policy, executor
    ) -> list[_Group]:
        c = self.cfg.rl
        prompts = [samples[i].rollout_prompt() for i in idx]
        batch = getattr(rollout, "batch", None)
        if batch is not None:  # the prompts of the step run together: generation overlaps execution
            per_prompt = batch(prompts, group_size=c.group_size, generate=policy, execute=executor)
        else:
            per_prompt = [rollout(p, group_size=c.group_size, generate=policy, execute=executor) for p in prompts]
        return [self._group(i, samples[i], trajs) for i, trajs in zip(idx, per_prompt, strict=True)]

    def _group(self, i: int, s: Sample, trajs: list) -> _Group:
        c = self.cfg.rl
        if len(trajs) != c.group_size:
            raise TrainingError(f"rollout returned {len(trajs)} trajectories, expected G={c.group_size}")
        scores = [
            score(t.messages, s.question, s.ground_truth, self.judge, self._count_tokens, self.cfg.reward)
            for t in trajs
        ]
        max_len = c.max_prompt_length + c.max_response_length
        return _Group(
            sample=i,
            rewards=[sc.reward for sc in scores],
            void=[t.n_void_turns > 0 for t in trajs],
            encoded=[encode(self.tokenizer, s.prompt + t.messages, len(s.prompt), max_len) for t in trajs],
            answers=[sc.r_answer for sc in scores],
            formats=[sc.r_format for sc in scores],
        )

    def _rl_step(self, step, total, t0, gamma, groups: list[_Group], expert, opt, sched, n_updates, n_samples):
        c = self.cfg.rl
        pad = self.tokenizer.pad_token_id
        lr = sched.get_last_lr()[0]
        rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float32)
        correct = torch.tensor([g.answers for g in groups], dtype=torch.int64)
        has_signal = dynamic_sampling_mask(correct)
        adv = group_advantages(rewards)
        has_tokens = torch.tensor([[sum(e.agent_mask[1:]) > 0 for e in g.encoded] for g in groups])
        chosen = rl_eligible(correct, torch.tensor([g.void for g in groups]), has_tokens)
        eligible = [(gi, j) for gi in range(len(groups)) for j in range(c.group_size) if chosen[gi, j]]
        # pi_old: log-probs under the policy that produced the rollouts, before this step's updates.
        # The same pass measures the policy's entropy over every rollout's agent tokens.
        old_logp: dict[tuple[int, int], torch.Tensor] = {}
        scored = [(gi, j) for gi in range(len(groups)) for j in range(c.group_size) if has_tokens[gi, j]]
        wanted = set(eligible)
        ent_sum = ent_tok = 0.0
        with torch.no_grad():
            for micro in _chunks(scored, c.micro_batch_size):
                batch = collate([groups[gi].encoded[j] for gi, j in micro], pad)
                logp, ent = self._forward(batch)
                mask = batch.agent_mask.to(self.dist.device)
                ent_sum += float((ent * mask).sum())
                ent_tok += float(mask.sum())
                for row, (gi, j) in enumerate(micro):
                    if (gi, j) in wanted:  # trimmed to the sequence: padding width differs between passes
                        old_logp[(gi, j)] = logp[row, : len(groups[gi].encoded[j].input_ids) - 1].detach()

        losses, sft_vals, dapo_vals, clip_vals, norms, n_tokens = [], [], [], [], [], 0
        n = len(groups)
        for part in [list(range(k * n // n_updates, (k + 1) * n // n_updates)) for k in range(n_updates)]:
            if not part and self.dist.world == 1:
                continue  # (with several ranks every rank must still join each gradient all-reduce)
            sft_items = [expert[groups[gi].sample] for gi in part]
            n_sft = sum(sum(e.agent_mask[1:]) for e in sft_items)
            sft_v = 0.0
            for micro in _chunks(sft_items, c.micro_batch_size):
                batch = collate(micro, pad)
                logp, _ = self._forward(batch)
                loss = sft_loss(logp, batch.agent_mask.to(self.dist.device), normalizer=n_sft)
                (gamma * loss).backward()
                sft_v += loss.item()
            rl_keys = [k for k in eligible if k[0] in set(part)]
            dapo_v = None
            if rl_keys:
                # Eq. 5 averages tokens within a group, then over groups: weight 1 / (K * T_g) per token.
                tok_per_group: dict[int, int] = {}
                for gi, j in rl_keys:
                    tok_per_group[gi] = tok_per_group.get(gi, 0) + sum(groups[gi].encoded[j].agent_mask[1:])
                k_groups = len(tok_per_group)
                dapo_v, clipped, counted = 0.0, 0.0, 0
                for micro in _chunks(rl_keys, c.micro_batch_size):
                    batch = collate([groups[gi].encoded[j] for gi, j in micro], pad)
                    logp, _ = self._forward(batch)
                    width = logp.shape[1]
                    old = torch.stack(
                        [torch.nn.functional.pad(old_logp[k], (0, width - old_logp[k].shape[0])) for k in micro]
                    )
                    weights = torch.tensor(
                        [1.0 / (k_groups * tok_per_group[gi]) for gi, _ in micro], device=self.dist.device
                    ).unsqueeze(-1)
                    mask = batch.agent_mask.to(self.dist.device)
                    a = torch.stack([adv[gi, j] for gi, j in micro]).to(self.dist.device)
                    loss, stats = dapo_loss(logp, old, a, mask * weights, c.clip_low, c.clip_high, normalizer=1.0)
                    ((1.0 - gamma) * loss).backward()
                    dapo_v += loss.item()
                    n = int(mask.sum().item())
                    clipped += stats["clip_frac"] * n
                    counted += n
                clip_vals.append(clipped / max(counted, 1))
                dapo_vals.append(dapo_v)
                n_tokens += counted
            n_tokens += n_sft
            sft_vals.append(sft_v)
            losses.append(gamma * sft_v + ((1.0 - gamma) * dapo_v if dapo_v is not None else 0.0))
            norms.append(self._update(opt, sched))

        r = rewards.flatten()
        void_frac = sum(sum(g.void) for g in groups) / max(1, len(groups) * c.group_size)
        self._log(
            "sft+rl",
            step,
            (step + 1) * c.batch_size / n_samples,
            t0,
            loss=_mean(losses),
            sft_loss=_mean(sft_vals),
            dapo_loss=_mean(dapo_vals),
            gamma=gamma,
            reward_mean=float(r.mean()),
            reward_std=float(r.std(unbiased=False)),
            answer_acc=_mean([a for g in groups for a in g.answers]),
            format_rate=_mean([f for g in groups for f in g.formats]),
            entropy=ent_sum / ent_tok if ent_tok else None,
            filtered_group_frac=1.0 - float(has_signal.float().mean()),
            void_turn_frac=void_frac,
            clip_frac=_mean(clip_vals),
            lr=lr,
            grad_norm=_mean(norms),
            n_tokens=n_tokens,
        )

    # -- bookkeeping ----------------------------------------------------------------------------
    def _log(self, phase: str, step: int, epoch: float, t0: float, **values) -> None:
        values["step_time_s"] = time.perf_counter() - t0
        values = self.dist.mean_metrics(values)
        if values.get("n_tokens") is not None:
            values["n_tokens"] *= self.dist.world  # a count: summed over ranks, not averaged
        self.global_step += 1
        row = {
            "run_id": self.run_id,
            "phase": phase,
            "step": step + 1,
            "global_step": self.global_step,
            "epoch": epoch,
            **values,
        }
        row["n_tokens"] = int(row["n_tokens"]) if row.get("n_tokens") is not None else None
        row["logged_at"] = datetime.now(timezone.utc)
        self.metrics.append(row)
        if not self.dist.main:
            return
        last = (step + 1) % max(1, self.cfg.log_every) == 0
        if last:
            self.emit(
                PROGRESS_PREFIX
                + json.dumps({k: v for k, v in row.items() if v is not None and k != "logged_at"}, sort_keys=True)
            )
        self.root.write_bytes(
            posixpath.join(self.run_dir, "metrics.parquet"),
            table_to_parquet_bytes(TRAIN_METRICS.to_table(self.metrics)),
        )

    def _note(self, text: str) -> None:
        if self.dist.main:
            self.emit(f"[datamind.train] {text}")

    def _save(self, tag: str) -> str:
        """Checkpoint to ``checkpoints/<tag>/``; ``checkpoint.json`` is written last and marks it complete."""
        rel = posixpath.join(self.run_dir, "checkpoints", tag)
        if self.dist.main:
            with tempfile.TemporaryDirectory(prefix="datamind-ckpt-") as tmp:
                self.model.save_pretrained(tmp)
                self.tokenizer.save_pretrained(tmp)
                files = sorted(os.listdir(tmp))
                self.root.remove(rel)
                for name in files:
                    self.root.put_file(os.path.join(tmp, name), posixpath.join(rel, name))
            meta = {
                "run_id": self.run_id,
                "tag": tag,
                "global_step": self.global_step,
                "files": files,
                "dataset_version": self.dataset_version,
                "base_model_path": self.cfg.base_model_path,
            }
            self.root.write_text(posixpath.join(rel, "checkpoint.json"), json.dumps(meta, indent=2, sort_keys=True))
            self._note(f"checkpoint {tag} -> {self.root.uri(rel)}")
        self.dist.barrier()
        return self.root.uri(rel)

    def _write_manifest(self, status: str, result: RunResult | None = None, error: str | None = None) -> None:
        if not self.dist.main:
            return
        import transformers

        manifest = {
            "run_id": self.run_id,
            "status": status,
            "dataset_version": self.dataset_version,
            "export_dir": self.cfg.export_dir,
            "config": self.cfg.to_dict(),
            "started_at": self.started_at.isoformat(),
            "updated_at": datetime.now(timezone.utc).isoformat(),
            "world_size": self.dist.world,
            "device": str(self.dist.device),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "steps": self.global_step,
        }
        if result is not None:
            manifest["result"] = result.to_dict()
        if error is not None:
            manifest["error"] = error[:2000]
        self.root.write_text(
            posixpath.join(self.run_dir, "manifest.json"), json.dumps(manifest, indent=2, sort_keys=True, default=str)
        )


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def train(cfg: TrainConfig, **kwargs) -> RunResult:
    if cfg.engine == "llamafactory":
        from datamind.train.llamafactory import run_sft

        return run_sft(cfg.validate(), emit=kwargs.get("emit") or print)
    if cfg.engine == "verl":
        from datamind.train.verl_engine import run_rl

        return run_rl(cfg.validate(), emit=kwargs.get("emit") or print)
    return Trainer(cfg, **kwargs).run()
