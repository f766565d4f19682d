"""Phase 2 of the built-in trainer: joint SFT + DAPO with rollouts and the dynamic gamma (paper section 4).

Each step rolls out G trajectories per prompt in the sandbox (the same one trajectory sampling uses), scores
them with the eq. 8 reward, keeps the groups whose answers disagree (eq. 5's dynamic sampling), and takes
``batch_size / mini_batch_size`` updates of ``gamma * SFT + (1 - gamma) * DAPO`` (eq. 7).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from datamind.sandbox import SandboxLimits
from datamind.shards import chunk
from datamind.train.losses import dapo_loss, dynamic_sampling_mask, group_advantages, rl_eligible, sft_loss
from datamind.train.protocol import TrainingError
from datamind.train.reward import Judge, score
from datamind.train.rollout import AgentLoopRollout, Executor, Rollout
from datamind.train.sandbox_exec import SandboxExecutor
from datamind.train.schedule import gamma_at
from datamind.train.tokenization import Encoded, collate, encode, render

if TYPE_CHECKING:
    from datamind.train.trainer import Sample, Trainer


@dataclass
class _Group:
    sample: int
    rewards: list[float]
    void: list[bool]
    encoded: list[Encoded]
    answers: list[int]
    formats: list[int]


def _mean(values) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


class RLPhase:
    def __init__(self, trainer: Trainer, rollout: Rollout | None, executor: Executor | None, judge: Judge) -> None:
        self.t, self.rollout, self.executor, self.judge = trainer, rollout, executor, judge

    def run(self, samples: list[Sample], expert: list[Encoded]) -> None:
        from transformers import get_constant_schedule_with_warmup

        from datamind.train.policy import HFPolicy

        c = self.t.cfg.rl
        keep = [i for i, s in enumerate(samples) if self._prompt_tokens(s) <= c.max_prompt_length]
        if not keep:
            raise TrainingError(f"every prompt is longer than rl.max_prompt_length={c.max_prompt_length}")
        if len(keep) < len(samples):
            self.t.log.note(
                f"{len(samples) - len(keep)} prompts longer than {c.max_prompt_length} tokens skipped in RL"
            )
        samples, expert = [samples[i] for i in keep], [expert[i] for i in keep]
        total = self.t.total_steps(len(samples), c.batch_size, c.epochs, c.max_steps)
        opt = self.t.optimizer(c.learning_rate)
        sched = get_constant_schedule_with_warmup(opt, c.warmup_steps)
        self.t.new_epoch_order()
        policy = HFPolicy(self.t.model, self.t.tokenizer, temperature=c.temperature, top_p=c.top_p)
        rollout = self.rollout or AgentLoopRollout(
            self.t.count_tokens,
            c.max_turns,
            c.max_turn_tokens,
            c.max_response_length,
            c.exec_timeout_s,
            exec_workers=c.exec_workers,
        )
        executor = self.executor or self._default_executor()
        n_updates = c.batch_size // c.mini_batch_size
        self.t.log.note(
            f"phase sft+rl: {total} steps of {c.batch_size} prompts x G={c.group_size}, "
            f"{n_updates} updates/step, lr {c.learning_rate:g}"
        )
        try:
            for step in range(total):
                t0 = time.perf_counter()
                gamma = gamma_at(step, total, c.gamma_schedule, c.gamma_peak, c.gamma_valley)
                idx = self.t.batch_positions(step, c.batch_size, len(samples))
                groups = self._rollout_groups(idx, samples, rollout, policy, executor)
                self._step(step, total, t0, gamma, groups, expert, opt, sched, n_updates, len(samples))
                if self.t.cfg.save_every and (step + 1) % self.t.cfg.save_every == 0 and step + 1 < total:
                    self.t.save(f"rl-step-{step + 1}")
        finally:
            if executor is not self.executor and hasattr(executor, "close"):
                executor.close()  # the sandbox this trainer started (a caller's executor stays the caller's)

    def _default_executor(self) -> Executor:
        # Deployment limits from DATAMIND_SANDBOX_*; the per-cell wall time is the training config's.
        return SandboxExecutor(dataclasses.replace(SandboxLimits.from_env(), wall_s=self.t.cfg.rl.exec_timeout_s))

    def _prompt_tokens(self, s: Sample) -> int:
        return self.t.count_tokens(render(self.t.tokenizer, s.prompt, add_generation_prompt=True))

    def _rollout_groups(
        self, idx: list[int], samples: list[Sample], rollout: Rollout, policy, executor
    ) -> list[_Group]:
        c = self.t.cfg.rl
        prompts = [samples[i].rollout_prompt() for i in idx]
        batch = getattr(rollout, "batch", None)
        if batch is not None:  # the prompts of the step run together: generation overlaps execution
            per_prompt = batch(prompts, group_size=c.group_size, generate=policy, execute=executor)
        else:
            per_prompt = [rollout(p, group_size=c.group_size, generate=policy, execute=executor) for p in prompts]
        return [self._group(i, samples[i], trajs) for i, trajs in zip(idx, per_prompt, strict=True)]

    def _group(self, i: int, s: Sample, trajs: list) -> _Group:
        c = self.t.cfg.rl
        if len(trajs) != c.group_size:
            raise TrainingError(f"rollout returned {len(trajs)} trajectories, expected G={c.group_size}")
        scores = [
            score(t.messages, s.question, s.ground_truth, self.judge, self.t.count_tokens, self.t.cfg.reward)
            for t in trajs
        ]
        max_len = c.max_prompt_length + c.max_response_length
        return _Group(
            sample=i,
            rewards=[sc.reward for sc in scores],
            void=[t.n_void_turns > 0 for t in trajs],
            encoded=[encode(self.t.tokenizer, s.prompt + t.messages, len(s.prompt), max_len) for t in trajs],
            answers=[sc.r_answer for sc in scores],
            formats=[sc.r_format for sc in scores],
        )

    def _step(self, step, total, t0, gamma, groups: list[_Group], expert, opt, sched, n_updates, n_samples):
        c = self.t.cfg.rl
        pad = self.t.tokenizer.pad_token_id
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
            for micro in chunk(scored, c.micro_batch_size):
                batch = collate([groups[gi].encoded[j] for gi, j in micro], pad)
                logp, ent = self.t.forward(batch)
                mask = batch.agent_mask.to(self.t.dist.device)
                ent_sum += float((ent * mask).sum())
                ent_tok += float(mask.sum())
                for row, (gi, j) in enumerate(micro):
                    if (gi, j) in wanted:  # trimmed to the sequence: padding width differs between passes
                        old_logp[(gi, j)] = logp[row, : len(groups[gi].encoded[j].input_ids) - 1].detach()

        losses, sft_vals, dapo_vals, clip_vals, norms, n_tokens = [], [], [], [], [], 0
        n = len(groups)
        for part in [list(range(k * n // n_updates, (k + 1) * n // n_updates)) for k in range(n_updates)]:
            if not part and self.t.dist.world == 1:
                continue  # (with several ranks every rank must still join each gradient all-reduce)
            sft_items = [expert[groups[gi].sample] for gi in part]
            n_sft = sum(sum(e.agent_mask[1:]) for e in sft_items)
            sft_v = 0.0
            for micro in chunk(sft_items, c.micro_batch_size):
                batch = collate(micro, pad)
                logp, _ = self.t.forward(batch)
                loss = sft_loss(logp, batch.agent_mask.to(self.t.dist.device), normalizer=n_sft)
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
                for micro in chunk(rl_keys, c.micro_batch_size):
                    batch = collate([groups[gi].encoded[j] for gi, j in micro], pad)
                    logp, _ = self.t.forward(batch)
                    width = logp.shape[1]
                    old = torch.stack(
                        [torch.nn.functional.pad(old_logp[k], (0, width - old_logp[k].shape[0])) for k in micro]
                    )
                    weights = torch.tensor(
                        [1.0 / (k_groups * tok_per_group[gi]) for gi, _ in micro], device=self.t.dist.device
                    ).unsqueeze(-1)
                    mask = batch.agent_mask.to(self.t.dist.device)
                    a = torch.stack([adv[gi, j] for gi, j in micro]).to(self.t.dist.device)
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
            norms.append(self.t.update(opt, sched))

        r = rewards.flatten()
        void_frac = sum(sum(g.void) for g in groups) / max(1, len(groups) * c.group_size)
        self.t.log.step(
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
