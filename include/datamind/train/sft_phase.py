"""Phase 1 of the built-in trainer: cold-start SFT on the release's expert trajectories (paper section 4)."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from datamind.shards import chunk
from datamind.train.losses import sft_loss
from datamind.train.tokenization import Encoded, collate

if TYPE_CHECKING:
    from datamind.train.trainer import Trainer


def sft_phase(t: Trainer, data: list[Encoded]) -> None:
    """Phase 1: supervised fine-tuning on the expert turns (agent tokens only; interpreter output is masked)."""
    from transformers import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

    c = t.cfg.sft
    total = t.total_steps(len(data), c.batch_size, c.epochs, c.max_steps)
    opt = t.optimizer(c.learning_rate)
    warmup = math.ceil(c.warmup_ratio * total)
    sched = (
        get_cosine_schedule_with_warmup(opt, warmup, total)
        if c.lr_scheduler == "cosine"
        else get_constant_schedule_with_warmup(opt, warmup)
    )
    t.new_epoch_order()
    pad = t.tokenizer.pad_token_id
    t.log.note(f"phase sft: {total} steps of {c.batch_size} sequences, lr {c.learning_rate:g}")
    for step in range(total):
        t0 = time.perf_counter()
        items = [data[i] for i in t.batch_positions(step, c.batch_size, len(data))]
        n_tok = sum(sum(e.agent_mask[1:]) for e in items)
        loss_v = ent_v = 0.0
        for micro in chunk(items, c.micro_batch_size):
            batch = collate(micro, pad)
            logp, ent = t.forward(batch)
            mask = batch.agent_mask.to(t.dist.device)
            loss = sft_loss(logp, mask, normalizer=n_tok)
            loss.backward()
            loss_v += loss.item()
            ent_v += float((ent * mask).sum()) / max(n_tok, 1)
        lr = sched.get_last_lr()[0]
        norm = t.update(opt, sched)
        t.log.step(
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
        if t.cfg.save_every and (step + 1) % t.cfg.save_every == 0 and step + 1 < total:
            t.save(f"sft-step-{step + 1}")
