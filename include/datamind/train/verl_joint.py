"""The joint objective of eq. 7 inside verl: ``gamma(t) * L_SFT + (1 - gamma(t)) * L_DAPO`` in one actor update.

verl's actor sees only the batch its agent loops produced, so the expert trajectories must travel in that
batch, and the loss must tell them from rollouts. Three registered pieces do it, each through an extension
point verl provides (this module is imported into every verl process through ``VERL_USE_EXTERNAL_MODULES``):

* ``ExpertReplayAgentLoop`` (agent loop ``datamind_tool_agent``): verl's tool agent loop, and for the first
  of a prompt's ``n`` sessions it also returns the prompt's expert trajectory (the export's ``target``),
  tokenised through the same Continuous Token builder a live rollout goes through: assistant turns masked
  in, interpreter replies masked out. verl rewards, groups and filters a session by its *last* output,
  so the expert sample leaves the group's advantages and eq. 5's filter untouched; it is flagged in its
  ``extra_fields``.
* ``JointLoss``: the actor loss. Rollout tokens get verl's own policy loss (the configured mode: DAPO's
  decoupled clip), expert tokens the negative log-likelihood; each is a token mean over its own tokens of
  the step's batch (verl normalises by the batch's token count; the step's expert-token share, measured
  by the trainer, turns that into each population's own mean), and ``losses.combined_loss`` mixes them.
* ``JointSFTTrainer`` (trainer mode ``datamind_sync``): verl's synchronous trainer that, before each actor
  update, computes gamma for the step from ``schedule.gamma_at`` (the ``datamind`` section of the config)
  and hands the actor workers a ``JointLoss`` with it.

Validation runs (off in the generated config) would see the replay as one more sample of the prompt.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo.v1.trainer_base import register_trainer

import datamind.train.verl_plugins  # noqa: F401  (registers the turn format; the tool lives there too)
from datamind.train.losses import combined_loss
from datamind.train.schedule import gamma_at

log = logging.getLogger(__name__)

AGENT_LOOP = "datamind_tool_agent"
TRAINER_MODE = "datamind_sync"
EXPERT_KEY = "expert"  # extra_info key of the row's expert continuation
EXPERT_FLAG = "datamind_expert"  # extra_fields key marking a replayed expert sample


# -- expert samples in the batch -------------------------------------------------------------------------
@register(AGENT_LOOP)
class ExpertReplayAgentLoop(ToolAgentLoop):
    """verl's tool agent loop; session 0 of a prompt with an expert continuation also returns its replay."""

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs) -> Any:
        rollout = await super().run(sampling_params, priority=priority, **kwargs)
        target = (kwargs.get("extra_info") or {}).get(EXPERT_KEY)
        if not target or kwargs.get("session_id") != 0:  # (verl's v1 agent loop numbers a prompt's sessions)
            return rollout
        expert = await self.replay(list(kwargs["raw_prompt"]), list(target))
        # The rollout stays last: verl scores, groups and filters a session by its final output.
        return [expert, rollout]

    async def replay(self, messages: list[dict[str, Any]], target: list[dict[str, Any]]) -> AgentLoopOutput:
        """The expert continuation as verl's loop would have recorded it had the policy written it."""
        schemas = self.tool_schemas
        tools = [tool.tool_schema for tool in self.tools.values()]
        history = list(messages)
        ids = await self.ct_build_initial_tokens(history, tools=schemas)
        mask: list[int] = []
        end = _turn_end_ids(self.tokenizer)
        turns = 0
        for message in target:
            if len(mask) >= self.response_length:
                break
            if message["role"] == "assistant":
                tokens = self.tokenizer.encode(message["content"], add_special_tokens=False) + end
                merged, mask, _ = await self.ct_merge_assistant_token(ids, tokens, mask)
                ids = merged.token_ids
                agent = AgentData(history, None, None, None, None, {}, "expert", {})
                content, agent.tool_calls = await self.tool_parser.extract_tool_calls(tokens, tools)
                history.append(self._build_assistant_message(content, agent))
                turns += 1
            else:
                previous = list(history)
                history.append({"role": "tool", "content": message["content"]})
                merged, mask, _ = await self.ct_merge_context_msg(previous, history, ids, mask, tools=schemas)
                ids = merged.token_ids
                turns += 1
        n = len(mask)
        return AgentLoopOutput(
            prompt_ids=ids[: len(ids) - n],
            response_ids=ids[len(ids) - n :][: self.response_length],
            response_mask=mask[: self.response_length],
            num_turns=turns + 1,
            metrics={},
            extra_fields={EXPERT_FLAG: True},
        )


def _turn_end_ids(tokenizer) -> list[int]:
    """The token(s) that end an assistant turn as the policy emits them: what the chat template writes
    right after an assistant message's text, up to the first special token (``<|im_end|>`` and the like)."""
    marker = "\x00expert-turn-end\x00"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}], tokenize=False
    )
    after = text.split(marker, 1)[1] if marker in text else ""
    special = set(tokenizer.all_special_ids)
    for token in tokenizer.encode(after, add_special_tokens=False):
        if token in special:
            return [token]
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


# -- the loss ----------------------------------------------------------------------------------------------
def expert_rows(data) -> torch.Tensor:
    """``[B]`` bool: which samples of a batch are expert replays (from their ``extra_fields``)."""
    extra = data.get("extra_fields", None)
    if extra is None:
        raise KeyError(
            "the joint SFT+RL loss needs each sample's extra_fields to tell expert replays from rollouts, "
            "and verl did not hand them to the actor"
        )
    items = extra.tolist() if hasattr(extra, "tolist") else list(extra)
    return torch.tensor([_is_expert(e) for e in items], dtype=torch.bool)


def _is_expert(extra_fields) -> bool:
    extra_fields = getattr(extra_fields, "data", extra_fields)  # (a tensordict NonTensorData wraps the dict)
    return bool(isinstance(extra_fields, dict) and extra_fields.get(EXPERT_FLAG))


def expert_token_share(data) -> float:
    """The expert replays' share of a batch's loss tokens (``response_mask``: padded rows or nested)."""
    masks = data["response_mask"]
    counts = [int(m.sum().item()) for m in (masks.unbind() if masks.is_nested else masks)]
    total = sum(counts)
    expert = sum(n for n, e in zip(counts, expert_rows(data).tolist(), strict=True) if e)
    return expert / total if total else 0.0


@dataclass
class JointLoss:
    """The actor loss verl's workers call per micro-batch: ``(model_output, data, dp_group) -> (loss, metrics)``.

    ``expert_share`` is the expert tokens' share of the step's loss tokens: verl normalises a micro-batch's
    sum by the token count of the whole (mini-)batch, and dividing by the share makes that sum part of the
    expert tokens' own mean (likewise ``1 - share`` for rollouts) -- exact when a step is one mini-batch,
    the share of the step otherwise."""

    config: Any  # verl's ActorConfig
    gamma: float
    expert_share: float

    def __call__(self, model_output, data, dp_group=None):
        from verl.utils.metric import AggregationType, Metric
        from verl.workers.utils.padding import no_padding_2_padding

        config = self.config
        if config.loss_agg_mode != "token-mean":
            raise ValueError(f"the joint SFT+RL loss is a token mean; actor.loss_agg_mode is {config.loss_agg_mode}")
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        expert = expert_rows(data)
        config.global_batch_info.update(
            dp_size=data["dp_size"],
            batch_num_tokens=data["batch_num_tokens"],
            global_batch_size=data["global_batch_size"],
            loss_scale_factor=config.loss_scale_factor,
        )
        fields = ["response_mask", "old_log_probs", "advantages"]
        if "rollout_is_weights" in data:
            fields.append("rollout_is_weights")
        padded = data.select(*fields).to_padded_tensor()
        mask = padded["response_mask"].to(bool)
        rows = expert.to(mask.device).unsqueeze(-1)
        expert_mask, policy_mask = mask & rows, mask & ~rows

        zero = (log_prob * 0).sum()
        metrics: dict[str, Any] = {}
        sft = zero
        if self.expert_share > 0 and expert_mask.any():
            nll = agg_loss(-log_prob, expert_mask, "token-mean", **config.global_batch_info)
            sft = nll / self.expert_share
        dapo = zero
        if self.expert_share < 1 and policy_mask.any():
            policy_loss_fn = get_policy_loss_fn(config.policy_loss.get("loss_mode", "vanilla"))
            pg, pg_metrics = policy_loss_fn(
                old_log_prob=padded["old_log_probs"],
                log_prob=log_prob,
                advantages=padded["advantages"],
                response_mask=policy_mask,
                loss_agg_mode="token-mean",
                config=config,
                rollout_is_weights=padded.get("rollout_is_weights", None),
            )
            dapo = pg / (1.0 - self.expert_share)
            metrics.update(Metric.from_dict(pg_metrics, aggregation=AggregationType.MEAN))
        loss = combined_loss(sft, dapo, self.gamma)
        # Each micro-batch holds a slice of the global sums, so the logged values add up (as verl's own).
        metrics["actor/pg_loss"] = Metric(value=dapo, aggregation=AggregationType.SUM)
        metrics["actor/sft_loss"] = Metric(value=sft, aggregation=AggregationType.SUM)
        return loss, metrics


# -- the trainer -------------------------------------------------------------------------------------------
def step_gamma(config, step: int, total_steps: int) -> float:
    """gamma for verl's 1-based ``step`` from the config's ``datamind`` section."""
    joint = config.get("datamind", {}) or {}
    return gamma_at(
        step - 1,
        total_steps,
        joint.get("gamma_schedule", "cosine"),
        float(joint.get("gamma_peak", 0.9)),
        float(joint.get("gamma_valley", 0.05)),
    )


@register_trainer(TRAINER_MODE)
class JointSFTTrainer(get_trainer_cls("sync")):
    """verl's synchronous trainer whose actor update is the joint SFT+DAPO loss with this step's gamma."""

    def _update_actor(self, batch, metrics: dict):
        from verl.utils.config import omega_conf_to_dataclass

        gamma = step_gamma(self.config, self.global_steps, self.total_training_steps)
        share = self._expert_token_share(batch)
        actor = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(JointLoss(actor, gamma, share))
        metrics["actor/sft_gamma"] = gamma
        metrics["actor/expert_token_share"] = share
        with self._samples_per_prompt():
            return super()._update_actor(batch, metrics)

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        with self._samples_per_prompt():
            return super()._get_required_batch_multiple(dp_size)

    @contextmanager
    def _samples_per_prompt(self):
        """verl sizes mini-batches as ``ppo_mini_batch_size * rollout.n`` samples; with the expert replay a
        prompt brings ``n + 1``. Without this a step's batch would be padded up to the next multiple of
        ``mini * n`` -- nearly a second mini-batch of no-op samples, and an extra optimizer update per step."""
        rollout = self.config.actor_rollout_ref.rollout
        if not (self.config.get("datamind", {}) or {}).get("expert_replay"):
            yield
            return
        from omegaconf import open_dict

        n = rollout.n
        with open_dict(rollout):
            rollout.n = n + 1
        try:
            yield
        finally:
            rollout.n = n

    def _expert_token_share(self, batch) -> float:
        from verl.utils.transferqueue_utils import tq

        fields = ["response_mask", "extra_fields"]
        return expert_token_share(
            tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        )
