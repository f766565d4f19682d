"""The joint objective of eq. 7 inside verl: ``gamma(t) * L_SFT + (1 - gamma(t)) * L_DAPO`` in one actor update.

verl's actor sees only the batch its agent loops produced, so the expert trajectories must travel in that
batch, and the loss must tell them from rollouts. Three registered pieces do it, each through an extension
point verl provides (this module is imported into every verl process through ``VERL_USE_EXTERNAL_MODULES``):

* ``ExpertReplayAgentLoop`` (agent loop ``datamind_tool_agent``): verl's tool agent loop, and for the first
  of a prompt's ``n`` sessions it also returns the prompt's expert trajectory (the export's ``target``),
  tokenised through the same Continuous Token builder a live rollout goes through: assistant turns masked
  in, interpreter replies masked out. verl rewards a session and computes its advantage from its *last*
  output, so the expert sample leaves the group's statistics untouched; it is flagged in its
  ``extra_fields`` and carries the rollout's set of fields.
* ``JointSFTTrainer`` (trainer mode ``datamind_sync``): verl's synchronous trainer that, after the
  advantages, marks which rollouts enter the DAPO term (eq. 5: prompts with some but not all rollouts
  correct, no void turn; ``rl_weights``), and before each actor update computes gamma for the step from
  ``schedule.gamma_at`` (the ``datamind`` section of the config) and hands the actor workers a ``JointLoss``.
* ``JointLoss``: the actor loss. Eligible rollout tokens get verl's own policy loss (the configured mode:
  DAPO's decoupled clip), expert tokens the negative log-likelihood; each is a token mean over its own
  tokens of the step's batch, and ``losses.combined_loss`` mixes them.

Validation runs (off in the generated config) would see the replay as one more sample of the prompt.
"""

from __future__ import annotations

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

AGENT_LOOP = "datamind_tool_agent"
TRAINER_MODE = "datamind_sync"
EXPERT_KEY = "expert"  # extra_info key of the row's expert continuation
EXPERT_FLAG = "datamind_expert"  # extra_fields key marking a replayed expert sample
RL_WEIGHT = "datamind_rl_weight"  # per-sample field: its weight in the DAPO term, 0 outside it (rl_weights)


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
        # The rollout stays last: verl scores a session and computes its advantage from its final output.
        return [_shaped_like(rollout, expert), rollout]

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


def _shaped_like(rollout: AgentLoopOutput, expert: AgentLoopOutput) -> AgentLoopOutput:
    """The replay with the rollout's set of fields: verl stores a session's outputs as one batch whose
    fields are the first output's, so a field only the rollout has (the sampler's log-probs, router
    choices) would be lost for both. Those the replay has no values for are placeholders no loss reads."""
    n = len(expert.response_ids)
    update: dict[str, Any] = {
        "prompt_ids": expert.prompt_ids,
        "response_ids": expert.response_ids,
        "response_mask": expert.response_mask,
        "num_turns": expert.num_turns,
        "metrics": expert.metrics,
        "extra_fields": {**rollout.extra_fields, **expert.extra_fields},
        "reward_score": None,
    }
    if rollout.response_logprobs is not None:
        update["response_logprobs"] = [0.0] * n
    if rollout.routed_experts is not None:
        update["routed_experts"] = rollout.routed_experts[:0]  # (verl pads it with zeros to the sequence)
    return rollout.model_copy(update=update, deep=True)


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


# -- the loss ---------------------------------------------------------------------------------------------
def _extras(data) -> list:
    extra = data.get("extra_fields", None)
    if extra is None:
        raise KeyError(
            "the joint SFT+RL loss needs each sample's extra_fields to tell expert replays from rollouts, "
            "and verl did not hand them to the actor"
        )
    items = extra.tolist() if hasattr(extra, "tolist") else list(extra)
    unwrapped = (getattr(e, "data", e) for e in items)  # (a tensordict NonTensorData wraps the dict)
    return [e if isinstance(e, dict) else {} for e in unwrapped]


def _is_expert(extra: dict) -> bool:
    return bool(extra.get(EXPERT_FLAG))


def expert_rows(data) -> torch.Tensor:
    """``[B]`` bool: which samples of a batch are expert replays (from their ``extra_fields``)."""
    return torch.tensor([_is_expert(e) for e in _extras(data)], dtype=torch.bool)


def _rl_weight(data) -> torch.Tensor:
    weights = data.get(RL_WEIGHT, None)
    if weights is None:
        raise KeyError(f"the joint SFT+RL loss needs {RL_WEIGHT}, which the trainer writes after the advantages")
    return torch.as_tensor(weights, dtype=torch.float32).reshape(-1)


def rl_weights(keys: list[str], extras: list[dict], n_tokens: list[int]) -> list[float]:
    """Each sample's weight in the DAPO term: 0 outside it, else ``N / (K * T_g)`` -- with ``N`` the DAPO
    tokens of the step, ``K`` its eligible prompts and ``T_g`` the DAPO tokens of the sample's prompt, so the
    term (a sum over tokens divided by ``N``) is eq. 5's per-prompt token mean averaged over prompts, as in
    the built-in trainer.

    Eq. 5 as the paper applies it: a prompt's rollouts count when some but not all of them are correct (the
    judge's ``acc``); a rollout with a void turn is masked out entirely; expert replays never count.
    Filtered prompts are not resampled: their expert replays still train the SFT term (section 4: a
    filtered trajectory contributes only the SFT loss), which verl's own group filter, evicting whole
    groups, would drop. Keys are verl's ``{uid}_{session}_{index}``."""
    groups: dict[str, list[int]] = {}
    for i, (key, extra) in enumerate(zip(keys, extras, strict=True)):
        if not _is_expert(extra):
            groups.setdefault(key.rsplit("_", 2)[0], []).append(i)
    eligible: dict[str, list[int]] = {}
    for uid, members in groups.items():
        info = [extras[i].get("reward_extra_info") or {} for i in members]
        correct = sum(1 for r in info if float(r.get("acc", 0.0)) > 0)
        if 0 < correct < len(members):
            kept = [i for i, r in zip(members, info, strict=True) if float(r.get("void", 0.0)) == 0 and n_tokens[i] > 0]
            if kept:
                eligible[uid] = kept
    total = sum(n_tokens[i] for kept in eligible.values() for i in kept)
    weights = [0.0] * len(keys)
    for kept in eligible.values():
        group_tokens = sum(n_tokens[i] for i in kept)
        for i in kept:
            weights[i] = total / (len(eligible) * group_tokens)
    return weights


def _token_counts(data) -> list[int]:
    masks = data["response_mask"]
    return [int(m.sum().item()) for m in (masks.unbind() if masks.is_nested else masks)]


def token_shares(n_tokens: list[int], extras: list[dict], weights: list[float]) -> tuple[float, float]:
    """(expert share, DAPO share) of a batch's loss tokens."""
    total = sum(n_tokens) or 1
    expert = sum(n for n, e in zip(n_tokens, extras, strict=True) if _is_expert(e))
    rl = sum(n for n, w in zip(n_tokens, weights, strict=True) if w > 0)
    return expert / total, rl / total


@dataclass
class JointLoss:
    """The actor loss verl's workers call per micro-batch: ``(model_output, data, dp_group) -> (loss, metrics)``.

    verl normalises a micro-batch's sum by the token count of the whole (mini-)batch; dividing by a
    population's share of those tokens (``expert_share``, ``rl_share``: measured by the trainer over the
    step) makes each term that population's own token mean -- exact when a step is one mini-batch.
    Rollouts outside the DAPO term (weight 0) and interpreter tokens count in neither."""

    config: Any  # verl's ActorConfig
    gamma: float
    expert_share: float
    rl_share: float

    def __call__(self, model_output, data, dp_group=None):
        from verl.utils.metric import AggregationType, Metric
        from verl.workers.utils.padding import no_padding_2_padding

        config = self.config
        if config.loss_agg_mode != "token-mean":
            raise ValueError(f"the joint SFT+RL loss is a token mean; actor.loss_agg_mode is {config.loss_agg_mode}")
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        expert, weight = expert_rows(data), _rl_weight(data)
        rl = weight > 0
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
        expert_mask = mask & expert.to(mask.device).unsqueeze(-1)
        policy_mask = mask & (rl & ~expert).to(mask.device).unsqueeze(-1)

        metrics: dict[str, Any] = {}
        sft = dapo = (log_prob * 0).sum()
        if self.expert_share > 0 and expert_mask.any():
            sft = agg_loss(-log_prob, expert_mask, "token-mean", **config.global_batch_info) / self.expert_share
        if self.rl_share > 0 and policy_mask.any():
            policy_loss_fn = get_policy_loss_fn(config.policy_loss.get("loss_mode", "vanilla"))
            # The per-prompt weighting enters as a per-token factor, with verl's own rollout correction if any.
            token_weight = weight.to(log_prob.device).unsqueeze(-1).expand_as(log_prob)
            if padded.get("rollout_is_weights", None) is not None:
                token_weight = token_weight * padded["rollout_is_weights"]
            pg, pg_metrics = policy_loss_fn(
                old_log_prob=padded["old_log_probs"],
                log_prob=log_prob,
                advantages=padded["advantages"],
                response_mask=policy_mask,
                loss_agg_mode="token-mean",
                config=config,
                rollout_is_weights=token_weight,
            )
            dapo = pg / self.rl_share
            metrics.update(Metric.from_dict(pg_metrics, aggregation=AggregationType.MEAN))
        # A step with no eligible group trains the SFT term alone, still weighted gamma (as the built-in trainer).
        loss = combined_loss(sft, dapo if self.rl_share > 0 else None, self.gamma)
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

    def _compute_advantage(self, batch, metrics: dict):
        """verl's advantages, then each sample's place in the DAPO term (``rl_weights``) next to them; the
        step's token shares come from the same read, for the actor update that follows."""
        from tensordict import TensorDict
        from verl.utils.transferqueue_utils import tq

        batch = super()._compute_advantage(batch, metrics)
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "response_mask"]
        )
        extras, n_tokens = _extras(data), _token_counts(data)
        weights = rl_weights(list(batch.keys), extras, n_tokens)
        self._step_shares = token_shares(n_tokens, extras, weights)
        rollouts = [w for w, e in zip(weights, extras, strict=True) if not _is_expert(e)]
        metrics["actor/rl_sample_frac"] = sum(1 for w in rollouts if w > 0) / max(1, len(rollouts))
        written = TensorDict({RL_WEIGHT: torch.tensor(weights, dtype=torch.float32)}, batch_size=len(weights))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=written)

    def _update_actor(self, batch, metrics: dict):
        from verl.utils.config import omega_conf_to_dataclass

        gamma = step_gamma(self.config, self.global_steps, self.total_training_steps)
        expert_share, rl_share = self._step_shares  # (set by _compute_advantage, which verl runs just before)
        actor = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        self.actor_rollout_wg.set_loss_fn(JointLoss(actor, gamma, expert_share, rl_share))
        metrics["actor/sft_gamma"] = gamma
        metrics["actor/expert_token_share"] = expert_share
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
